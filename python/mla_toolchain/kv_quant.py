"""Quantised paged latent caches from PyTorch: FP8, FP4 and codebook (allocation, append, decode).

The formats (byte layouts: docs/formats/kv-fp8.md, docs/formats/kv-fp4.md); bytes per token at
d_c = 512, d_r = 64, against 1152 for the BF16 cache:
  fp8       644  E4M3 latent, one fp32 scale per token, RoPE key in BF16 divided by that scale
  fp4       400  E2M1 latent, one UE8M0 scale per 32 values (the layer's scale constant c), BF16 RoPE
  codebook  388  4-bit indices into the layer's 16 levels (per-token RMS units), one fp32 scale, BF16 RoPE
The 4-bit caches are meant for a converted model whose latent is Hadamard-rotated (mla-convert
--kv fp4|codebook); nothing here rotates.

A cache is a uint8 tensor [num_pages, page_size, bytes_per_token] (alloc_kv_cache; [num_pages,
page_size, 1, bytes_per_token] is taken too), page_size 64 or 128. It only sizes the pages: inside a
page the bytes are stored by sections (all tokens' latent codes, then their scales, then their RoPE
keys, swizzled for the kernels' bulk copies), so cache[p, t] is NOT token t's bytes; cache[p] is
page p. Page ids, block_table and lengths work as for the BF16 cache (mla_decode_with_kvcache).

Appends (BF16 rows [B, n_new, d_c + d_r], token i of request b written at position positions[b] + i
through block_table) run one kernel, bit for bit the CPU encoders of lib/quant. Decodes take the
BF16 query and return what mla_decode_with_kvcache returns: out [B, s_q, H, d_c] bf16 and lse
[B, s_q, H] fp32 (natural log; -inf and out 0 for a row that sees no key).

Every call launches on torch's current stream, takes its outputs and scratch from torch's caching
allocator and never synchronises with the host, so appends and decodes can be captured in a CUDA
graph (call once before capturing: the first call loads the library and sizes the split). The
split-KV schedule is computed on the device from cache_seqlens in every decode call, so a replayed
graph follows new lengths, positions and values written in place. A page id outside
[0, num_pages) or a position past block_table's pages is bad device data: the append skips that
token and the decode that tile (no error is raised: raising would need a host sync).
"""
import ctypes
import math
import numbers
import struct

import torch

from . import _lib
from .decode import (DecodePlan, UnsupportedArgument, _check_tensor, _require, check_plan, check_query_shape,
                     stream_and_err)

KV_FORMATS = ("fp8", "fp4", "codebook")
ROUTES = ("bf16", "fp8")
PAGE_SIZES = (64, 128)
# What the decode kernels take (kernels/fp8_decode.hpp, kernels/kv4_decode.hpp).
FP8_KERNEL_D_C, FP8_KERNEL_D_R = (128, 256, 512), (32, 64)
BF16_ROUTE_D_C, BF16_ROUTE_D_R = (32, 64, 128, 256, 512), (16, 32, 64)
# The FP8-tensor-core route of the FP4 cache: more query rows than this at d_c <= 256 go to the
# 128-row TPLA-slice kernel, which reads no FP4.
FP4_FP8_ROUTE_MAX_ROWS_SLICE = 64
CODEBOOK_LEVELS = 16
_FORMAT_ID = {"fp4": 0, "codebook": 1}
_ROUTE_ID = {"bf16": 0, "fp8": 1}


def _check_format(kv_format):
    _require(kv_format in KV_FORMATS, f"kv_format = {kv_format!r}: supported {KV_FORMATS}")


def _fp8_row_ok(row_bytes):
    """A section row width the paged layouts take: 16, 32, 64 or a multiple of 128 bytes."""
    return row_bytes in (16, 32, 64) or (row_bytes > 0 and row_bytes % 128 == 0)


