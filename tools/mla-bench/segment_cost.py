#!/usr/bin/env python3
"""The per-request (segment) constant of our BF16 decode beside FlashMLA's: the same cache bytes
split into more, shorter requests (B x L constant), every part holding whole requests (parts =
--parts, a divisor of each B), ours (planned) and FlashMLA interleaved in one process after an L2
flush (peer_flashmla.Timer). Fitting time = a + n_segments_per_part * c separates the per-segment
cost c from the streaming time a; FlashMLA is fitted the same way on the same tables.

    PYTHONPATH=.peer/flashmla:.peer/flashmla/tests python3 tools/mla-bench/segment_cost.py \\
        --lib build/tools/mla-bench/libmla_decode_capi.so --heads 128
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_flashmla import Case, Ours, Timer, flashmla_runner, interleaved  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--s-q", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=128 * 4096, help="B x L, constant over the shapes")
    ap.add_argument("--batches", default="128,256,512,1024")
    ap.add_argument("--parts", type=int, default=64)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    ours, timer = Ours(args.lib), Timer()
    print(f"device: {torch.cuda.get_device_properties(0).name}; H={args.heads} s_q={args.s_q}, B x L = {args.tokens}, "
          f"{args.parts} parts (ours{', planned' if ours.planned else ''})")
    print(f"{'B':>5} {'L':>6} {'req/part':>8} {'ours us':>9} {'FlashMLA us':>11} {'FM / ours':>9} {'ours - FM':>9}")
    for i, B in enumerate(int(x) for x in args.batches.split(",")):
        L = args.tokens // B
        c = Case(B, args.heads, args.s_q, 512, 64, L, 64, seed=7000 + i)
        run, parts = ours.prepare(c, 0, args.parts)
        med, _ = interleaved(timer, [run, flashmla_runner(c)], args.runs, 3)
        print(f"{B:5d} {L:6d} {B / parts:8.1f} {med[0]:9.1f} {med[1]:11.1f} {med[1] / med[0]:8.2f}x {med[0] - med[1]:9.1f}",
              flush=True)
        del c
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
