#!/usr/bin/env python3
"""Times our 4-bit cache decode (FP4 and codebook, kernels/kv4_decode.cu) beside FlashMLA's BF16
dense decode, in one process, on caches holding the same values.

Per shape: FlashMLA's test-style problem (peer_flashmla.Case: random page permutation, query);
random 4-bit tokens (FP4: codes uniform, scale bytes 120..127; codebook: a sorted 16-level table
and per-token scales), packed here into the page layout of docs/formats/kv-fp4.md, and the BF16
cache they dequantise to (FP4: e2m1 * 2^(b - 127); codebook: bf16(level * scale)) with the
case's RoPE. FlashMLA decodes the dequantised BF16 cache, ours the 4-bit pages: the outputs must
agree to bf16 rounding (rel. L2 printed). Each call after an L2 flush, interleaved with
alternating order, CUDA events, median (peer_flashmla.Timer / interleaved). Ours is timed as a
user calls it: scheduler + split kernel + combine. FP4 shapes also run the FP8-tensor-core route
of the same pages (kernels/fp8_decode.hpp fp8_decode_fp4_cache_bf16q: the narrow kernel at <= 32
rows, the 64-row kernel above), whose floor takes the FP8 GEMM rate; it is planned once before the
timed calls (kernels::fp8_decode_plan, as FlashMLA's metadata) and each call is a planned decode. Ceilings in the same
process: copy bandwidth, BF16 GEMM 8192^3 and FP8 GEMM (peer_fp8.fp8_gemm_tflops; twice the
BF16 rate where torch has no FP8 GEMM). `--routes fp8` times the FP8 route alone on the FP4
shapes (in the first column, with its paired ratio): an A/B of an FP8-route change in half the time.

    PYTHONPATH=.peer/flashmla python3 tools/mla-bench/peer_kv4.py \
        --lib build/tools/mla-bench/libmla_kv4_capi.so --json out.json
"""
import argparse
import ctypes
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_flashmla import Case, Timer, ceilings, flashmla_runner, interleaved_times, paired_ratio, summarize, rel_l2, add_l2_resident_arg, l2_resident_note  # noqa: E402
from peer_fp8 import fp8_gemm_tflops  # noqa: E402

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def bytes_per_token(fmt, d_c, d_r):
    return d_c // 2 + (d_c // 32 if fmt == "fp4" else 4) + 2 * d_r


