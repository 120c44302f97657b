#!/usr/bin/env python3
"""Power, SM clock and time per call of ours (planned) and FlashMLA, each run alone for a few seconds.

Why: on an H200 under its software power cap the SM clock follows the power drawn (session 14,
call 12: 1470-1980 MHz), so at long, math-bound shapes a kernel that draws more power per unit of
work runs at a lower clock, whatever its schedule. This script runs each kernel back to back (no
L2 flush: every shape here reads far more than L2) for --seconds, timing groups of calls with CUDA
events, while nvidia-smi samples power and SM clock every 100 ms; it prints per kernel and shape
the median time per call, the mean power and clock over the phase's second half (after the clock
has settled), the energy per call, and the throttle reasons seen; first the device's copy bandwidth
and GEMM rate (peer_flashmla.ceilings) in the same process. Kernels alternate A B A B so a
drift over the run shows.

    PYTHONPATH=.peer/flashmla:.peer/flashmla/tests python3 tools/mla-bench/power_draw.py \\
        --lib build/tools/mla-bench/libmla_decode_capi.so --shape 128:1:32768,128:1:8192
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_flashmla import Case, Ours, Timer, ceilings, flashmla_runner  # noqa: E402


class Sampler:
    """nvidia-smi every 100 ms in the background; samples tagged with host time."""

    def __init__(self):
        self.samples = []  # (t, sm_mhz, watts, reasons)
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active",
             "--format=csv,noheader,nounits", "-lms", "100", "-i", str(torch.cuda.current_device())],
            stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [x.strip() for x in line.split(",")]
            try:
                self.samples.append((time.time(), float(parts[0]), float(parts[1]), parts[2]))
            except (ValueError, IndexError):
                pass

    def between(self, t0, t1):
        return [s for s in self.samples if t0 <= s[0] <= t1]

    def stop(self):
        self.proc.terminate()


def run_phase(fn, seconds, group=8):
    """Calls fn back to back for `seconds`; returns (per-call times of each group in us, t_start, t_end)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        a.record()
        for _ in range(group):
            fn()
        b.record()
        b.synchronize()
        per_call.append(a.elapsed_time(b) * 1e3 / group)
    return per_call, t0, time.time()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shape", default="128:1:32768", help="H:s_q:L (B = 128, d_c = 512), comma-separated")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each kernel's phase")
    ap.add_argument("--rounds", type=int, default=2, help="A B phases per shape")
    ap.add_argument("--variant", type=int, default=0, help="our kernel variant (Bf16DecodeParams::variant)")
    args = ap.parse_args()
    ours = Ours(args.lib)
    ceil = ceilings(Timer())  # the call's copy bandwidth and GEMM rate, as peer_flashmla.py prints them
    print(f"device: {torch.cuda.get_device_properties(0).name}; ours "
          f"{'planned' if ours.planned else 'with its scheduler'}; ceilings (same process, before the phases): "
          f"copy {ceil['copy_gbs']:.0f} GB/s, bf16 GEMM 8192^3 {ceil['gemm_tflops']:.1f} TFLOP/s", flush=True)
    dev = str(torch.cuda.current_device())
    max_mhz = float(subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits", "-i", dev],
                                   capture_output=True, text=True, check=True).stdout.split()[0])
    sampler = Sampler()
    time.sleep(0.5)
    try:
        for i, spec in enumerate(args.shape.split(",")):
            H, sq, L = (int(x) for x in spec.split(":"))
            c = Case(128, H, sq, 512, 64, L, 64, seed=7000 + i)
            run, _ = ours.prepare(c, args.variant)
            fns = {"ours": run, "FlashMLA": flashmla_runner(c)}
            for r in range(args.rounds):
                for name, fn in fns.items():
                    times, t0, t1 = run_phase(fn, args.seconds)
                    half = times[len(times) // 2:]
                    smp = sampler.between(t0 + (t1 - t0) / 2, t1)
                    if smp:
                        mhz = statistics.mean(s[1] for s in smp)
                        watts = statistics.mean(s[2] for s in smp)
                        reasons = sorted({s[3] for s in smp})
                    else:
                        mhz = watts = float("nan")
                        reasons = ["no samples"]
                    us = statistics.median(half)
                    print(f"H={H} s_q={sq} L={L} round {r} {name:<8}: {us:8.1f} us/call, {mhz:6.0f} MHz, {watts:5.0f} W, "
                          f"{watts * us * 1e-3:6.1f} mJ/call, work at {max_mhz:.0f} MHz ~{us * mhz / max_mhz:8.1f} us; "
                          f"throttle {','.join(reasons)}", flush=True)
            del c, fns, run
            torch.cuda.empty_cache()
    finally:
        sampler.stop()


if __name__ == "__main__":
    main()
