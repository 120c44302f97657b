#!/usr/bin/env python3
"""FlashMLA absorb-only decode on the shared-prefix shapes of `mla-bench --prefix`.

The cache has the layout mla-bench --prefix gives its absorb-only view: the prefix's whole pages
shared by every request (one copy, the same page ids in every row of the page table), then per
request private pages (the prefix's partial last page copied, then its own tokens), in a random
permutation. Each call after an L2 flush and a short GPU spin, CUDA events around the call,
median of runs (Timer of peer_flashmla.py). FlashMLA comes from a local build (PYTHONPATH).

    PYTHONPATH=.peer/flashmla python3 tools/mla-bench/prefix_flashmla.py --json out.json
"""
import argparse
import json
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_flashmla import Timer  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--prefix-len", type=int, nargs="+", default=[26472, 4096])
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--suffix", type=int, default=512)
    ap.add_argument("--sq", type=int, default=1)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--json", help="write every figure here")
    return ap.parse_args()


def main():
    a = parse_args()
    import flash_mla

    d_c, d_r = 512, 64
    dim = d_c + d_r
    timer = Timer()
    results = []
    for H in a.heads:
        for L in a.prefix_len:
            for B in a.batches:
                g = torch.Generator(device="cuda").manual_seed(B * 7 + H)
                shared = L // a.page
                private_tokens = L - shared * a.page + a.suffix
                private = (private_tokens + a.page - 1) // a.page
                num_pages = shared + B * private
                cache = (torch.rand(num_pages, a.page, 1, dim, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
                perm = torch.randperm(B * private, device="cuda", generator=g).to(torch.int32) + shared
                table = torch.cat([torch.arange(shared, device="cuda", dtype=torch.int32).expand(B, shared),
                                   perm.view(B, private)], dim=1).contiguous()
                seqlens = torch.full((B,), L + a.suffix, dtype=torch.int32, device="cuda")
                q = ((torch.rand(B, a.sq, H, dim, device="cuda", generator=g) * 2 - 1) * 0.05).to(torch.bfloat16)
                scale = 1.0 / math.sqrt(128 + 64)
                sched, _ = flash_mla.get_mla_metadata()

                def run():
                    return flash_mla.flash_mla_with_kvcache(q, cache, table, seqlens, d_c, sched, None,
                                                            softmax_scale=scale, causal=a.sq > 1)

                run()  # computes and keeps the tile-scheduler metadata (not timed, as in serving)
                torch.cuda.synchronize()
                for _ in range(2):
                    run()
                us = statistics.median(timer.once(run) for _ in range(a.runs))
                flops = 2.0 * B * a.sq * H * (L + a.suffix) * (dim + d_c)
                r = {"heads": H, "prefix": L, "suffix": a.suffix, "batch": B, "s_q": a.sq, "flashmla_us": us,
                     "flashmla_tflops": flops / (us * 1e-6) / 1e12}
                results.append(r)
                print(f"flashmla absorb-only H={H} L_s={L} own={a.suffix} B={B}: {us:.1f} us, "
                      f"{r['flashmla_tflops']:.1f} TFLOP/s", flush=True)
                del cache, q, table, seqlens, sched
                torch.cuda.empty_cache()
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "results": results}, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