def _check_layout(kv_format, d_c, d_r, d_c_name, d_r_name):
    """The widths the format's page layout (and so its append) takes; each message names the argument."""
    _require(isinstance(d_c, numbers.Integral) and not isinstance(d_c, bool), f"{d_c_name} = {d_c!r}: must be an int")
    _require(isinstance(d_r, numbers.Integral) and not isinstance(d_r, bool), f"{d_r_name} = {d_r!r}: must be an int")
    if kv_format == "fp8":
        _require(_fp8_row_ok(d_c), f"{d_c_name} = {d_c}: the fp8 layout takes 16, 32, 64 or a multiple of 128")
    else:
        _require(32 <= d_c <= 4096 and d_c & (d_c - 1) == 0,
                 f"{d_c_name} = {d_c}: the {kv_format} layout takes a power of two from 32 to 4096")
    _require(_fp8_row_ok(2 * d_r), f"{d_r_name} = {d_r}: the {kv_format} layout takes 8, 16, 32 or a multiple of 64")


def _bytes_per_token(kv_format, d_c, d_r):
    if kv_format == "fp8":
        return d_c + 2 * d_r + 4
    return d_c // 2 + (d_c // 32 if kv_format == "fp4" else 4) + 2 * d_r


def kv_cache_bytes_per_token(kv_format, d_c=512, d_r=64):
    """Bytes one token takes in a page of kv_format ("fp8", "fp4", "codebook"): 644 / 400 / 388 at
    d_c = 512, d_r = 64 (BF16: 1152); a TPLA rank's slice d_c/g the same with its d_c."""
    _check_format(kv_format)
    _check_layout(kv_format, d_c, d_r, "d_c", "d_r")
    return _bytes_per_token(kv_format, d_c, d_r)


def alloc_kv_cache(kv_format, num_pages, page_size=64, d_c=512, d_r=64, device=None):
    """A zeroed paged cache of kv_format: uint8 [num_pages, page_size, kv_cache_bytes_per_token(...)]
    on `device` (default: the current CUDA device), page_size 64 or 128."""
    bpt = kv_cache_bytes_per_token(kv_format, d_c, d_r)
    _require(isinstance(num_pages, numbers.Integral) and num_pages >= 1,
             f"num_pages = {num_pages!r}: must be an int >= 1")
    _require(page_size in PAGE_SIZES, f"page_size = {page_size!r}: supported {PAGE_SIZES}")
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return torch.zeros(num_pages, page_size, bpt, dtype=torch.uint8, device=device)


def _cache_pages(kv_format, k_cache, d_c, d_r, d_c_name):
    """k_cache [num_pages, page, bpt] or [num_pages, page, 1, bpt] uint8 -> [num_pages, page, bpt] (never copied)."""
    if k_cache.dim() == 4:
        _require(k_cache.shape[2] == 1,
                 f"k_cache.shape[2] (num_heads_k) = {k_cache.shape[2]}: MLA caches one latent head (must be 1)")
    bpt = _bytes_per_token(kv_format, d_c, d_r)
    _require(k_cache.shape[-1] == bpt,
             f"k_cache.shape[-1] = {k_cache.shape[-1]}: the {kv_format} layout at d_c = {d_c} ({d_c_name}), "
             f"d_r = {d_r} has {bpt} bytes per token (kv_cache_bytes_per_token)")
    _require(k_cache.shape[1] in PAGE_SIZES,
             f"k_cache.shape[1] (page size) = {k_cache.shape[1]}: supported {PAGE_SIZES}")
    _require(k_cache.shape[0] >= 1, f"k_cache.shape[0] (num_pages) = {k_cache.shape[0]}: must be >= 1")
    _require(k_cache.is_contiguous(), f"k_cache.stride() = {k_cache.stride()}: the paged cache must be contiguous")
    return k_cache.view(k_cache.shape[0], k_cache.shape[1], bpt)


def _fp32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def _check_c(c):
    _require(isinstance(c, numbers.Real) and not isinstance(c, bool) and math.isfinite(c) and _fp32(c) > 0,
             f"c = {c!r}: the FP4 scale constant must be a finite float > 0 (mla-calibrate's per-layer value)")
    return _fp32(c)


