"""Baseline for mla-bench: the plain PyTorch absorbed decode a user has without our kernel
(einsum, softmax, einsum), on a contiguous per-request cache (the page gather is NOT timed,
which favours the baseline). L2 flushed before each run, CUDA events, median. Prints one JSON
line {"us": ...}. Benchmark only; never on the product path."""
import argparse
import json

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dc", type=int, default=512)
    ap.add_argument("--dr", type=int, default=64)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    dev = "cuda"
    d = a.dc + a.dr
    q = torch.randn(a.batch, a.heads, d, device=dev, dtype=torch.bfloat16)
    kv = torch.randn(a.batch, a.seqlen, d, device=dev, dtype=torch.bfloat16)
    scale = 1.0 / 192 ** 0.5
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device=dev)

    def step():
        s = torch.einsum("bhd,bld->bhl", q, kv)
        p = torch.softmax(s.float() * scale, dim=-1).to(torch.bfloat16)
        return torch.einsum("bhl,blc->bhc", p, kv[..., : a.dc])

    for _ in range(3):
        step()
    times = []
    for i in range(a.runs):
        flush.fill_(i & 0xFF)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        step()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3)
    times.sort()
    print(json.dumps({"us": times[len(times) // 2]}))


if __name__ == "__main__":
    main()
