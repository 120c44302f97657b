#!/usr/bin/env python3
"""Device check of the package's quantised caches (python/mla_toolchain/kv_quant.py: FP8, FP4, codebook).

On the same inputs (random BF16 rows, per-token latent magnitudes 0.3x..2x, pages a random
permutation of the pool, every cache byte 0xFF before the appends, so unused pages and page tails
hold poisoned tokens, int32-max page ids past each request's pages):
  1. Appends: the GPU pages equal, byte for byte, what the CPU encoders write (quant::
     fp8_cache_append_twin, fp4_cache_append_twin, codebook_cache_append_twin, through the libraries'
     *_append_twin entries) after the same sequence of appends: each request's first tokens alone,
     then two tokens of every request in one batched call at per-request positions; plus rows of
     mixed magnitude with zeros, NaN and Inf (poisoned tokens).
  2. Decodes vs the CPU twins with the GPU's number of parts: FP8 quant::fp8_quantize_query_twin +
     fp8_decode_twin; FP4 / codebook route "bf16" the BF16 twin (decode_twin_bf16) on the pages
     dequantised by fp4_cache_to_bf16 / codebook_cache_to_bf16; FP4 route "fp8" the FP8 twin on
     fp4_cache_to_fp8 of the pages. And vs float64: on the values the cache stores (4-bit routes)
     and on the BF16 rows before quantisation (every format), within the formats' bounds.
  3. CUDA graphs: an append and a decode captured together, the new row, positions, lengths and
     query changed in place, replayed: equal to eager calls, and the replayed appends' bytes equal
     the twin's.
  4. A DecodePlan (fp8_decode_plan) shared by several decodes of a step: each bit-equal to the
     same decode scheduling itself (FP8 cache, the FP4 cache's fp8 route); misuse refused.
  5. Unsupported arguments raise UnsupportedArgument naming the argument.
Exit 0 when every check passes, 1 otherwise, 77 (skip) without torch or a CUDA device.

    MLA_TOOLCHAIN_LIB_DIR=build/tools/mla-bench PYTHONPATH=python python3 python/tests/check_kv_package_gpu.py
"""
import argparse
import ctypes
import json
import sys
import time

from check_common import Report, lse_diff, rel_l2, torch_or_skip

torch = torch_or_skip()

import mla_toolchain as mt  # noqa: E402
from mla_toolchain import _lib  # noqa: E402

# Tolerances, each from the test that derived it:
# GPU vs twin, the 4-bit BF16 route: the BF16 decode's rounding points on the dequantised cache
# (bit for bit what the BF16 kernel does on it); the twin runs with variant 7, whose 32-token
# tiles are the 4-bit kernel's at every row count, so the splits match and only fp32 summation
# order differs (tests/kernels/decode_case.hpp's bounds).
TWIN_REL_L2_BF16 = 1e-3
TWIN_LSE_BF16 = 1e-4
# GPU vs twin, the FP8 kernels (FP8 cache, FP4 route "fp8"): FP8 wgmma keeps ~13-14 mantissa bits
# between additions, so logits differ by up to ~2.5e-3, moving the LSE by as much and flipping an
# E4M3 rounding of P or a bf16 output rounding here and there (tests/kernels/test_fp8_gpu.cpp).
TWIN_REL_L2_FP8 = 5e-3
TWIN_LSE_FP8 = 6e-3
# vs float64 on the values the cache stores: BF16 route SPEC section 5's BF16 bound (LSE: fp32
# sums); FP8 route the FP8 decode's bound, which covers its E4M3 query and P roundings
# (tests/kernels/test_kv4_gpu.cpp EqualsFp8DecodeOfConvertedPages).
STORED_REL_L2_BF16 = 8e-3
STORED_LSE_BF16 = 1e-3
STORED_REL_L2_FP8 = 0.08
# vs float64 on the BF16 rows before quantisation (what a user compares with): FP8 0.08
# (tests/quant/test_fp8_decode_twin.cpp: the cache, query and P E4M3 roundings in quadrature);
# FP4 / codebook 0.25, FP4 route "fp8" 0.27 (verify/kv4_backend.hpp: 2.5x the 4-bit grid's ~0.1
# relative error per value; with the FP8 decode's 0.08 in quadrature).
MODEL_REL_L2 = {"fp8": 0.08, "fp4": 0.25, "fp4/fp8": 0.27, "codebook": 0.25}
# LSE of the FP8 kernels vs float64: it moves by the largest logit error, whose standard deviation
# is 0.034 scale sqrt(max_j sum_i q_i^2 x_ji^2) (E4M3 rounding of query and key, 0.024 relative
# RMS each; tests/quant/fp8_decode_case.hpp logit_error_sd): 5 of them, as
# tests/quant/test_fp8_decode_twin.cpp. (4-bit vs the BF16 rows: the grid's error sets no such
# bound; its LSE difference is printed only.)
LSE_SIGMAS = 5.0
SENTINEL_PAGE = 2**31 - 1
# The FP4 scale constant of these checks: near the best for Gaussian groups of 32 (the default
# 0.156 clips the largest value of more groups: 0.17-0.20 relative L2 here instead of 0.14-0.17).
FP4_C = 0.19
# 16 Lloyd-Max levels of N(0, 1) (per-token RMS units, as mla-calibrate's tables are stored).
LEVELS = [-2.7326, -2.0690, -1.6181, -1.2562, -0.9424, -0.6568, -0.3881, -0.1284,
          0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326]