def _check_levels(levels):
    """16 strictly ascending finite levels on the host -> a ctypes float[16] (a kernel argument)."""
    if isinstance(levels, torch.Tensor):
        _require(levels.device.type == "cpu",
                 f"levels.device = {levels.device}: pass the 16 levels on the host (a list or a CPU tensor): they "
                 f"are kernel arguments, and reading them from the GPU would synchronise with it")
        levels = levels.detach().double().flatten().tolist()
    try:
        values = [float(v) for v in levels]
    except (TypeError, ValueError):
        raise UnsupportedArgument(f"levels = {levels!r}: must be 16 floats") from None
    _require(len(values) == CODEBOOK_LEVELS, f"len(levels) = {len(values)}: the codebook has {CODEBOOK_LEVELS} levels")
    values = [_fp32(v) if math.isfinite(v) else v for v in values]
    _require(all(math.isfinite(v) for v in values), f"levels = {values}: must be finite")
    _require(all(a < b for a, b in zip(values, values[1:])),
             f"levels = {values}: must be strictly ascending (as fp32)")
    return (ctypes.c_float * CODEBOOK_LEVELS)(*values)


# ---- append ----

def _check_append(kv_format, kv, k_cache, block_table, positions, head_dim_v):
    _check_tensor("kv", kv, torch.bfloat16, (3,))
    dev = kv.device
    _check_tensor("k_cache", k_cache, torch.uint8, (3, 4), dev)
    _check_tensor("block_table", block_table, torch.int32, (2,), dev)
    _check_tensor("positions", positions, torch.int32, (1,), dev)
    b, n_new, dim = kv.shape
    _require(b >= 1, f"kv.shape[0] (batch) = {b}: must be >= 1")
    _require(n_new >= 1, f"kv.shape[1] (n_new) = {n_new}: must be >= 1")
    _require(isinstance(head_dim_v, numbers.Integral) and 0 < head_dim_v < dim,
             f"head_dim_v = {head_dim_v!r}: must be an int in 1..kv.shape[-1] - 1 = {dim - 1} (d_c; the rest is RoPE)")
    d_r = dim - head_dim_v
    _check_layout(kv_format, head_dim_v, d_r, "head_dim_v",
                  f"kv.shape[-1] - head_dim_v ({dim} - {head_dim_v}, RoPE width)")
    cache = _cache_pages(kv_format, k_cache, head_dim_v, d_r, "head_dim_v")
    _require(block_table.shape[0] == b, f"block_table.shape = {tuple(block_table.shape)}: must have batch = {b} rows")
    _require(block_table.shape[1] >= 1, f"block_table.shape = {tuple(block_table.shape)}: needs >= 1 column")
    _require(positions.shape[0] == b, f"positions.shape = {tuple(positions.shape)}: must be ({b},)")
    return kv.contiguous(), cache, block_table.contiguous(), positions.contiguous(), d_r


def fp8_append_kvcache(kv, k_cache, block_table, positions, head_dim_v):
    """Writes BF16 rows into an FP8 paged cache (kernels/fp8_append.hpp), in place; returns k_cache.

    kv:          [batch, n_new, d_c + d_r] bf16, a request's new tokens [x | k_pe] (as the BF16 cache holds them)
    k_cache:     uint8 [num_pages, page, kv_cache_bytes_per_token("fp8", d_c, d_r)] (alloc_kv_cache), page 64 or 128
    block_table: [batch, max_pages] int32; positions: [batch] int32 (token i of request b goes to
                 position positions[b] + i: row (p % page) of page block_table[b, p // page])
    head_dim_v:  d_c (the decode's head_dim_v)
    Per token: s = max(amax |x|, 1e-12) / 448, latent E4M3(x / s), RoPE BF16(k_pe / s); a token holding
    NaN or Inf is stored poisoned (rows that attend to it get NaN, as float64 would).
    """
    kv, cache, table, pos, d_r = _check_append("fp8", kv, k_cache, block_table, positions, head_dim_v)
    stream, err = stream_and_err(kv.device)
    with torch.cuda.device(kv.device):
        rc = _lib.fp8.get().mla_fp8_capi_append(
            kv.data_ptr(), pos.data_ptr(), table.data_ptr(), cache.data_ptr(), kv.shape[0], kv.shape[1], head_dim_v,
            d_r, table.shape[1], cache.shape[0], cache.shape[1], stream, err, _lib.ERR_LEN)
    _lib.check(rc, err, "fp8_append_kvcache")
    return k_cache


