#!/usr/bin/env python3
"""Times our BF16 paged MLA decode beside FlashMLA's flash_mla_with_kvcache, in one process.

Both run on the same device tensors (queries, paged cache, page table, lengths) on the same
stream, interleaved call by call (the order alternates), each call after an L2 flush and a
short GPU spin so that host-side launch work never shows in the timed region; CUDA events
around the call; median over runs, and the ratio FlashMLA / ours as the median of each round's
pair with a 95% bootstrap interval (the pair ran back to back, under the same clock and power
state; paired_ratio). The device's copy bandwidth and bf16 GEMM rate are measured
in the same process and give each shape's roofline floor.

Ours is reached through tools/mla-bench/libmla_decode_capi.so (a C entry point to
kernels::mla_decode_bf16, ctypes): no torch extension to build, and the exact launcher other
code calls. FlashMLA comes from a local build (PYTHONPATH), never from this repository.

Shapes (--suite issue10): H in {16, 64, 128} x L in {4K, 8K, 32K} x s_q in {1, 2} at d_c = 512,
d_r = 64, B = 128, page 64; and the TPLA ranks (ours: H = 128 at d_c = 256, H = 64 at d_c = 256,
H = 128 at d_c = 128) against FlashMLA's head-parallel rank of the same tensor-parallel degree
(H = 64 or 32 at d_c = 512): per-device time.

    PYTHONPATH=.peer/flashmla python3 tools/mla-bench/peer_flashmla.py \
        --lib build/tools/mla-bench/libmla_decode_capi.so --suite issue10 --json out.json
"""
import argparse
import ctypes
import json
import math
import random
import statistics
import sys

