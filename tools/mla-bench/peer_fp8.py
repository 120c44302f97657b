#!/usr/bin/env python3
"""Times our FP8 paged MLA decode beside FlashMLA's BF16 dense decode, FlashMLA's FP8 sparse
(V3.2, 656 B per token) decode with topk = L and, where it is built (tools/mla-bench/peer_vllm_fp8.sh),
vLLM's FlashMLA dense FP8 decode (576 B per token, one scale per tensor), in one process, on caches
built from the same values.

Per shape: one BF16 paged cache and query (FlashMLA's test data, peer_flashmla.Case); our FP8
cache is written from it by our append kernel (kernels/fp8_append.cu: every page appended as one
request); FlashMLA's V3.2 cache by its own tests/quant.py quantize_k_cache; the sparse kernel's
indices list every token of each request (topk = L, its supported heads 64 and 128 only). Each
call after an L2 flush and a GPU spin, interleaved with alternating order, CUDA events, median
(peer_flashmla.Timer / interleaved). Ours is timed as FlashMLA is: the split-KV schedule computed
once before the timed calls (kernels::fp8_decode_plan, FlashMLA's tile-scheduler metadata: once per
decode step for every layer), each call kernels::fp8_decode_bf16q with p.planned (query quantisation
+ split kernel + combine); "unpl. us" is the same call scheduling itself. Ceilings in the same process:
copy bandwidth, BF16 GEMM and FP8 GEMM (torch._scaled_mm) 8192^3.

    PYTHONPATH=.peer/flashmla:.peer/flashmla/tests:.peer/vllm_fp8 python3 tools/mla-bench/peer_fp8.py \
        --lib build/tools/mla-bench/libmla_fp8_capi.so --json out.json
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_flashmla import Case, Timer, ceilings, flashmla_runner, interleaved_times, paired_ratio, summarize, rel_l2, with_parts, add_l2_resident_arg, l2_resident_note  # noqa: E402

V32_BYTES_PER_TOKEN = 656


def fp8_bytes_per_token(d_c, d_r):
    """docs/formats/kv-fp8.md: E4M3 latent, bf16 RoPE, one fp32 scale (644 at d_c = 512, d_r = 64)."""
    return d_c + 2 * d_r + 4


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libmla_fp8_capi.so")
    ap.add_argument("--suite", default="issue11", choices=["issue11", "quick"])
    ap.add_argument("--only", help="comma-separated shape names (e.g. B128_H16_sq1_L8k_dc512) to run alone")
    add_l2_resident_arg(ap)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--parts", type=int, default=0,
                    help="split parts for ours (0: the library's default for the shape and device)")
    ap.add_argument("--json", help="write every figure here")
    return ap.parse_args()


class Ours:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        lib.mla_fp8_capi_append.restype = ctypes.c_int
        lib.mla_fp8_capi_append.argtypes = ([ctypes.c_void_p] * 4 + [ctypes.c_int] * 7 +
                                            [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t])
        lib.mla_fp8_capi_parts.restype = ctypes.c_int
        lib.mla_fp8_capi_parts.argtypes = [ctypes.c_int] * 5 + [ctypes.POINTER(ctypes.c_size_t)]
        lib.mla_fp8_capi_run.restype = ctypes.c_int
        lib.mla_fp8_capi_run.argtypes = ([ctypes.c_void_p] * 6 + [ctypes.c_int] * 8 + [ctypes.c_float, ctypes.c_int,
                                         ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                         ctypes.c_char_p, ctypes.c_size_t])
        self.lib = lib
        self.err = ctypes.create_string_buffer(1024)

    def stream(self):
        return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def build_cache(self, c):
        """Our FP8 pages from c's BF16 pages (same page ids): page i appended as request i."""
        page_bytes = c.page * (c.d_c + 2 * c.d_r + 4)
        cache = torch.empty(c.num_pages * page_bytes, dtype=torch.uint8, device="cuda")
        ident = torch.arange(c.num_pages, dtype=torch.int32, device="cuda").view(c.num_pages, 1)
        pos = torch.zeros(c.num_pages, dtype=torch.int32, device="cuda")
        kv = c.cache.view(c.num_pages, c.page, c.dim).contiguous()
        if self.lib.mla_fp8_capi_append(kv.data_ptr(), pos.data_ptr(), ident.data_ptr(), cache.data_ptr(), c.num_pages,
                                        c.page, c.d_c, c.d_r, 1, c.num_pages, c.page, self.stream(), self.err,
                                        1024) != 0:
            raise RuntimeError(f"fp8 append: {self.err.value.decode()}")
        return cache

    def prepare(self, c, parts_override=0):
        """parts_override > 0: that many split parts instead of the library's default."""
        cache = self.build_cache(c)
        ws_bytes = ctypes.c_size_t(0)
        parts = self.lib.mla_fp8_capi_parts(c.batch, c.s_q, c.heads, c.d_c, c.d_r, ctypes.byref(ws_bytes))
        if parts <= 0:
            raise RuntimeError(f"mla_fp8_capi_parts failed for {c.name}")
        parts, ws_bytes = with_parts(parts, ws_bytes, parts_override)
        ws = torch.empty(ws_bytes.value, dtype=torch.uint8, device="cuda")
        out = torch.empty(c.batch, c.s_q, c.heads, c.d_c, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(c.batch, c.s_q, c.heads, dtype=torch.float32, device="cuda")
        args = (c.q.data_ptr(), cache.data_ptr(), c.table.data_ptr(), c.seqlens.data_ptr(), out.data_ptr(),
                lse.data_ptr(), c.batch, c.s_q, c.heads, c.d_c, c.d_r, c.num_pages, c.page, c.max_pages, c.scale,
                parts, ws.data_ptr(), ws_bytes.value)

        def call(mode):
            if self.lib.mla_fp8_capi_run(*args, mode, self.stream(), self.err, 1024) != 0:
                raise RuntimeError(f"fp8 decode ({c.name}, mode {mode}): {self.err.value.decode()}")
            return out, lse

        # The plan once (as FlashMLA's tile-scheduler metadata: once per decode step, for every
        # layer, untimed), then planned calls; run_unplanned schedules inside the call.
        call(1)

        def run():
            return call(2)

        def run_unplanned():
            return call(0)

        run.keep = (cache, ws, out, lse)
        run.unplanned = run_unplanned
        return run, parts


def sparse_runner(c):
    """FlashMLA's FP8 sparse decode over every token (topk = L) of a V3.2 cache of c's values."""
    import flash_mla
    import quant as fm_quant  # FlashMLA's tests/quant.py (PYTHONPATH)
    kq = fm_quant.quantize_k_cache(c.cache, fm_quant.FP8KVCacheLayout.V32_FP8Sparse)
    t = torch.arange(c.seqlen, device="cuda", dtype=torch.int32)
    idx = c.table[:, t // c.page].to(torch.int32) * c.page + (t % c.page)           # [B, L]
    idx = idx.view(c.batch, 1, c.seqlen).expand(c.batch, c.s_q, c.seqlen).contiguous()
    sched, _ = flash_mla.get_mla_metadata()

    def run():
        return flash_mla.flash_mla_with_kvcache(c.q, kq, None, None, c.d_c, sched, None, softmax_scale=c.scale,
                                                causal=False, is_fp8_kvcache=True, indices=idx)

    run()
    run.keep = (kq, idx)
    return run


def vllm_fp8_runner(c):
    """vLLM's FlashMLA dense FP8 decode (FlashMLA PR #54, built by peer_vllm_fp8.sh) on c's values:
    query and cache in E4M3 with one scale per tensor (amax / 448, its descale_q / descale_k), the
    cache [pages, 64, 1, 576] (RoPE dims in E4M3 too: 576 B a token); its tile-scheduler metadata
    computed once before the timed calls, the query quantised outside them (its API takes E4M3)."""
    import flash_mla_dense_fp8 as fp8d

    def per_tensor(x):
        xf = x.float()  # one fp32 copy (the 32K caches are ~10 GB in fp32)
        s = (xf.abs().amax() / 448.0).clamp_min(1e-12)
        return (xf / s).to(torch.float8_e4m3fn), s.reshape(1).to(torch.float32)

    k8, dk = per_tensor(c.cache)
    q8, dq = per_tensor(c.q)
    sched, splits = fp8d.get_mla_decoding_metadata_dense_fp8(c.seqlens, c.s_q * c.heads, 1)

    def run():
        return fp8d.fwd_kvcache_mla_fp8(q8, k8, c.d_c, c.seqlens, c.table, c.scale, c.s_q > 1, sched, splits, dq, dk)

    run()
    run.keep = (k8, q8, dq, dk, sched, splits)
    return run


def vllm_fp8_available():
    try:
        import flash_mla_dense_fp8  # noqa: F401
        return True
    except ImportError as e:
        print(f"vLLM's dense FP8 FlashMLA not importable ({e}); its column is left out "
              "(tools/mla-bench/peer_vllm_fp8.sh builds it)", flush=True)
        return False


def add_peer(fns, make_runner, case, what):
    """Appends make_runner(case) to fns; False (reported, the shape goes on without it) if it fails."""
    try:
        fns.append(make_runner(case))
        return True
    except Exception as e:  # noqa: BLE001 -- a peer that cannot run this shape is left out, not fatal
        print(f"{what} not run ({e})", flush=True)
        return False


def fp8_gemm_tflops(timer):
    try:
        a = torch.randn(8192, 8192, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(8192, 8192, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        f = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
        for _ in range(3):
            f()
        us = statistics.median(timer.once(f) for _ in range(15))
        return 2.0 * 8192**3 / (us * 1e-6) / 1e12
    except Exception as e:  # older torch without _scaled_mm
        print(f"FP8 GEMM ceiling unavailable ({e}); using 2x the BF16 GEMM", file=sys.stderr)
        return None


def suite(name):
    """(B, H, s_q, L, d_c) shapes. d_c = 256 is a TPLA rank's slice at tp = 2 (all heads, half the
    latent): FlashMLA has no kernel for it (its dense decode takes d_v = 512 only), so ours runs
    alone there; the head-parallel rank it replaces is the H / 2, d_c = 512 shape."""
    B = 128
    if name == "quick":
        return [(B, 16, 1, 8192, 512), (B, 128, 1, 8192, 512)]
    out = [(B, H, sq, L, 512) for L in (8192, 32768) for sq in (1, 2) for H in (16, 64, 128)]
    out += [(B, 128, 1, L, 256) for L in (8192, 32768)]
    return out


def main():
    args = parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    ours = Ours(args.lib)
    timer = Timer()
    import flash_mla  # noqa: F401
    with_vllm = vllm_fp8_available()
    props = torch.cuda.get_device_properties(0)
    ceil = ceilings(timer)
    ceil["fp8_gemm_tflops"] = fp8_gemm_tflops(timer) or 2 * ceil["gemm_tflops"]
    print(f"device: {props.name}, {props.multi_processor_count} SMs; ceilings (same process): copy "
          f"{ceil['copy_gbs']:.0f} GB/s, bf16 GEMM {ceil['gemm_tflops']:.0f} TFLOP/s, fp8 GEMM "
          f"{ceil['fp8_gemm_tflops']:.0f} TFLOP/s", flush=True)
    res = {"device": props.name, "ceilings": ceil, "runs": args.runs,
           "l2_resident": l2_resident_note(args.l2_resident), "shapes": {}}
    print(f"{'shape':<28} {'fp8 us':>8} {'%floor':>7} {'bf16 FM us':>10} {'%floor':>7} {'FM/ours':>7} "
          f"{'sparse us':>9} {'sp/ours':>7} {'vllm us':>8} {'vl/ours':>7} {'unpl. us':>9}  check")
    only = set(args.only.split(",")) if args.only else None
    for i, (B, H, sq, L, dc) in enumerate(suite(args.suite)):
        name = f"B{B}_H{H}_sq{sq}_L{L // 1024}k_dc{dc}"
        if only is not None and name not in only:
            continue
        c = Case(B, H, sq, dc, 64, L, 64, seed=3000 + i, l2_resident=args.l2_resident)
        run_ours, parts = ours.prepare(c, args.parts)
        fns = [run_ours]
        peer = dc == 512
        if peer:
            fns.append(flashmla_runner(c))
        sparse_ok = peer and H in (64, 128) and add_peer(fns, sparse_runner, c, f"{name}: FlashMLA sparse")  # its heads
        vllm_ok = peer and with_vllm and c.d_r == 64 and add_peer(fns, vllm_fp8_runner, c, f"{name}: vLLM dense FP8")
        o1, l1 = run_ours()
        check = "-"
        if peer:
            o2, l2 = fns[1]()
            torch.cuda.synchronize()
            check = f"out vs FlashMLA bf16 rel_l2 {rel_l2(o1, o2):.2e}"
            if vllm_ok:
                o3, _ = fns[-1]()
                torch.cuda.synchronize()
                check += f"; vLLM fp8 vs FlashMLA bf16 {rel_l2(o3, o2):.2e}"
        fns.append(run_ours.unplanned)  # last: the indices above stay
        times = interleaved_times(timer, fns, args.runs, args.warmup)
        med, rng = summarize(times)
        rows = B * sq * H
        dim = dc + 64
        q_bytes = rows * (dim * 2 + dc * 2 + 4)
        bytes_fp8 = B * L * fp8_bytes_per_token(dc, 64) + q_bytes + rows * (dc + 128 + 4) * 2  # + quantised query w + r
        bytes_bf16 = B * L * dim * 2 + q_bytes
        flops = 2.0 * rows * L * (dim + dc)
        fl_fp8 = max(bytes_fp8 / (ceil["copy_gbs"] * 1e9), flops / (ceil["fp8_gemm_tflops"] * 1e12)) * 1e6
        fl_bf16 = max(bytes_bf16 / (ceil["copy_gbs"] * 1e9), flops / (ceil["gemm_tflops"] * 1e12)) * 1e6
        row = {"shape": [B, H, sq, L, dc], "parts": parts, "ours_us": med[0], "ours_range_us": rng[0],
               "ours_floor_us": fl_fp8, "ours_frac_floor": fl_fp8 / med[0],
               "ours_unplanned_us": med[-1], "ours_unplanned_range_us": rng[-1],
               "ours_bound": "memory" if bytes_fp8 / ceil["copy_gbs"] / 1e3 >= flops / ceil["fp8_gemm_tflops"] / 1e6
               else "math", "check": check}
        line = f"{name:<28} {med[0]:8.1f} {100 * fl_fp8 / med[0]:6.1f}%"
        if peer:
            row.update({"flashmla_bf16_us": med[1], "flashmla_bf16_range_us": rng[1], "flashmla_bf16_floor_us": fl_bf16,
                        "flashmla_bf16_frac_floor": fl_bf16 / med[1], "speedup_vs_bf16": med[1] / med[0]})
            pr = paired_ratio(times[1], times[0])
            row["paired_speedup_vs_bf16"] = {"median": pr[0], "ci95": [pr[1], pr[2]]}
            check = f"paired {pr[0]:.3f} [{pr[1]:.3f}, {pr[2]:.3f}]; " + check
            line += f" {med[1]:10.1f} {100 * fl_bf16 / med[1]:6.1f}% {med[1] / med[0]:6.2f}x"
        else:
            line += f" {'-':>10} {'-':>7} {'-':>7}"
        if sparse_ok:
            row.update({"flashmla_sparse_us": med[2], "flashmla_sparse_range_us": rng[2],
                        "speedup_vs_sparse": med[2] / med[0], "sparse_over_bf16": med[1] / med[2]})
            line += f" {med[2]:9.1f} {med[2] / med[0]:6.2f}x"
        else:
            line += f" {'-':>9} {'-':>7}"
        if vllm_ok:
            v = 2 + int(sparse_ok)
            pv = paired_ratio(times[v], times[0])
            row.update({"vllm_fp8_us": med[v], "vllm_fp8_range_us": rng[v], "speedup_vs_vllm_fp8": med[v] / med[0],
                        "paired_speedup_vs_vllm_fp8": {"median": pv[0], "ci95": [pv[1], pv[2]]},
                        "vllm_fp8_over_bf16": med[1] / med[v]})
            line += f" {med[v]:8.1f} {med[v] / med[0]:6.2f}x"
            check = f"vs vLLM paired {pv[0]:.3f} [{pv[1]:.3f}, {pv[2]:.3f}]; " + check
        else:
            line += f" {'-':>8} {'-':>7}"
        line += f" {med[-1]:9.1f}"
        print(line + "  " + check, flush=True)
        res["shapes"][name] = row
        del c, fns, run_ours
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