def _kv4_append(kv_format, what, kv, k_cache, block_table, positions, head_dim_v, c, levels):
    kv, cache, table, pos, d_r = _check_append(kv_format, kv, k_cache, block_table, positions, head_dim_v)
    stream, err = stream_and_err(kv.device)
    with torch.cuda.device(kv.device):
        rc = _lib.kv4.get().mla_kv4_capi_append(
            _FORMAT_ID[kv_format], c, levels, kv.data_ptr(), pos.data_ptr(), table.data_ptr(), cache.data_ptr(),
            kv.shape[0], kv.shape[1], head_dim_v, d_r, table.shape[1], cache.shape[0], cache.shape[1], stream, err,
            _lib.ERR_LEN)
    _lib.check(rc, err, what)
    return k_cache


def fp4_append_kvcache(kv, k_cache, block_table, positions, head_dim_v, *, c=0.156):
    """Writes BF16 rows into an FP4 paged cache (kernels/kv4_append.hpp), in place; returns k_cache.

    Arguments as fp8_append_kvcache (k_cache sized for "fp4"). c: the layer's scale constant (the
    Round rule of docs/formats/kv-fp4.md: per 32 values E = round(log2(c * amax)), codes E2M1(x / 2^E));
    mla-calibrate fits it per layer and mla-convert --kv fp4 records it (config.json kv_cache). RoPE
    is stored as BF16 unscaled; a token holding NaN or Inf is stored poisoned.
    """
    c = _check_c(c)
    return _kv4_append("fp4", "fp4_append_kvcache", kv, k_cache, block_table, positions, head_dim_v, c, None)


def codebook_append_kvcache(kv, k_cache, block_table, positions, head_dim_v, *, levels):
    """Writes BF16 rows into a codebook paged cache (kernels/kv4_append.hpp), in place; returns k_cache.

    Arguments as fp8_append_kvcache (k_cache sized for "codebook"). levels: the layer's 16 strictly
    ascending levels in per-token RMS units (a list or CPU tensor; mla-convert --kv codebook records
    them: calib.h5's Lloyd-Max levels divided by sqrt(mean_square)). Per token s = RMS(x), index =
    the nearest level of x / s (ties to the lower); RoPE stored as BF16.
    """
    lv = _check_levels(levels)
    return _kv4_append("codebook", "codebook_append_kvcache", kv, k_cache, block_table, positions, head_dim_v, 0.0, lv)


# ---- decode ----

class _Plan:
    """(parts, workspace bytes) of a decode shape on a device, from the library (host-side only)."""
    _cache = {}

    @classmethod
    def get(cls, kernel, device_index, batch, s_q, heads, d_c, d_r):
        key = (kernel, device_index, batch, s_q, heads, d_c, d_r)
        hit = cls._cache.get(key)
        if hit is None:
            ws = ctypes.c_size_t(0)
            with torch.cuda.device(device_index):
                if kernel == "fp8":
                    parts = _lib.fp8.get().mla_fp8_capi_parts(batch, s_q, heads, d_c, d_r, ctypes.byref(ws))
                else:  # the 4-bit library: "kv4-bf16" or "kv4-fp8"
                    parts = _lib.kv4.get().mla_kv4_capi_parts(_ROUTE_ID[kernel[4:]], batch, s_q, heads, d_c, d_r,
                                                              ctypes.byref(ws))
            if parts <= 0:
                raise RuntimeError(f"{kernel} decode: the library gives no split for batch={batch} s_q={s_q} "
                                   f"heads={heads} d_c={d_c} d_r={d_r}")
            hit = cls._cache[key] = (parts, ws.value)
        return hit


