#!/usr/bin/env python3
"""Does the interleaved timing of peer_flashmla.py penalise the kernel that follows the other?
Times ours (planned) and FlashMLA on one shape three ways in one process: each alone (runs back to
back), then interleaved as peer_flashmla.py does (order alternating), all with its L2 flush and
GPU spin before every call; prints the medians. Run nvidia-smi beside it to see the clocks.

    PYTHONPATH=.peer/flashmla:.peer/flashmla/tests python3 tools/mla-bench/order_effect.py \\
        --lib build/tools/mla-bench/libmla_decode_capi.so --shape 128:1:32768
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_flashmla import Case, Ours, Timer, flashmla_runner, interleaved  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shape", default="128:1:32768", help="H:s_q:L (B = 128), comma-separated")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    ours, timer = Ours(args.lib), Timer()
    print(f"device: {torch.cuda.get_device_properties(0).name}")
    for i, spec in enumerate(args.shape.split(",")):
        H, sq, L = (int(x) for x in spec.split(":"))
        c = Case(128, H, sq, 512, 64, L, 64, seed=9000 + i)
        run, _ = ours.prepare(c, 0)
        fm = flashmla_runner(c)
        for f in (run, fm):
            for _ in range(3):
                timer.once(f)
        alone = [statistics.median(timer.once(f) for _ in range(args.runs)) for f in (run, fm)]
        inter, _ = interleaved(timer, [run, fm], args.runs, 3)
        alone2 = [statistics.median(timer.once(f) for _ in range(args.runs)) for f in (run, fm)]
        print(f"H={H} s_q={sq} L={L}: ours alone {alone[0]:.1f} / {alone2[0]:.1f} us, interleaved {inter[0]:.1f}; "
              f"FlashMLA alone {alone[1]:.1f} / {alone2[1]:.1f}, interleaved {inter[1]:.1f}; FlashMLA / ours alone "
              f"{alone[1] / alone[0]:.3f}, interleaved {inter[1] / inter[0]:.3f}", flush=True)
        del c
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
