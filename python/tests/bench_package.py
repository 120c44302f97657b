#!/usr/bin/env python3
"""Times flash_mla_with_kvcache (this package) on FlashMLA's dense-decoding performance shapes.

Per shape: the GPU time of one call (a CUDA graph of the call replayed, CUDA events, the median
of --runs replays, each after an L2 flush), the host time of one eager call (the Python checks
and the ctypes launch, the median over --runs calls, synchronised), and the same GPU time for
the call's own entry point where the shape has one kernel call. The call's FlashMLASchedMeta is
made once per shape and reused, as FlashMLA's own timing does, so the timed flash_mla_with_kvcache
calls are planned (no scheduler launch); the own entry's calls schedule themselves. Shapes: B = 128, H = 128,
d_c = 512, d_r = 64, page 64, all requests of length L; s_q 1, s_q 2 causal (the kernel's MTP rule,
one call) and s_q 2 not causal (each query token its own request: the cache read twice).

    MLA_TOOLCHAIN_LIB_DIR=<dir of libmla_decode_capi.so> PYTHONPATH=python python3 python/tests/bench_package.py
"""
import argparse
import json
import statistics
import time

import torch

import mla_toolchain as mt


def make(b, s_q, h, L, d_c=512, d_r=64, page=64, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    pages = (L + page - 1) // page
    table = torch.randperm(b * pages, device="cuda", generator=g).to(torch.int32).view(b, pages)
    cache = (torch.randn(b * pages, page, 1, d_c + d_r, device="cuda", generator=g) / 10).to(torch.bfloat16)
    q = (torch.randn(b, s_q, h, d_c + d_r, device="cuda", generator=g) / 10).to(torch.bfloat16)
    lens = torch.full((b,), L, dtype=torch.int32, device="cuda")
    return q, cache, table, lens


def gpu_us(fn, runs, flush):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(runs):
        flush.zero_()
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def host_us(fn, runs):
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    rows = []
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"{'shape':<34} {'GPU us':>8} {'own entry us':>12} {'eager host us':>13}")
    for L in (4096, 8192, 16384, 32768):
        for s_q, causal in ((1, False), (2, True), (2, False)):
            q, cache, table, lens = make(128, s_q, 128, L)
            meta, _ = mt.get_mla_metadata()
            call = lambda: mt.flash_mla_with_kvcache(q, cache, table, lens, 512, meta, None, causal=causal)  # noqa
            row = {"B": 128, "H": 128, "s_q": s_q, "causal": causal, "L": L,
                   "gpu_us": gpu_us(call, args.runs, flush), "host_us": host_us(call, args.runs)}
            if s_q == 1 or causal:
                own = lambda: mt.mla_decode_with_kvcache(q, cache, table, lens, 512)  # noqa: E731
                row["own_entry_gpu_us"] = gpu_us(own, args.runs, flush)
            name = f"B=128 H=128 s_q={s_q} causal={int(causal)} L={L}"
            own_s = f"{row['own_entry_gpu_us']:12.1f}" if "own_entry_gpu_us" in row else f"{'-':>12}"
            print(f"{name:<34} {row['gpu_us']:8.1f} {own_s} {row['host_us']:13.1f}", flush=True)
            rows.append(row)
            del q, cache, table, lens
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "runs": args.runs, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