def _check_route(route):
    _require(route in ROUTES, f"route = {route!r}: supported 'bf16' (BF16 tensor cores, the default) or 'fp8' "
                              f"(FP8 tensor cores)")


def fp8_decode_plan(q, cache_seqlens, head_dim_v):
    """The DecodePlan of one decode step whose queries have q's shape [batch, s_q, heads, d_c + d_r]
    (bf16; only the shape is read) over cache_seqlens (int32 [batch], read on the device): one kernel
    launch on torch's current stream, no host sync. For fp8_decode_with_kvcache and
    fp4_decode_with_kvcache(route="fp8"): the same kernels' schedule (same shapes as those take)."""
    _check_tensor("q", q, torch.bfloat16, (4,))
    _check_tensor("cache_seqlens", cache_seqlens, torch.int32, (1,), q.device)
    b, s_q, h, d_r = check_query_shape(q, cache_seqlens, head_dim_v, FP8_KERNEL_D_C, FP8_KERNEL_D_R, "the FP8 kernels")
    parts, ws_bytes = _Plan.get("fp8", q.device.index, b, s_q, h, head_dim_v, d_r)
    cache_seqlens = cache_seqlens.contiguous()
    plan = DecodePlan("fp8", q.device, (b, s_q, h, head_dim_v, d_r), parts, ws_bytes, cache_seqlens)
    stream, err = stream_and_err(q.device)
    # mode 1: fp8_decode_plan only (the query, cache and output pointers are not read).
    with torch.cuda.device(q.device):
        rc = _lib.fp8.get().mla_fp8_capi_run(q.data_ptr(), 0, 0, cache_seqlens.data_ptr(), 0, None, b, s_q, h,
                                             head_dim_v, d_r, 1, 64, 1, 1.0, parts, plan.workspace.data_ptr(),
                                             ws_bytes, 1, stream, err, _lib.ERR_LEN)
    _lib.check(rc, err, "fp8_decode_plan")
    return plan


def _check_decode(kv_format, route, q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale):
    """Validates a decode call; returns (cache [num_pages, page, bpt], d_r, softmax scale)."""
    _check_tensor("q", q, torch.bfloat16, (4,))
    dev = q.device
    _check_tensor("k_cache", k_cache, torch.uint8, (3, 4), dev)
    _check_tensor("block_table", block_table, torch.int32, (2,), dev)
    _check_tensor("cache_seqlens", cache_seqlens, torch.int32, (1,), dev)
    fp8_kernel = kv_format == "fp8" or route == "fp8"
    dcs, drs = (FP8_KERNEL_D_C, FP8_KERNEL_D_R) if fp8_kernel else (BF16_ROUTE_D_C, BF16_ROUTE_D_R)
    kernel = "the fp8 decode" if kv_format == "fp8" else f"the {kv_format} cache's route={route!r}"
    b, s_q, h, d_r = check_query_shape(q, cache_seqlens, head_dim_v, dcs, drs, kernel)
    if kv_format == "fp4" and route == "fp8" and head_dim_v <= 256:
        _require(s_q * h <= FP4_FP8_ROUTE_MAX_ROWS_SLICE,
                 f"q.shape[1] * q.shape[2] (query rows) = {s_q} * {h} = {s_q * h}: route='fp8' takes at most "
                 f"{FP4_FP8_ROUTE_MAX_ROWS_SLICE} at head_dim_v = {head_dim_v} <= 256 (more rows go to the 128-row "
                 f"TPLA-slice kernel, which reads no FP4); route='bf16' takes them")
    cache = _cache_pages(kv_format, k_cache, head_dim_v, d_r, "head_dim_v")
    _require(block_table.shape[0] == b, f"block_table.shape = {tuple(block_table.shape)}: must have batch = {b} rows")
    _require(block_table.shape[1] >= 1, f"block_table.shape = {tuple(block_table.shape)}: needs >= 1 column")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    _require(isinstance(softmax_scale, numbers.Real) and not isinstance(softmax_scale, bool)
             and math.isfinite(softmax_scale) and softmax_scale > 0,
             f"softmax_scale = {softmax_scale!r}: must be a finite float > 0")
    return cache, d_r, float(softmax_scale)


