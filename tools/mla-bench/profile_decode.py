#!/usr/bin/env python3
"""Where a decode call's time goes: every kernel of ours (FP8 or BF16 path) and of FlashMLA's BF16
dense decode, one call at a time after an L2 flush (peer_flashmla.Timer's method), under
torch.profiler. Prints per call the median duration of each kernel, the gaps between them and the
span from the first kernel's start to the last one's end, and the split kernel's read rate
(cache bytes / its duration). Fitting span = a + bytes / rate over several lengths separates the
per-call constant from the streaming rate.

    PYTHONPATH=.peer/flashmla:.peer/flashmla/tests python3 tools/mla-bench/profile_decode.py \
        --fp8-lib build/tools/mla-bench/libmla_fp8_capi.so --shapes 16:1:8192,16:1:32768

Shapes are H:s_q:L at B = 128 (--batch) or B:H:s_q:L; d_c = 512, d_r = 64, page 64.
"""
import argparse
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_flashmla import Case, Ours as OursBf16, Timer, flashmla_runner  # noqa: E402
from peer_fp8 import Ours as OursFp8, fp8_bytes_per_token  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp8-lib", help="libmla_fp8_capi.so: profile our FP8 decode")
    ap.add_argument("--bf16-lib", help="libmla_decode_capi.so: profile our BF16 decode")
    ap.add_argument("--parts", default="0", help="comma-separated split-part counts to profile ours with "
                    "(0: the library's default)")
    ap.add_argument("--shapes", default="16:1:2048,16:1:8192,16:1:32768",
                    help="H:s_q:L (B = --batch) or B:H:s_q:L, comma-separated")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--calls", type=int, default=9, help="profiled calls per implementation and shape")
    ap.add_argument("--no-peer", action="store_true", help="skip FlashMLA")
    return ap.parse_args()


def is_marker(name):
    """The timer's own kernels: the L2 flush (a fill) and the GPU spin."""
    n = name.lower()
    return "fill" in n or "sleep" in n or "spin" in n


def profile_calls(timer, fn, calls):
    """Kernel (name, start, end) lists, one per call."""
    for _ in range(2):
        timer.once(fn)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            timer.once(fn)
    cuda = torch.autograd.DeviceType.CUDA
    kernels = sorted(((e.name(), e.start_ns() / 1e3, (e.start_ns() + e.duration_ns()) / 1e3)
                      for e in prof.profiler.kineto_results.events() if e.device_type() == cuda), key=lambda k: k[1])
    groups, cur = [], None
    for name, s, e in kernels:
        if is_marker(name):
            if cur:
                groups.append(cur)
            cur = [] if "sleep" in name.lower() or "spin" in name.lower() else None
            continue
        if cur is not None:
            cur.append((name, s, e))
    if cur:
        groups.append(cur)
    return groups


def short(name, width=60):
    name = name.split("(")[0]
    return name if len(name) <= width else name[: width - 3] + "..."


def report(label, groups, cache_bytes):
    if not groups:
        print(f"  {label}: no kernels recorded")
        return
    n = min(len(g) for g in groups)
    groups = [g[:n] for g in groups]
    print(f"  {label}: {len(groups)} calls, {n} kernels each")
    split_us = 0.0
    for i in range(n):
        dur = statistics.median(g[i][2] - g[i][1] for g in groups)
        gap = statistics.median(g[i][1] - g[i - 1][2] for g in groups) if i else 0.0
        print(f"    {short(groups[0][i][0]):<62} {dur:8.1f} us   gap before {gap:5.1f} us")
        split_us = max(split_us, dur)
    span = statistics.median(g[-1][2] - g[0][1] for g in groups)
    print(f"    span {span:.1f} us; longest kernel {split_us:.1f} us = {cache_bytes / split_us / 1e3:.0f} GB/s of cache")
    return span, split_us


def main():
    args = parse_args()
    timer = Timer()
    fp8 = OursFp8(args.fp8_lib) if args.fp8_lib else None
    bf16 = OursBf16(args.bf16_lib) if args.bf16_lib else None
    print(f"device: {torch.cuda.get_device_properties(0).name}")
    for i, spec in enumerate(args.shapes.split(",")):
        f = [int(x) for x in spec.split(":")]
        B, (H, sq, L) = (args.batch, f) if len(f) == 3 else (f[0], f[1:])
        c = Case(B, H, sq, 512, 64, L, 64, seed=5000 + i)
        print(f"B={B} H={H} s_q={sq} L={L}")
        for parts in (int(x) for x in args.parts.split(",")):
            if fp8:
                run, used = fp8.prepare(c, parts)
                report(f"ours FP8 ({used} parts)", profile_calls(timer, run, args.calls),
                       B * L * fp8_bytes_per_token(512, 64))
            if bf16:
                run, used = bf16.prepare(c, 0, parts)
                report(f"ours BF16 ({used} parts)", profile_calls(timer, run, args.calls), B * L * 576 * 2)
        if not args.no_peer:
            report("FlashMLA BF16", profile_calls(timer, flashmla_runner(c), args.calls), B * L * 576 * 2)


if __name__ == "__main__":
    main()