_FORMAT_ID = {"fp4": 0, "codebook": 1}


def _ptr(t):
    return t.data_ptr()


def _levels_c():
    return (ctypes.c_float * 16)(*LEVELS)


class TwinCache:
    """A host copy of a paged cache that the CPU encoders append to as the GPU does."""

    def __init__(self, fmt, num_pages, page, d_c, d_r):
        self.fmt, self.page, self.d_c, self.d_r = fmt, page, d_c, d_r
        self.bytes = torch.full((num_pages, page, mt.kv_cache_bytes_per_token(fmt, d_c, d_r)), 0xFF, dtype=torch.uint8)

    def append(self, rows, positions, table):
        """rows [b, n, dim] bf16, positions [b] int32, table [b, max_pages] int32 (host)."""
        rows, positions, table = rows.contiguous(), positions.contiguous(), table.contiguous()
        err = ctypes.create_string_buffer(_lib.ERR_LEN)
        args = (_ptr(rows), _ptr(positions), _ptr(table), _ptr(self.bytes), rows.shape[0], rows.shape[1], self.d_c,
                self.d_r, table.shape[1], self.bytes.shape[0], self.page, err, _lib.ERR_LEN)
        if self.fmt == "fp8":
            rc = _lib.fp8.get().mla_fp8_capi_append_twin(*args)
        else:
            rc = _lib.kv4.get().mla_kv4_capi_append_twin(_FORMAT_ID[self.fmt], FP4_C,
                                                         _levels_c() if self.fmt == "codebook" else None, *args)
        _lib.check(rc, err, f"{self.fmt} append twin")


def append_gpu(fmt, kv, cache, table, positions, d_c):
    if fmt == "fp8":
        return mt.fp8_append_kvcache(kv, cache, table, positions, d_c)
    if fmt == "fp4":
        return mt.fp4_append_kvcache(kv, cache, table, positions, d_c, c=FP4_C)
    return mt.codebook_append_kvcache(kv, cache, table, positions, d_c, levels=LEVELS)


def decode_gpu(fmt, route, q, cache, table, lens, d_c, scale):
    if fmt == "fp8":
        return mt.fp8_decode_with_kvcache(q, cache, table, lens, d_c, scale)
    if fmt == "fp4":
        return mt.fp4_decode_with_kvcache(q, cache, table, lens, d_c, scale, route=route)
    return mt.codebook_decode_with_kvcache(q, cache, table, lens, d_c, scale, levels=LEVELS)