import torch


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libmla_decode_capi.so")
    ap.add_argument("--suite", default="issue10", choices=["issue10", "quick", "manyhead", "dc512"], help="which shapes")
    add_l2_resident_arg(ap)
    ap.add_argument("--runs", type=int, default=30, help="timed calls per implementation and shape (median)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--variant", type=int, default=0, help="our kernel variant (Bf16DecodeParams::variant)")
    ap.add_argument("--no-peer", action="store_true", help="time ours only (FlashMLA not importable)")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--only", help="run just this shape (any suite's name, e.g. h128_sq1_l8k), for profilers")
    ap.add_argument("--base-lib", help="a second build of ours (e.g. the commit before a change), timed in the "
                    "same interleaved run; prints its time, base / ours, and whether the outputs are bit-identical")
    ap.add_argument("--base-variant", type=int, help="the base's kernel variant (default: --variant); with --base-lib "
                    "the same library, an A/B of two variants in one process (e.g. --variant 8 --base-variant 0)")
    ap.add_argument("--no-ceilings", action="store_true", help="skip the copy / GEMM ceilings (profiler runs)")
    return ap.parse_args()


def with_parts(parts, ws_bytes, parts_override):
    """(parts, workspace bytes) for a run with parts_override split parts (> 0) instead of the
    library's default: the workspace grows with the parts (split partials), so it is scaled up
    by the ratio with 1 MiB to spare; the library refuses a workspace that is still too small."""
    if parts_override <= 0:
        return parts, ws_bytes
    return parts_override, ctypes.c_size_t(ws_bytes.value * max(1, -(-parts_override // parts)) + (1 << 20))


class Ours:
    """Our BF16 decode through the C API. When the library has the planned entry points (the schedule
    computed once per decode step, as FlashMLA's get_mla_metadata), prepare() plans once, untimed,
    and the timed call is the planned one, as serving runs it; an older library (--base-lib of a
    commit before them) times the call with its scheduler."""
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.mla_decode_capi_parts.restype = ctypes.c_int
        self.lib.mla_decode_capi_parts.argtypes = [ctypes.c_int] * 6 + [ctypes.POINTER(ctypes.c_size_t)]
        argtypes = ([ctypes.c_void_p] * 6 + [ctypes.c_int] * 8 + [ctypes.c_float, ctypes.c_int, ctypes.c_int,
                    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t])
        self.planned = hasattr(self.lib, "mla_decode_capi_plan")
        names = (["mla_decode_capi_plan", "mla_decode_capi_run_planned"] if self.planned else []) + ["mla_decode_capi_run"]
        for name in names:
            f = getattr(self.lib, name)
            f.restype = ctypes.c_int
            f.argtypes = argtypes
        self.err = ctypes.create_string_buffer(1024)

    def prepare(self, case, variant, parts_override=0):
        """parts_override > 0: that many split parts instead of the library's default."""
        ws_bytes = ctypes.c_size_t(0)
        parts = self.lib.mla_decode_capi_parts(case.batch, case.s_q, case.heads, case.d_c, case.d_r, variant,
                                               ctypes.byref(ws_bytes))
        if parts <= 0:
            raise RuntimeError(f"mla_decode_capi_parts failed for {case.name}")
        parts, ws_bytes = with_parts(parts, ws_bytes, parts_override)
        ws = torch.empty(ws_bytes.value, dtype=torch.uint8, device="cuda")
        out = torch.empty(case.batch, case.s_q, case.heads, case.d_c, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(case.batch, case.s_q, case.heads, dtype=torch.float32, device="cuda")
        c = case
        args = (c.q.data_ptr(), c.cache.data_ptr(), c.table.data_ptr(), c.seqlens.data_ptr(), out.data_ptr(),
                lse.data_ptr(), c.batch, c.s_q, c.heads, c.d_c, c.d_r, c.num_pages, c.page, c.max_pages,
                c.scale, variant, parts, ws.data_ptr(), ws_bytes.value)

        def call(f, what):
            stream = torch.cuda.current_stream().cuda_stream
            if f(*args, ctypes.c_void_p(stream), self.err, 1024) != 0:
                raise RuntimeError(f"{what} ({case.name}): {self.err.value.decode()}")

        if self.planned:
            call(self.lib.mla_decode_capi_plan, "mla_decode_bf16_plan")  # once, untimed
            f, what = self.lib.mla_decode_capi_run_planned, "mla_decode_bf16 (planned)"
        else:
            f, what = self.lib.mla_decode_capi_run, "mla_decode_bf16"

        def run():
            call(f, what)
            return out, lse

        run.keep = (ws, out, lse)
        return run, parts


def add_l2_resident_arg(ap):
    """--l2-resident, shared by the peer scripts (Case's l2_resident)."""
    ap.add_argument("--l2-resident", action="store_true",
                    help="every request reads request 0's pages (L2-resident): the kernels' floor without HBM "
                         "traffic, beside FlashMLA on the same table; the %%floor columns then do not apply")


def l2_resident_note(enabled):
    """The line printed (and the flag recorded) when --l2-resident is on: the floors are HBM's."""
    if enabled:
        print("--l2-resident: every request reads request 0's pages (the cache stays in L2); the floor "
              "columns are HBM's, so a time near the HBM run's means the kernel's own chain bounds it", flush=True)
    return bool(enabled)


class Case:
    """A random paged decode problem: pages a random permutation of the pool (FlashMLA's tests'
    layout), values randn / 10 clamped to [-1, 1] (their data), all requests of length L.
    l2_resident: every request's page table is request 0's, so the pages read fit in L2 and the
    time is the kernel's floor without HBM (the same work on the same values; not a real batch)."""

    def __init__(self, batch, heads, s_q, d_c, d_r, seqlen, page, seed, l2_resident=False):
        self.batch, self.heads, self.s_q, self.d_c, self.d_r, self.seqlen, self.page = (
            batch, heads, s_q, d_c, d_r, seqlen, page)
        self.dim = d_c + d_r
        self.name = f"B={batch} H={heads} s_q={s_q} d_c={d_c} L={seqlen}"
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.max_pages = (seqlen + page - 1) // page
        self.num_pages = batch * self.max_pages
        perm = torch.randperm(self.num_pages, device="cuda", generator=g).to(torch.int32)
        self.table = perm.view(batch, self.max_pages).contiguous()
        if l2_resident:  # every request reads request 0's pages: one request's cache, L2-resident
            self.table = self.table[:1].expand(batch, -1).contiguous()
        self.seqlens = torch.full((batch,), seqlen, dtype=torch.int32, device="cuda")
        self.cache = (torch.randn(self.num_pages, page, 1, self.dim, device="cuda", generator=g) / 10).clamp_(-1, 1)
        self.cache = self.cache.to(torch.bfloat16)
        self.q = (torch.randn(batch, s_q, heads, self.dim, device="cuda", generator=g) / 10).clamp_(-1, 1)
        self.q = self.q.to(torch.bfloat16)
        self.scale = 1.0 / math.sqrt(self.dim)
        self.rows = s_q * heads
        self.bytes = batch * seqlen * self.dim * 2 + batch * self.rows * (self.dim * 2 + d_c * 2 + 4)
        self.flops = 2.0 * batch * self.rows * seqlen * (self.dim + d_c)


def flashmla_runner(case):
    import flash_mla
    sched, _ = flash_mla.get_mla_metadata()

    def run():
        return flash_mla.flash_mla_with_kvcache(case.q, case.cache, case.table, case.seqlens, case.d_c, sched, None,
                                                softmax_scale=case.scale, causal=case.s_q > 1)

    run()  # the first call computes and keeps the tile-scheduler metadata (not timed, as in serving)
    return run


class Timer:
    def __init__(self):
        props = torch.cuda.get_device_properties(0)
        self.flush = torch.empty(2 * props.L2_cache_size, dtype=torch.uint8, device="cuda")
        self.a = torch.cuda.Event(enable_timing=True)
        self.b = torch.cuda.Event(enable_timing=True)

    def once(self, fn):
        self.flush.zero_()
        torch.cuda._sleep(200_000)  # ~0.1 ms of GPU spin: the host enqueues fn before the GPU gets there
        self.a.record()
        fn()
        self.b.record()
        self.b.synchronize()
        return self.a.elapsed_time(self.b) * 1e3


def ceilings(timer):
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    copy_us = statistics.median(timer.once(lambda: dst.copy_(src)) for _ in range(15))
    del src, dst
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    gemm_us = statistics.median(timer.once(lambda: torch.matmul(a, b)) for _ in range(15))
    return {"copy_gbs": 2.0 * n / (copy_us * 1e-6) / 1e9, "gemm_tflops": 2.0 * 8192**3 / (gemm_us * 1e-6) / 1e12}


def interleaved_times(timer, fns, runs, warmup):
    """Every timed call of each fn: runs rounds, each calling every fn once, the order reversed
    every other round (so neither kernel always follows the other)."""
    for _ in range(warmup):
        for f in fns:
            f()
    times = [[] for _ in fns]
    for r in range(runs):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            times[i].append(timer.once(fns[i]))
    return times


def summarize(times):
    """Median and (min, max) of each fn's calls, from interleaved_times."""
    return [statistics.median(t) for t in times], [(min(t), max(t)) for t in times]


def interleaved(timer, fns, runs, warmup):
    """Median and (min, max) of each fn's interleaved calls (interleaved_times)."""
    return summarize(interleaved_times(timer, fns, runs, warmup))


def paired_ratio(num, den, reps=2000, seed=0):
    """Median over rounds of num[r] / den[r] (two kernels' times in the same round, so both saw
    the same clock and power state: on an H200 under its power cap the medians of either kernel
    move by 5-20% with what ran before, docs/gpu-notes.md session 14) and its 95% bootstrap
    interval (rounds resampled with replacement, percentile method)."""
    ratios = [a / b for a, b in zip(num, den)]
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(reps))
    return statistics.median(ratios), boots[int(0.025 * reps)], boots[int(0.975 * reps) - 1]


def roofline(case, ceil):
    t_mem = case.bytes / (ceil["copy_gbs"] * 1e9) * 1e6
    t_math = case.flops / (ceil["gemm_tflops"] * 1e12) * 1e6
    return max(t_mem, t_math), ("memory" if t_mem >= t_math else "math")


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)).item()


def suite(name):
    B, P = 128, 64
    if name == "quick":
        return [("h128_sq1_l8k", (B, 128, 1, 512, 8192), (B, 128, 1, 512, 8192)),
                ("tpla_tp2_h128_dc256_l32k", (B, 128, 1, 256, 32768), (B, 64, 1, 512, 32768))]
    if name == "dc512":  # the d_c = 512 many-head shapes (the v6 path)
        return [(n, (B, H, sq, 512, L), (B, H, sq, 512, L)) for n, H, sq, L in
                (("h128_sq1_l8k", 128, 1, 8192), ("h128_sq2_l8k", 128, 2, 8192), ("h64_sq2_l8k", 64, 2, 8192),
                 ("h128_sq1_l32k", 128, 1, 32768), ("h64_sq1_l8k", 64, 1, 8192))]
    if name == "manyhead":  # the shapes the wgmma paths run (v6, v7), for schedule changes
        return [("h64_sq2_l8k", (B, 64, 2, 512, 8192), (B, 64, 2, 512, 8192)),
                ("h128_sq1_l8k", (B, 128, 1, 512, 8192), (B, 128, 1, 512, 8192)),
                ("h128_sq2_l8k", (B, 128, 2, 512, 8192), (B, 128, 2, 512, 8192)),
                ("h128_sq1_l32k", (B, 128, 1, 512, 32768), (B, 128, 1, 512, 32768)),
                ("h64_sq1_l8k", (B, 64, 1, 512, 8192), (B, 64, 1, 512, 8192)),
                ("h16_sq2_l8k", (B, 16, 2, 512, 8192), (B, 16, 2, 512, 8192)),
                ("tpla_tp2_h128_dc256_l8k", (B, 128, 1, 256, 8192), (B, 64, 1, 512, 8192)),
                ("tpla_tp2_h128_dc256_l32k", (B, 128, 1, 256, 32768), (B, 64, 1, 512, 32768)),
                ("tpla_tp4_h64_dc256_l32k", (B, 64, 1, 256, 32768), (B, 32, 1, 512, 32768)),
                ("tpla_tp4_h128_dc128_l32k", (B, 128, 1, 128, 32768), (B, 32, 1, 512, 32768))]
    out = []
    for L in (4096, 8192, 32768):
        for H in (16, 64, 128):
            for sq in (1, 2):
                out.append((f"h{H}_sq{sq}_l{L // 1024}k", (B, H, sq, 512, L), (B, H, sq, 512, L)))
    for L in (8192, 32768):
        out.append((f"tpla_tp2_h128_dc256_l{L // 1024}k", (B, 128, 1, 256, L), (B, 64, 1, 512, L)))
        out.append((f"tpla_tp4_h64_dc256_l{L // 1024}k", (B, 64, 1, 256, L), (B, 32, 1, 512, L)))
        out.append((f"tpla_tp4_h128_dc128_l{L // 1024}k", (B, 128, 1, 128, L), (B, 32, 1, 512, L)))
    return out


def main():
    args = parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    ours = Ours(args.lib)
    base = Ours(args.base_lib) if args.base_lib else None
    timer = Timer()
    peer_ok = not args.no_peer
    if peer_ok:
        try:
            import flash_mla  # noqa: F401
        except ImportError as e:
            print(f"FlashMLA not importable ({e}): timing ours only", file=sys.stderr)
            peer_ok = False
    props = torch.cuda.get_device_properties(0)
    ceil = {"copy_gbs": float("nan"), "gemm_tflops": float("nan")} if args.no_ceilings else ceilings(timer)
    print(f"device: {props.name}, {props.multi_processor_count} SMs; ceilings (same process): copy "
          f"{ceil['copy_gbs']:.0f} GB/s (read + write, 1 GiB), bf16 GEMM 8192^3 {ceil['gemm_tflops']:.1f} TFLOP/s",
          flush=True)
    print(f"ours: {'planned calls (schedule once per step, untimed)' if ours.planned else 'calls with their scheduler'}"
          + (f"; base: {'planned' if base.planned else 'with its scheduler'}" if base else ""), flush=True)
    results = {"device": props.name, "ceilings": ceil, "runs": args.runs, "variant": args.variant,
               "base_variant": args.base_variant,
               "ours_planned": ours.planned, "base_planned": base.planned if base else None,
               "l2_resident": l2_resident_note(args.l2_resident), "shapes": {}}
    hdr = (f"{'shape':<26} {'ours us':>9} {'floor us':>9} {'ours % floor':>12} {'FlashMLA us':>11} "
           f"{'FM % floor':>10} {'FM / ours':>9}  check")
    print(hdr)
    shapes = suite(args.suite)
    if args.only:
        shapes = [s for s in suite("issue10") + suite("manyhead") if s[0] == args.only][:1]
        if not shapes:
            sys.exit(f"--only {args.only}: no such shape (see suite())")
    for idx, (name, our_shape, peer_shape) in enumerate(shapes):
        try:
            results["shapes"][name] = run_shape(idx, name, our_shape, peer_shape, ours, timer, ceil, args, peer_ok,
                                                base)
        except Exception as e:  # report and go on with the other shapes
            print(f"{name:<26} FAILED: {e}", flush=True)
            results["shapes"][name] = {"error": str(e)}
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def run_shape(idx, name, our_shape, peer_shape, ours, timer, ceil, args, peer_ok, base=None):
    """Times one shape (ours, and FlashMLA on its peer shape); returns its figures."""
    B, H, sq, dc, L = our_shape
    mine = Case(B, H, sq, dc, 64, L, 64, seed=1000 + idx, l2_resident=args.l2_resident)
    run_ours, parts = ours.prepare(mine, args.variant)
    fns, peer_case, check = [run_ours], None, ""
    if peer_ok:
        if peer_shape == our_shape:
            peer_case = mine
        else:
            pB, pH, psq, pdc, pL = peer_shape
            peer_case = Case(pB, pH, psq, pdc, 64, pL, 64, seed=2000 + idx, l2_resident=args.l2_resident)
        fns.append(flashmla_runner(peer_case))
        if peer_case is mine:  # same inputs: the two outputs must agree to bf16 rounding
            o1, l1 = run_ours()
            o2, l2 = fns[1]()
            torch.cuda.synchronize()
            check = f"out rel_l2 {rel_l2(o1, o2):.1e}, lse max|d| {(l1 - l2.transpose(1, 2)).abs().max().item():.1e}"
    if base is not None:  # last in fns: the peer stays at index 1
        run_base, _ = base.prepare(mine, args.variant if args.base_variant is None else args.base_variant)
        o1, l1 = run_ours()
        o1, l1 = o1.clone(), l1.clone()
        o2, l2 = run_base()
        torch.cuda.synchronize()
        same = torch.equal(o1.view(torch.int16), o2.view(torch.int16)) and torch.equal(l1, l2)
        check += (", " if check else "") + ("base: bit-identical" if same else
                                            f"base: DIFFERS (out rel_l2 {rel_l2(o1, o2):.1e})")
        fns.append(run_base)
    times = interleaved_times(timer, fns, args.runs, args.warmup)
    med, rng = summarize(times)
    floor, bound = roofline(mine, ceil)
    row = {"ours_shape": our_shape, "ours_us": med[0], "ours_range_us": rng[0], "parts": parts,
           "floor_us": floor, "bound": bound, "ours_frac_floor": floor / med[0],
           "ours_tflops": mine.flops / (med[0] * 1e-6) / 1e12, "ours_gbs": mine.bytes / (med[0] * 1e-6) / 1e9}
    line = f"{name:<26} {med[0]:9.1f} {floor:9.1f} {100 * floor / med[0]:11.1f}%"
    if peer_case is not None:
        pfloor, pbound = roofline(peer_case, ceil)
        row.update({"peer_shape": peer_shape, "flashmla_us": med[1], "flashmla_range_us": rng[1],
                    "flashmla_floor_us": pfloor, "flashmla_frac_floor": pfloor / med[1],
                    "ratio_flashmla_over_ours": med[1] / med[0], "check": check})
        pr = paired_ratio(times[1], times[0])
        row["paired_flashmla_over_ours"] = {"median": pr[0], "ci95": [pr[1], pr[2]]}
        line += (f" {med[1]:11.1f} {100 * pfloor / med[1]:9.1f}% {med[1] / med[0]:8.2f}x "
                 f"(paired {pr[0]:.3f} [{pr[1]:.3f}, {pr[2]:.3f}])  {check}")
    if base is not None:
        pb = paired_ratio(times[-1], times[0])
        row.update({"base_us": med[-1], "base_range_us": rng[-1], "ratio_base_over_ours": med[-1] / med[0],
                    "paired_base_over_ours": {"median": pb[0], "ci95": [pb[1], pb[2]]}})
        line += f"  | base {med[-1]:.1f} us, base / ours {med[-1] / med[0]:.3f} (paired {pb[0]:.3f} [{pb[1]:.3f}, {pb[2]:.3f}])"
    print(line, flush=True)
    return row


if __name__ == "__main__":
    main()