def _launch(kernel, kv_format, levels, q, cache, block_table, cache_seqlens, head_dim_v, d_r, scale, plan=None):
    q, block_table, cache_seqlens = q.contiguous(), block_table.contiguous(), cache_seqlens.contiguous()
    b, s_q, h, _ = q.shape
    if plan is None:
        parts, ws_bytes = _Plan.get(kernel, q.device.index, b, s_q, h, head_dim_v, d_r)
        ws, mode = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=q.device), 0  # 0: schedules itself
    else:
        check_plan(plan, "fp8", f"{kv_format} decode", q, head_dim_v, d_r)  # only the FP8 kernels take one
        parts, ws_bytes, ws, mode = plan.parts, plan.workspace_bytes, plan.workspace, 2  # 2: reads the plan
    out = torch.empty(b, s_q, h, head_dim_v, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(b, s_q, h, dtype=torch.float32, device=q.device)
    stream, err = stream_and_err(q.device)
    args = (q.data_ptr(), cache.data_ptr(), block_table.data_ptr(), cache_seqlens.data_ptr(), out.data_ptr(),
            lse.data_ptr(), b, s_q, h, head_dim_v, d_r, cache.shape[0], cache.shape[1], block_table.shape[1], scale,
            parts, ws.data_ptr(), ws_bytes, mode, stream, err, _lib.ERR_LEN)
    with torch.cuda.device(q.device):
        if kernel == "fp8":
            rc = _lib.fp8.get().mla_fp8_capi_run(*args)
        else:
            rc = _lib.kv4.get().mla_kv4_capi_run(_ROUTE_ID[kernel[4:]], _FORMAT_ID[kv_format], levels, *args)
    _lib.check(rc, err, f"{kv_format}_decode_with_kvcache")
    return out, lse


def fp8_decode_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale=None, *, plan=None):
    """Paged MLA decode from an FP8 cache (kernels/fp8_decode.hpp, SnapMLA-style: QK^T and PV on FP8
    tensor cores, the query quantised per (token, head) row to E4M3 inside the call).

    plan: a DecodePlan of this step (fp8_decode_plan): the call then launches no scheduler (<= 32
    query rows: one launch in all). Without it every call schedules itself.
    Arguments and returns as mla_decode_with_kvcache, with k_cache the FP8 pages (fp8_append_kvcache):
    q [batch, s_q (1 or 2), heads (1..128), d_c + d_r] bf16, head_dim_v = d_c in (128, 256, 512),
    d_r 32 or 64. Returns out [batch, s_q, heads, d_c] bf16, lse [batch, s_q, heads] fp32.
    Speed (H200, docs/benchmarks.md "Every cache format from the command line", B = 128, against our
    BF16 decode on the same tokens): 1.67-1.73x at 16 heads, 1.27x at 64, 1.11-1.14x at 128 rows;
    at a TPLA slice (d_c = 256, 128 heads) 0.71-0.83x: there it buys capacity (1.65x the tokens per
    byte), not step time. Accuracy: the E4M3 cache, query and P give 0.025-0.058 relative L2 against
    float64 on the BF16 values on random data (bound 0.08, tests/quant/test_fp8_decode_twin.cpp).
    """
    cache, d_r, scale = _check_decode("fp8", None, q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale)
    return _launch("fp8", "fp8", None, q, cache, block_table, cache_seqlens, head_dim_v, d_r, scale, plan)