def section_index(P, row):
    """Physical byte offset of (token t, byte i) of a section of P rows of `row` bytes: column
    blocks of w = min(row, 128) bytes, token-major, 16-byte chunks swizzled for w >= 32."""
    w = min(row, 128)
    t = torch.arange(P, device="cuda").view(P, 1)
    i = torch.arange(row, device="cuda").view(1, row)
    a = t * w + i % w
    if w >= 32:
        a = a ^ (((a >> 7) & (w // 16 - 1)) << 4)
    return (i // w) * P * w + a


def pack_pages(c, fmt, g, chunk=2048):
    """Random 4-bit tokens for every slot of c's pages: (pages uint8 [num_pages, page_bytes],
    dequantised BF16 cache shaped like c.cache, levels or None). Done in chunks of pages to
    bound the temporaries (a 32K-token batch of 128 has 65,536 pages)."""
    n, P, d_c, d_r = c.num_pages, c.page, c.d_c, c.d_r
    code_row, scale_row, rope_row = d_c // 2, (d_c // 32 if fmt == "fp4" else 4), 2 * d_r
    page_bytes = P * (code_row + scale_row + rope_row)
    pages = torch.zeros(n, page_bytes, dtype=torch.uint8, device="cuda")
    deq = torch.empty(n, P, c.dim, dtype=torch.bfloat16, device="cuda")
    cache = c.cache.view(n, P, c.dim)
    lut = torch.tensor(E2M1, device="cuda")
    levels = torch.sort(torch.randn(16, device="cuda", generator=g))[0] if fmt == "codebook" else None
    index = [section_index(P, row).flatten() for row in (code_row, scale_row, rope_row)]
    for p0 in range(0, n, chunk):
        m = min(chunk, n - p0)
        codes = torch.randint(0, 256, (m, P, code_row), device="cuda", generator=g, dtype=torch.int32).to(torch.uint8)
        idx = torch.stack([(codes & 0xF).long(), (codes >> 4).long()], dim=-1).view(m, P, d_c)
        if fmt == "fp4":
            scales = torch.randint(120, 128, (m, P, scale_row), device="cuda", generator=g,
                                   dtype=torch.int32).to(torch.uint8)
            val = lut[idx] * torch.exp2(scales.float() - 127).repeat_interleave(32, dim=-1)
            scale_bytes = scales
        else:
            tok = 0.05 + 0.3 * torch.rand(m, P, device="cuda", generator=g)
            val = levels[idx] * tok.view(m, P, 1)
            scale_bytes = tok.contiguous().view(torch.uint8).view(m, P, 4)
        rope = cache[p0:p0 + m, :, d_c:].contiguous()
        deq[p0:p0 + m, :, :d_c] = val.to(torch.bfloat16)
        deq[p0:p0 + m, :, d_c:] = rope
        off = 0
        for data, row, ix in ((codes, code_row, index[0]), (scale_bytes, scale_row, index[1]),
                              (rope.view(torch.uint8).view(m, P, rope_row), rope_row, index[2])):
            pages[p0:p0 + m, off + ix] = data.reshape(m, P * row)
            off += P * row
    return pages, deq.view_as(c.cache), levels


class Ours:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        lib.mla_kv4_capi_parts.restype = ctypes.c_int
        lib.mla_kv4_capi_parts.argtypes = [ctypes.c_int] * 6 + [ctypes.POINTER(ctypes.c_size_t)]
        lib.mla_kv4_capi_run.restype = ctypes.c_int
        lib.mla_kv4_capi_run.argtypes = ([ctypes.c_int] * 2 + [ctypes.c_void_p] * 7 + [ctypes.c_int] * 8 +
                                         [ctypes.c_float, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t])
        self.lib = lib
        self.err = ctypes.create_string_buffer(1024)

    def prepare(self, c, fmt, pages, levels, route=0):
        ws_bytes = ctypes.c_size_t(0)
        parts = self.lib.mla_kv4_capi_parts(route, c.batch, c.s_q, c.heads, c.d_c, c.d_r, ctypes.byref(ws_bytes))
        if parts <= 0:
            raise RuntimeError(f"mla_kv4_capi_parts failed for {c.name}")
        ws = torch.empty(ws_bytes.value, dtype=torch.uint8, device="cuda")
        out = torch.empty(c.batch, c.s_q, c.heads, c.d_c, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(c.batch, c.s_q, c.heads, dtype=torch.float32, device="cuda")
        lv = levels.cpu().float().contiguous() if levels is not None else None
        lv_ptr = ctypes.cast(lv.data_ptr(), ctypes.c_void_p) if lv is not None else None
        args = (route, 1 if fmt == "codebook" else 0, lv_ptr, c.q.data_ptr(), pages.data_ptr(), c.table.data_ptr(),
                c.seqlens.data_ptr(), out.data_ptr(), lse.data_ptr(), c.batch, c.s_q, c.heads, c.d_c, c.d_r,
                c.num_pages, c.page, c.max_pages, c.scale, parts, ws.data_ptr(), ws_bytes.value)

        def call(mode):
            s = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            if self.lib.mla_kv4_capi_run(*args, mode, s, self.err, 1024) != 0:
                raise RuntimeError(f"kv4 decode ({c.name}, mode {mode}): {self.err.value.decode()}")
            return out, lse

        # The FP8 route: planned once (kernels::fp8_decode_plan, untimed, as FlashMLA's metadata),
        # then planned calls. The BF16 route schedules inside each call.
        if route == 1:
            call(1)

        def run():
            return call(2 if route == 1 else 0)

        run.keep = (pages, ws, out, lse, lv)
        return run, parts


def suite(name):
    B = 128
    if name == "quick":
        return [("fp4", B, 16, 1, 8192), ("codebook", B, 16, 1, 8192)]
    if name == "fp4":  # FP4 shapes of the narrow kernel (<= 32 rows), for A/B runs
        return [("fp4", B, 16, 1, 8192), ("fp4", B, 16, 1, 32768), ("fp4", B, 16, 2, 8192), ("fp4", B, 32, 1, 8192)]
    if name == "fp4rows":  # FP4 shapes of the 64-row kernel, for A/B runs
        return [("fp4", B, 64, 1, 8192), ("fp4", B, 128, 1, 8192), ("fp4", B, 128, 1, 32768)]
    out = [("fp4", B, 16, 1, L) for L in (4096, 8192, 32768)]
    out += [("fp4", B, 8, 2, L) for L in (8192, 32768)]
    out += [("fp4", B, 16, 2, 8192), ("fp4", B, 32, 1, 8192)]
    out += [("codebook", B, 16, 1, L) for L in (8192, 32768)]
    out += [("fp4", B, H, 1, 8192) for H in (64, 128)]  # BF16 route: blocks of 16 rows; FP8 route: 64-row kernel
    out += [("fp4", B, 128, 1, 32768), ("fp4", B, 64, 2, 8192)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libmla_kv4_capi.so")
    ap.add_argument("--suite", default="issue12", choices=["issue12", "quick", "fp4", "fp4rows"])
    add_l2_resident_arg(ap)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--routes", choices=["both", "fp8"], default="both",
                    help="FP4 shapes: time both routes (default) or only the FP8-tensor-core route (an A/B of an "
                         "FP8-route change in half the time; codebook shapes keep their one route)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    ours = Ours(args.lib)
    timer = Timer()
    props = torch.cuda.get_device_properties(0)
    ceil = ceilings(timer)
    ceil["fp8_gemm_tflops"] = fp8_gemm_tflops(timer) or 2 * ceil["gemm_tflops"]
    print(f"device: {props.name}, {props.multi_processor_count} SMs; ceilings (same process): copy "
          f"{ceil['copy_gbs']:.0f} GB/s, bf16 GEMM {ceil['gemm_tflops']:.0f} TFLOP/s, fp8 GEMM "
          f"{ceil['fp8_gemm_tflops']:.0f} TFLOP/s", flush=True)
    res = {"device": props.name, "ceilings": ceil, "runs": args.runs,
           "l2_resident": l2_resident_note(args.l2_resident), "shapes": {}}
    print(f"{'shape':<34} {'ours us':>8} {'%floor':>7} {'FM bf16 us':>10} {'%floor':>7} {'FM/ours':>7}  check")
    for i, (fmt, B, H, sq, L) in enumerate(suite(args.suite)):
        name = f"{fmt}_B{B}_H{H}_sq{sq}_L{L // 1024}k_dc512"
        c = Case(B, H, sq, 512, 64, L, 64, seed=4000 + i, l2_resident=args.l2_resident)
        g = torch.Generator(device="cuda").manual_seed(5000 + i)
        pages, deq, levels = pack_pages(c, fmt, g)
        c.cache = deq  # FlashMLA decodes the dequantised values
        fp8_route = fmt == "fp4"  # at d_c = 512 the FP8 route takes every row count
        fp8_only = fp8_route and args.routes == "fp8"
        run_fm = flashmla_runner(c)
        # fns: ours first (the FP8 route alone with --routes fp8), FlashMLA, then the FP8-tensor-core
        # route of the same FP4 pages where both routes are timed.
        run, parts = ours.prepare(c, fmt, pages, levels, route=1 if fp8_only else 0)
        fns = [run, run_fm]
        if fp8_route and not fp8_only:
            fns.append(ours.prepare(c, fmt, pages, levels, route=1)[0])
        del run
        o1, _ = fns[0]()
        o2, _ = run_fm()
        torch.cuda.synchronize()
        if fp8_only:
            check = f"fp8 route vs FlashMLA {rel_l2(o1, o2):.2e}"
        else:
            check = f"out vs FlashMLA on the dequantised cache: rel_l2 {rel_l2(o1, o2):.2e}"
        if len(fns) == 3:
            o3, _ = fns[2]()
            torch.cuda.synchronize()
            check += f"; fp8 route vs FlashMLA {rel_l2(o3, o2):.2e}"
        times = interleaved_times(timer, fns, args.runs, args.warmup)
        med, rng = summarize(times)
        pr = paired_ratio(times[1], times[0])
        check = f"paired {pr[0]:.3f} [{pr[1]:.3f}, {pr[2]:.3f}]; " + check
        rows = B * sq * H
        q_bytes = rows * (c.dim * 2 + 512 * 2 + 4)
        bytes4 = B * L * bytes_per_token(fmt, 512, 64) + q_bytes
        bytes16 = B * L * c.dim * 2 + q_bytes
        flops = 2.0 * rows * L * (c.dim + 512)
        fl4 = max(bytes4 / (ceil["copy_gbs"] * 1e9), flops / (ceil["gemm_tflops"] * 1e12)) * 1e6
        fl16 = max(bytes16 / (ceil["copy_gbs"] * 1e9), flops / (ceil["gemm_tflops"] * 1e12)) * 1e6
        fl8 = max(bytes4 / (ceil["copy_gbs"] * 1e9), flops / (ceil["fp8_gemm_tflops"] * 1e12)) * 1e6  # FP8 route

        def fp8_route_figures(k):  # the FP8 route's figures from column k
            return {"fp8_route_us": med[k], "fp8_route_range_us": rng[k], "fp8_route_floor_us": fl8,
                    "fp8_route_frac_floor": fl8 / med[k], "fp8_route_speedup_vs_bf16": med[1] / med[k]}

        rec = {"format": fmt, "shape": [B, H, sq, L, 512], "parts": parts, "flashmla_bf16_us": med[1],
               "flashmla_bf16_range_us": rng[1], "check": check}
        if fp8_only:
            rec.update(fp8_route_figures(0))
            rec["paired_fp8_route_speedup_vs_bf16"] = {"median": pr[0], "ci95": [pr[1], pr[2]]}
            label, floor0 = name + " (fp8 route)", fl8
        else:
            rec.update({"ours_us": med[0], "ours_range_us": rng[0], "ours_floor_us": fl4, "ours_frac_floor": fl4 / med[0],
                        "flashmla_bf16_floor_us": fl16, "flashmla_frac_floor": fl16 / med[1],
                        "speedup_vs_bf16": med[1] / med[0], "byte_ratio": bytes16 / bytes4,
                        "paired_speedup_vs_bf16": {"median": pr[0], "ci95": [pr[1], pr[2]]}})
            if len(fns) == 3:
                rec.update(fp8_route_figures(2))
            label, floor0 = name, fl4
        res["shapes"][name] = rec
        print(f"{label:<34} {med[0]:8.1f} {100 * floor0 / med[0]:6.1f}% {med[1]:10.1f} {100 * fl16 / med[1]:6.1f}% "
              f"{med[1] / med[0]:6.2f}x  {check}", flush=True)
        if len(fns) == 3:
            print(f"{name + ' (fp8 route)':<34} {med[2]:8.1f} {100 * fl8 / med[2]:6.1f}% {'':>10} {'':>7} "
                  f"{med[1] / med[2]:6.2f}x", flush=True)
        del c, pages, deq, run_fm, fns
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