class Problem:
    """A random paged problem of one format: BF16 rows appended on the GPU and by the twin alike.

    lens: the decode's lengths; every request gets max(L, 2) + `spare` slots of pages (the batched
    append writes two tokens of each, the graph check appends more).
    """

    def __init__(self, fmt, seed, lens, s_q, heads, d_c, d_r=64, page=64, spare=0):
        g = torch.Generator().manual_seed(seed)
        self.fmt, self.lens, self.s_q, self.heads, self.d_c, self.d_r, self.page = fmt, lens, s_q, heads, d_c, d_r, page
        self.dim = d_c + d_r
        b = len(lens)
        self.app = [max(L, 2) for L in lens]
        need = [(a + spare + page - 1) // page for a in self.app]
        self.need = need
        self.max_pages = max(need) + 1  # + 1: a sentinel column
        self.num_pages = sum(need) + 2  # + 2: pages nobody references
        perm = torch.randperm(self.num_pages, generator=g).to(torch.int32)
        self.table_h = torch.full((b, self.max_pages), SENTINEL_PAGE, dtype=torch.int32)
        k = 0
        for i, n in enumerate(need):
            self.table_h[i, :n] = perm[k:k + n]
            k += n
        max_app = max(self.app)
        mag = 10 ** (0.4 * (2 * torch.rand(b, max_app, 1, generator=g, dtype=torch.float64) - 1) - 0.1)  # 0.3 .. 2
        kv = torch.randn(b, max_app, self.dim, generator=g, dtype=torch.float64)
        kv[..., :d_c] *= mag
        self.kv_h = kv.to(torch.bfloat16)
        self.q_h = torch.randn(b, s_q, heads, self.dim, generator=g, dtype=torch.float64).to(torch.bfloat16)
        self.lens_h = torch.tensor(lens, dtype=torch.int32)
        self.scale = self.dim ** -0.5
        self.q, self.table, self.lens_d = self.q_h.cuda(), self.table_h.cuda(), self.lens_h.cuda()
        self.cache = mt.alloc_kv_cache(fmt, self.num_pages, page, d_c, d_r)
        self.cache.fill_(0xFF)
        self.twin = TwinCache(fmt, self.num_pages, page, d_c, d_r)
        self.name = f"{fmt} B={b} s_q={s_q} H={heads} d_c={d_c} d_r={d_r} page={page} L={lens}"

    def append_all(self):
        """Each request's first max(L, 2) - 2 rows alone at position 0, then two rows of every request in one call."""
        b = len(self.lens)
        for i, a in enumerate(self.app):
            if a > 2:
                pos = torch.zeros(1, dtype=torch.int32)
                append_gpu(self.fmt, self.kv_h[i:i + 1, :a - 2].cuda(), self.cache, self.table[i:i + 1], pos.cuda(),
                           self.d_c)
                self.twin.append(self.kv_h[i:i + 1, :a - 2], pos, self.table_h[i:i + 1])
        last = torch.stack([self.kv_h[i, a - 2:a] for i, a in enumerate(self.app)])
        pos = torch.tensor([a - 2 for a in self.app], dtype=torch.int32)
        append_gpu(self.fmt, last.cuda(), self.cache, self.table, pos.cuda(), self.d_c)
        self.twin.append(last, pos, self.table_h)
        assert b == last.shape[0]

    def rows(self, cache_rows):
        """Request i's token rows [L_i, dim] float64 from a BF16 paged cache [num_pages, page, dim]."""
        return [cache_rows[self.table_h[i, :self.need[i]].long()].reshape(-1, self.dim).double()[:L]
                for i, L in enumerate(self.lens)]

    def model_rows(self):
        return [self.kv_h[i, :L].double() for i, L in enumerate(self.lens)]

    def dequantised(self):
        """The 4-bit twin pages dequantised to BF16 [num_pages, page, dim] (the BF16 route's cache)."""
        out = torch.empty(self.num_pages, self.page, self.dim, dtype=torch.bfloat16)
        err = ctypes.create_string_buffer(_lib.ERR_LEN)
        levels = _levels_c() if self.fmt == "codebook" else None
        rc = _lib.kv4.get().mla_kv4_capi_to_bf16_twin(_FORMAT_ID[self.fmt], levels, _ptr(self.twin.bytes),
                                                      self.num_pages, self.page, self.d_c, self.d_r, _ptr(out), err,
                                                      _lib.ERR_LEN)
        _lib.check(rc, err, "to_bf16 twin")
        return out

    def twin_decode(self, route, parts):
        """The CPU twin of the GPU decode on the twin's pages: (out [b, s_q, h, d_c] bf16, lse [b, s_q, h])."""
        b = len(self.lens)
        out = torch.empty(b, self.s_q, self.heads, self.d_c, dtype=torch.bfloat16)
        lse = torch.empty(b, self.s_q, self.heads, dtype=torch.float32)
        err = ctypes.create_string_buffer(_lib.ERR_LEN)
        shape = (b, self.s_q, self.heads, self.d_c, self.d_r, self.num_pages, self.page, self.max_pages, self.scale)
        if self.fmt == "fp8" or route == "fp8":
            pages = self.twin.bytes
            if self.fmt == "fp4":
                pages = torch.empty(self.num_pages, self.page, mt.kv_cache_bytes_per_token("fp8", self.d_c, self.d_r),
                                    dtype=torch.uint8)
                rc = _lib.kv4.get().mla_kv4_capi_fp4_to_fp8_twin(_ptr(self.twin.bytes), self.num_pages, self.page,
                                                                 self.d_c, self.d_r, _ptr(pages), err, _lib.ERR_LEN)
                _lib.check(rc, err, "fp4_to_fp8 twin")
            rc = _lib.fp8.get().mla_fp8_capi_twin(_ptr(self.q_h), _ptr(pages), _ptr(self.table_h), _ptr(self.lens_h),
                                                  _ptr(out), _ptr(lse), *shape, parts, err, _lib.ERR_LEN)
        else:
            variant = 7 if self.s_q * self.heads > 16 else 0  # 32-token tiles, as the 4-bit kernel
            deq = self.dequantised()  # held in a name: the twin reads it (a temporary was freed before the call)
            rc = _lib.decode.get().mla_decode_capi_twin(_ptr(self.q_h), _ptr(deq), _ptr(self.table_h),
                                                        _ptr(self.lens_h), _ptr(out), _ptr(lse), *shape, variant, parts,
                                                        err, _lib.ERR_LEN)
        _lib.check(rc, err, f"{self.fmt} decode twin")
        return out, lse

    def reference(self, rows):
        """float64 on per-request rows: out, lse (-inf, out 0 for a row without keys) and the FP8 logit error sd."""
        b = len(self.lens)
        out = torch.zeros(b, self.s_q, self.heads, self.d_c, dtype=torch.float64)
        lse = torch.full((b, self.s_q, self.heads), float("-inf"), dtype=torch.float64)
        sd = torch.zeros(b, self.s_q, self.heads, dtype=torch.float64)
        q = self.q_h.double()
        for i, L in enumerate(self.lens):
            kv = rows[i]
            for t in range(self.s_q):
                n = max(L - (self.s_q - 1 - t), 0)
                if n == 0:
                    continue
                s = (q[i, t] @ kv[:n].T) * self.scale  # [h, n]
                lse[i, t] = torch.logsumexp(s, dim=-1)
                out[i, t] = torch.softmax(s, dim=-1) @ kv[:n, :self.d_c]
                q2, x2 = q[i, t, :, :self.d_c] ** 2, kv[:n, :self.d_c] ** 2
                sd[i, t] = 0.034 * self.scale * (q2 @ x2.T).max(dim=-1).values.sqrt()
        return out, lse, sd


def bytes_equal(rep, check, name, gpu, twin):
    diff = (gpu.cpu() != twin).sum().item()
    rep.add(check, name, diff == 0, differing_bytes=diff, bytes=twin.numel())


def check_decode(rep, p, routes):
    """Appends, then each route's decode vs the twin and float64."""
    p.append_all()
    torch.cuda.synchronize()
    bytes_equal(rep, "append_bytes_vs_twin", p.name, p.cache, p.twin.bytes)
    model = p.reference(p.model_rows())
    stored = p.reference(p.rows(p.dequantised())) if p.fmt != "fp8" else None
    for route in routes:
        fp8_kernel = p.fmt == "fp8" or route == "fp8"
        out, lse = decode_gpu(p.fmt, route, p.q, p.cache, p.table, p.lens_d, p.d_c, p.scale)
        torch.cuda.synchronize()
        parts = mt.kv_decode_parts(p.fmt, p.q, p.d_c, route)
        t_out, t_lse = p.twin_decode(route, parts)
        shape_ok = (tuple(out.shape) == (len(p.lens), p.s_q, p.heads, p.d_c) and out.dtype == torch.bfloat16
                    and tuple(lse.shape) == (len(p.lens), p.s_q, p.heads) and lse.dtype == torch.float32)
        finite = torch.isfinite(out.float()).all().item()
        e_twin, (l_twin, nf_twin) = rel_l2(out, t_out), lse_diff(lse, t_lse)
        ok = (shape_ok and finite and nf_twin and e_twin < (TWIN_REL_L2_FP8 if fp8_kernel else TWIN_REL_L2_BF16)
              and l_twin < (TWIN_LSE_FP8 if fp8_kernel else TWIN_LSE_BF16))
        fig = {"parts": parts, "rel_l2_vs_twin": e_twin, "lse_vs_twin": l_twin}
        key = "fp4/fp8" if p.fmt == "fp4" and route == "fp8" else p.fmt
        e_model = rel_l2(out, model[0])
        if fp8_kernel and p.fmt == "fp8":
            l_model, nf_model = lse_diff(lse, model[1], model[2])
            ok = ok and nf_model and l_model < LSE_SIGMAS
            fig["lse_vs_f64_sigmas"] = l_model
        else:
            l_model, nf_model = lse_diff(lse, model[1])
            ok = ok and nf_model
            fig["lse_vs_f64"] = l_model
        ok = ok and e_model < MODEL_REL_L2[key]
        fig["rel_l2_vs_f64_bf16_rows"] = e_model
        if stored is not None:  # the 4-bit values themselves
            e_st = rel_l2(out, stored[0])
            if fp8_kernel:
                l_st, nf_st = lse_diff(lse, stored[1], stored[2])
                ok = ok and nf_st and l_st < LSE_SIGMAS and e_st < STORED_REL_L2_FP8
                fig["lse_vs_f64_stored_sigmas"] = l_st
            else:
                l_st, nf_st = lse_diff(lse, stored[1])
                ok = ok and nf_st and l_st < STORED_LSE_BF16 and e_st < STORED_REL_L2_BF16
                fig["lse_vs_f64_stored"] = l_st
            fig["rel_l2_vs_f64_stored"] = e_st
        rep.add(f"decode[{p.fmt}{'' if p.fmt == 'fp8' else ', route=' + route}]", p.name, ok, **fig)


def check_append_edge_rows(rep, fmt, d_c, d_r, page, seed):
    """Rows of mixed magnitude (1e-3 .. 1e3 per token, exact zeros, a zero token) with NaN / Inf
    tokens, appended in one batched call across page edges: every byte as the twin's."""
    g = torch.Generator().manual_seed(seed)
    b, n, dim = 3, 70, d_c + d_r
    kv = torch.randn(b, n, dim, generator=g, dtype=torch.float64) * 10 ** (6 * torch.rand(b, n, 1, generator=g,
                                                                                             dtype=torch.float64) - 3)
    kv[torch.rand(b, n, dim, generator=g) < 0.05] = 0.0
    kv[0, 3] = 0.0
    kv[0, 5, 7], kv[1, 9, d_c + 1], kv[2, 60, 0] = float("nan"), float("inf"), float("-inf")
    kv = kv.to(torch.bfloat16)
    pages_per = (n + 40 + page - 1) // page
    table = torch.arange(b * pages_per, dtype=torch.int32).flip(0).view(b, pages_per).contiguous()
    pos = torch.tensor([0, 17, 40], dtype=torch.int32)
    cache = mt.alloc_kv_cache(fmt, b * pages_per, page, d_c, d_r)
    cache.fill_(0xFF)
    append_gpu(fmt, kv.cuda(), cache, table.cuda(), pos.cuda(), d_c)
    twin = TwinCache(fmt, b * pages_per, page, d_c, d_r)
    twin.append(kv, pos, table)
    torch.cuda.synchronize()
    bytes_equal(rep, "append_edge_rows_vs_twin", f"{fmt} d_c={d_c} d_r={d_r} page={page} (NaN/Inf/zero tokens)",
                cache, twin.bytes)


def check_graph(rep, fmt, route, d_c, heads, s_q=1):
    """Capture append + decode, change the new row, positions, lengths and query in place, replay."""
    p = Problem(fmt, 31 + heads + d_c, [100, 2000, 64, 700], s_q, heads, d_c, spare=4)
    p.append_all()
    b = len(p.lens)
    g = torch.Generator().manual_seed(5)
    new_rows = [torch.randn(b, 1, p.dim, generator=g, dtype=torch.float64).to(torch.bfloat16) for _ in range(2)]
    new_kv = new_rows[0].cuda()
    pos = p.lens_d.clone()           # the next free position of each request
    lens = p.lens_d + 1              # the decode sees the appended token
    call = lambda: (append_gpu(fmt, new_kv, p.cache, p.table, pos, d_c),  # noqa: E731
                    decode_gpu(fmt, route, p.q, p.cache, p.table, lens, d_c, p.scale))[1]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()  # warm-up outside the capture (libraries loaded, splits sized); appends new_rows[0] at L
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out, g_lse = call()
    new_kv.copy_(new_rows[1].cuda())
    pos.add_(1)
    lens.add_(1)
    p.q.copy_(torch.randn(p.q.shape, generator=g, dtype=torch.float64).to(torch.bfloat16).cuda())
    graph.replay()
    torch.cuda.synchronize()
    after_replay = p.cache.cpu()
    e_out, e_lse = call()  # eager: the same row at the same place again, then the decode
    torch.cuda.synchronize()
    same = torch.equal(g_out, e_out) and torch.equal(g_lse, e_lse)
    p.twin.append(new_rows[0], p.lens_h, p.table_h)
    p.twin.append(new_rows[1], p.lens_h + 1, p.table_h)
    appended = torch.equal(after_replay, p.twin.bytes)
    rep.add("cuda_graph_replay", f"{p.name}{'' if fmt == 'fp8' else ' route=' + route}", same and appended,
            bit_equal_to_eager=same, replayed_append_bytes_equal_twin=appended, new_lens=lens.tolist())


def check_planned(rep, fmt, heads, d_c, s_q=1, layers=3):
    """One fp8_decode_plan, then `layers` decodes (the layers of one step, a new query each) with
    plan=...: each bit-equal to the same decode scheduling itself. Then a plan of another shape and
    a plan on the BF16 route are refused."""
    p = Problem(fmt, 61 + heads + d_c, [1, 700, 64, 3000], s_q, heads, d_c)
    p.append_all()
    route = "fp8"
    plan = mt.fp8_decode_plan(p.q, p.lens_d, d_c)
    g = torch.Generator().manual_seed(7)
    same = True
    for _ in range(layers):
        q = torch.randn(p.q.shape, generator=g, dtype=torch.float64).to(torch.bfloat16).cuda()
        if fmt == "fp8":
            planned = mt.fp8_decode_with_kvcache(q, p.cache, p.table, p.lens_d, d_c, p.scale, plan=plan)
        else:
            planned = mt.fp4_decode_with_kvcache(q, p.cache, p.table, p.lens_d, d_c, p.scale, route=route, plan=plan)
        alone = decode_gpu(fmt, route, q, p.cache, p.table, p.lens_d, d_c, p.scale)
        same = same and torch.equal(planned[0], alone[0]) and torch.equal(planned[1], alone[1])
    torch.cuda.synchronize()
    rep.add("planned_decode", f"{p.name}{'' if fmt == 'fp8' else ' route=fp8'}, {layers} layers on one plan", same,
            bit_equal_to_unplanned=same)
    if fmt == "fp8":
        refusals = [
            ("plan: made for", lambda: mt.fp8_decode_with_kvcache(p.q[:, :, :heads // 2], p.cache, p.table, p.lens_d, d_c,
                                                                   p.scale, plan=plan)),
            ("plan: a DecodePlan serves", lambda: mt.fp4_decode_with_kvcache(p.q, p.cache, p.table, p.lens_d, d_c,
                                                                              p.scale, route="bf16", plan=plan)),
        ]
        rep.expect_refusals("planned_decode_refusal", refusals, mt.UnsupportedArgument)


def check_errors(rep):
    b, h, d_c, d_r = 2, 16, 512, 64
    d = d_c + d_r
    q = torch.zeros(b, 1, h, d, dtype=torch.bfloat16, device="cuda")
    kv = torch.zeros(b, 1, d, dtype=torch.bfloat16, device="cuda")
    caches = {f: mt.alloc_kv_cache(f, 4, 64, d_c, d_r) for f in mt.KV_FORMATS}
    table = torch.zeros(b, 2, dtype=torch.int32, device="cuda")
    lens = torch.ones(b, dtype=torch.int32, device="cuda")
    dec = {"fp8": lambda **a: mt.fp8_decode_with_kvcache(**a),
           "fp4": lambda route="bf16", **a: mt.fp4_decode_with_kvcache(**a, route=route),
           "codebook": lambda levels=LEVELS, **a: mt.codebook_decode_with_kvcache(**a, levels=levels)}
    app = {"fp8": lambda **a: mt.fp8_append_kvcache(**a),
           "fp4": lambda c=FP4_C, **a: mt.fp4_append_kvcache(**a, c=c),
           "codebook": lambda levels=LEVELS, **a: mt.codebook_append_kvcache(**a, levels=levels)}

    def decode(fmt, **over):
        args = dict(q=q, k_cache=caches[fmt], block_table=table, cache_seqlens=lens, head_dim_v=d_c)
        args.update(over)
        return dec[fmt](**args)

    def append(fmt, **over):
        args = dict(kv=kv, k_cache=caches[fmt], block_table=table, positions=lens, head_dim_v=d_c)
        args.update(over)
        return app[fmt](**args)

    slice_q = torch.zeros(b, 1, 128, 256 + 64, dtype=torch.bfloat16, device="cuda")
    cases = [
        ("kv_format", lambda: mt.alloc_kv_cache("int4", 4)),
        ("page_size", lambda: mt.alloc_kv_cache("fp8", 4, page_size=32)),
        ("d_c", lambda: mt.kv_cache_bytes_per_token("fp4", 96, 64)),
        ("q.dtype", lambda: decode("fp8", q=q.half())),
        ("k_cache.dtype", lambda: decode("fp8", k_cache=torch.zeros(4, 64, d, dtype=torch.bfloat16, device="cuda"))),
        ("k_cache.shape[-1]", lambda: decode("fp8", k_cache=caches["fp4"])),
        ("k_cache.stride", lambda: decode("fp4", k_cache=mt.alloc_kv_cache("fp4", 8, 64, d_c, d_r)[::2])),
        ("head_dim_v", lambda: decode("fp8", q=torch.zeros(b, 1, h, 64 + 64, dtype=torch.bfloat16, device="cuda"),
                                      head_dim_v=64)),
        ("q.shape[-1] - head_dim_v", lambda: decode("fp8", q=torch.zeros(b, 1, h, d_c + 48, dtype=torch.bfloat16,
                                                                         device="cuda"))),
        ("q.shape[1]", lambda: decode("fp4", q=torch.zeros(b, 3, h, d, dtype=torch.bfloat16, device="cuda"))),
        ("route", lambda: decode("fp4", route="fp16")),
        ("q.shape[1] * q.shape[2]", lambda: decode("fp4", route="fp8", q=slice_q, head_dim_v=256,
                                                   k_cache=mt.alloc_kv_cache("fp4", 4, 64, 256, 64))),
        ("len(levels)", lambda: decode("codebook", levels=LEVELS[:15])),
        ("levels", lambda: decode("codebook", levels=LEVELS[::-1])),
        ("levels.device", lambda: decode("codebook", levels=torch.tensor(LEVELS, device="cuda"))),
        ("cache_seqlens.dtype", lambda: decode("fp8", cache_seqlens=lens.long())),
        ("block_table.shape", lambda: decode("codebook", block_table=table[:1])),
        ("softmax_scale", lambda: decode("fp8", softmax_scale=float("nan"))),
        ("c", lambda: append("fp4", c=0.0)),
        ("kv.dtype", lambda: append("fp8", kv=kv.float())),
        ("positions.dtype", lambda: append("codebook", positions=lens.long())),
        ("positions.shape", lambda: append("fp8", positions=lens[:1])),
        ("kv.shape[1]", lambda: append("fp4", kv=kv[:, :0])),
        ("head_dim_v", lambda: append("fp4", head_dim_v=96, k_cache=caches["fp4"])),
        ("kv.device", lambda: append("fp8", kv=kv.cpu())),
    ]
    # The message starts with the argument's name (then its value).
    rep.expect_refusals("error_names_argument", cases, mt.UnsupportedArgument)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.time()
    rep = Report()
    print(f"device: {torch.cuda.get_device_name()}; libraries: {_lib.library_dir()}")
    cases = [
        (Problem("fp8", 1, [1, 63, 65, 2000], 1, 16, 512), ["bf16"]),                # the narrow kernel, page tails
        (Problem("fp8", 2, [0, 1, 700, 3000], 2, 64, 512, page=128), ["bf16"]),      # 64-row kernel, MTP, empty rows
        (Problem("fp8", 3, [129, 1000, 2, 4096], 1, 128, 256), ["bf16"]),            # TPLA tp2 slice (pair kernel)
        (Problem("fp8", 4, [300, 65], 1, 8, 128, d_r=32), ["bf16"]),                 # TPLA tp4 slice, d_r 32
        (Problem("fp4", 5, [1, 63, 200, 2000], 1, 16, 512), ["bf16", "fp8"]),
        (Problem("fp4", 6, [0, 1, 700, 4000], 2, 64, 512, page=128), ["bf16", "fp8"]),
        (Problem("fp4", 7, [65, 1000], 1, 64, 256), ["bf16", "fp8"]),
        (Problem("fp4", 8, [300, 64], 1, 4, 128, d_r=32), ["bf16", "fp8"]),
        (Problem("codebook", 9, [1, 63, 200, 2000], 1, 16, 512), ["bf16"]),
        (Problem("codebook", 10, [5, 1500], 2, 32, 256, page=128), ["bf16"]),
        (Problem("codebook", 11, [3, 100], 1, 8, 64, d_r=32), ["bf16"]),
    ]
    for p, routes in cases:
        check_decode(rep, p, routes)
    for i, (fmt, d_c, d_r, page) in enumerate([("fp8", 512, 64, 64), ("fp8", 128, 32, 128), ("fp4", 512, 64, 64),
                                               ("fp4", 256, 64, 128), ("codebook", 512, 64, 64),
                                               ("codebook", 128, 32, 64)]):
        check_append_edge_rows(rep, fmt, d_c, d_r, page, 40 + i)
    check_graph(rep, "fp8", "bf16", 512, 16)
    check_graph(rep, "fp8", "bf16", 512, 128)
    check_graph(rep, "fp4", "bf16", 512, 16, s_q=2)
    check_graph(rep, "fp4", "fp8", 512, 64)
    check_graph(rep, "codebook", "bf16", 256, 16)
    check_planned(rep, "fp8", 16, 512)            # the narrow kernel: a planned decode is one launch
    check_planned(rep, "fp8", 128, 512, s_q=2)    # the 64-row kernel
    check_planned(rep, "fp4", 16, 512)            # the FP4 cache's FP8 route
    check_errors(rep)
    print(f"{len(rep.rows) - rep.failed} passed, {rep.failed} failed ({time.time() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep.rows, f, indent=1)
    sys.exit(1 if rep.failed else 0)


if __name__ == "__main__":
    main()