def fp4_decode_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale=None, *, route="bf16",
                            plan=None):
    """Paged MLA decode from an FP4 cache (fp4_append_kvcache); arguments and returns as
    mla_decode_with_kvcache, plus the route:

    route="bf16" (default; kernels/kv4_decode.hpp): each 32-token tile dequantised to BF16 in shared
      memory and decoded by the BF16 decode's own code: bit for bit mla_decode_with_kvcache on the
      dequantised cache. head_dim_v in (32, 64, 128, 256, 512), d_r 16, 32 or 64, any head count.
    route="fp8" (kernels/fp8_decode.hpp fp8_decode_fp4_cache_bf16q): each 64-token tile rewritten
      as an FP8 tile (exact while a token's group scales span <= 11 octaves) and decoded on FP8
      tensor cores. head_dim_v in (128, 256, 512), d_r 32 or 64, at most 64 query rows (s_q * heads)
      at head_dim_v <= 256. plan: a DecodePlan of this step (fp8_decode_plan), as for
      fp8_decode_with_kvcache.
    Speed (H200, docs/benchmarks.md "Every cache format from the command line", B = 128, d_c = 512,
    against our BF16 decode on the same tokens): 16 heads: bf16 route 0.65-0.69x, fp8 route
    1.11-1.14x; 32 rows (16 heads, s_q 2): 0.34x vs 1.05x; 64 heads: 0.20x vs 1.00x; 128 heads:
    0.16-0.17x vs 0.90x (the bf16 route reads and dequantises the cache once per 16 query rows). So
    above 16 rows the fp8 route is 3.1-5.6x faster. Accuracy: the FP4 grid dominates (about 0.1
    relative error per value; verify-decode's bound against the float64 model 0.25 relative L2);
    the fp8 route adds the FP8 decode's E4M3 query and P rounding: its relative L2 is 0.5-0.8% higher
    on the tiny model's layers (6.89e-2 against 6.85e-2, say; bound 0.27), and the perplexity change
    through it cannot be told apart from the bf16 route's.
    """
    _check_route(route)
    _require(plan is None or route == "fp8", "plan: a DecodePlan serves the FP8 kernels only (route='fp8'); "
                                             "route='bf16' schedules itself in every call")
    cache, d_r, scale = _check_decode("fp4", route, q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale)
    return _launch("kv4-" + route, "fp4", None, q, cache, block_table, cache_seqlens, head_dim_v, d_r, scale, plan)


def codebook_decode_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale=None, *, levels):
    """Paged MLA decode from a codebook cache (codebook_append_kvcache) on BF16 tensor cores
    (kernels/kv4_decode.hpp: tiles dequantised to BF16(level * scale) in shared memory, then the BF16
    decode's code: bit for bit mla_decode_with_kvcache on the dequantised cache). levels: the 16
    levels the cache was written with (host). Arguments and returns as mla_decode_with_kvcache;
    head_dim_v in (32, 64, 128, 256, 512), d_r 16, 32 or 64. Speed (H200, B = 128, 16 heads,
    d_c = 512): 0.60-0.64x our BF16 decode (docs/benchmarks.md); the codebook has no FP8 route.
    """
    lv = _check_levels(levels)
    cache, d_r, scale = _check_decode("codebook", "bf16", q, k_cache, block_table, cache_seqlens, head_dim_v,
                                      softmax_scale)
    return _launch("kv4-bf16", "codebook", lv, q, cache, block_table, cache_seqlens, head_dim_v, d_r, scale)


def kv_decode_parts(kv_format, q, head_dim_v, route="bf16"):
    """The split-KV parts a decode of q's shape uses for kv_format (and route, for fp4; the fp8 cache
    has one kernel): what the CPU twins need to split alike (python/tests/check_kv_package_gpu.py)."""
    _check_format(kv_format)
    _check_route(route)
    _require(route == "bf16" or kv_format != "codebook", f"route = {route!r}: the codebook cache has no fp8 route")
    b, s_q, h, d = q.shape
    kernel = "fp8" if kv_format == "fp8" else "kv4-" + (route if kv_format == "fp4" else "bf16")
    return _Plan.get(kernel, q.device.index, b, s_q, h, head_dim_v, d - head_dim_v)[0]
