"""BF16 paged MLA decode (kernels/mla_decode.hpp) from PyTorch: our own entry point.

mla_decode_with_kvcache runs the kernel as it is: any supported latent width d_c (the TPLA slice
widths 128 and 256 among them), s_q 1 or 2 with the causal multi-token-prediction rule (the last
query token sees all L keys, the one before it L - 1), LSE in natural log laid out like the
output ([batch, s_q, heads]), -inf for a row that sees no key. flash_mla_compat builds FlashMLA's
interface on it.

One call = up to three kernel launches on torch's current stream (device scheduler, split kernel,
combine; no combine where the many-head split kernel merges the splits itself); outputs and scratch come from torch's caching allocator; no host synchronisation, so
a call can be captured in a CUDA graph. Without plan= the split schedule is computed on the device
from cache_seqlens in every call, so a replayed graph follows new lengths. With plan= (a DecodePlan
of mla_decode_plan: the schedule once per decode step, as FlashMLA's get_mla_metadata) every layer's
call of the step reads that schedule and launches no scheduler; the plan follows new lengths in a
graph where its mla_decode_plan call is captured with the decodes.
"""
import ctypes
import math
import numbers

import torch

from . import _lib

# Shapes the kernel supports (quant::validate_decode_params).
HEAD_DIMS_V = (32, 64, 128, 256, 512)
ROPE_DIMS = tuple(range(16, 129, 16))
PAGE_SIZES = (64, 128)
MAX_HEADS = 128


class UnsupportedArgument(ValueError):
    """An argument this package does not support (the message names it and its value)."""


def _require(ok, message):
    if not ok:
        raise UnsupportedArgument(message)


def _check_tensor(name, t, dtype, ndim, device=None):
    _require(isinstance(t, torch.Tensor), f"{name} must be a torch.Tensor, got {type(t).__name__}")
    _require(t.is_cuda, f"{name}.device = {t.device}: must be a CUDA device")
    if device is not None:
        _require(t.device == device, f"{name}.device = {t.device}: must be q's device {device}")
    _require(t.dtype == dtype, f"{name}.dtype = {t.dtype}: must be {dtype}")
    _require(t.dim() in ndim, f"{name}.shape = {tuple(t.shape)}: must have {' or '.join(map(str, ndim))} dims")


def stream_and_err(device):
    """torch's current stream on `device` (every launch goes there) and a buffer for the C error message."""
    return torch.cuda.current_stream(device).cuda_stream, ctypes.create_string_buffer(_lib.ERR_LEN)


def check_query_shape(q, cache_seqlens, head_dim_v, dcs, drs, kernel):
    """The query's shape and the lengths' count against what `kernel` takes (head_dim_v in dcs, the
    RoPE width in drs); returns (batch, s_q, heads, d_r). A decode and a plan check the same."""
    b, s_q, h, d = q.shape
    _require(b >= 1, f"q.shape[0] (batch) = {b}: must be >= 1")
    _require(s_q in (1, 2), f"q.shape[1] (s_q) = {s_q}: supported 1, 2 (2: the causal MTP rule)")
    _require(1 <= h <= MAX_HEADS, f"q.shape[2] (num_heads_q) = {h}: supported 1..{MAX_HEADS}")
    _require(isinstance(head_dim_v, numbers.Integral) and head_dim_v in dcs,
             f"head_dim_v = {head_dim_v!r}: {kernel} takes {dcs}")
    d_r = d - head_dim_v
    _require(d_r in drs, f"q.shape[-1] - head_dim_v = {d} - {head_dim_v} = {d_r} (RoPE width): {kernel} takes {drs}")
    _require(cache_seqlens.shape[0] == b, f"cache_seqlens.shape = {tuple(cache_seqlens.shape)}: must be ({b},)")
    return b, s_q, h, d_r


def _cache_as_pages(k_cache, dim):
    """k_cache [num_pages, page, 1, dim] or [num_pages, page, dim] -> the kernel's [num_pages, page, dim]."""
    if k_cache.dim() == 4:
        _require(k_cache.shape[2] == 1,
                 f"k_cache.shape[2] (num_heads_k) = {k_cache.shape[2]}: MLA caches one latent head (must be 1)")
    _require(k_cache.shape[-1] == dim, f"k_cache.shape[-1] = {k_cache.shape[-1]}: must equal q.shape[-1] = {dim}")
    _require(k_cache.shape[1] in PAGE_SIZES, f"k_cache.shape[1] (page size) = {k_cache.shape[1]}: supported {PAGE_SIZES}")
    _require(k_cache.shape[0] >= 1, f"k_cache.shape[0] (num_pages) = {k_cache.shape[0]}: must be >= 1")
    # A cache is never copied (it is the model's memory): it must already be dense.
    _require(k_cache.is_contiguous(), f"k_cache.stride() = {k_cache.stride()}: the paged cache must be contiguous")
    return k_cache.view(k_cache.shape[0], k_cache.shape[1], dim)


class _Plan:
    """Parts and workspace bytes the launcher uses for a shape on a device (host-side only)."""
    _cache = {}

    @classmethod
    def get(cls, device_index, batch, s_q, heads, d_c, d_r, variant=0):
        key = (device_index, batch, s_q, heads, d_c, d_r, variant)
        hit = cls._cache.get(key)
        if hit is None:
            ws = ctypes.c_size_t(0)
            with torch.cuda.device(device_index):
                parts = _lib.decode.get().mla_decode_capi_parts(batch, s_q, heads, d_c, d_r, variant, ctypes.byref(ws))
            if parts <= 0:
                raise RuntimeError(f"mla_decode_capi_parts failed for batch={batch} s_q={s_q} heads={heads} "
                                   f"d_c={d_c} d_r={d_r}")
            hit = cls._cache[key] = (parts, ws.value)
        return hit


# Who makes a DecodePlan for which kernels (DecodePlan.kernel): their schedules and workspace layouts
# differ, so a plan serves only its own kernels.
_PLAN_MAKERS = {"bf16": ("mla_decode_plan", "the BF16 decode"), "fp8": ("fp8_decode_plan", "the FP8 kernels")}
_PLAN_FIELDS = ("batch", "s_q", "heads", "head_dim_v", "d_r")


class DecodePlan:
    """The split-KV schedule of one decode step (FlashMLA's get_mla_metadata), in the workspace it
    lives in. Made once per step by mla_decode_plan (for mla_decode_with_kvcache; flash_mla_with_kvcache
    makes one per FlashMLASchedMeta) or by fp8_decode_plan (for fp8_decode_with_kvcache and
    fp4_decode_with_kvcache(route="fp8")), read by every layer's decode of that step (plan=...), which
    then launches no scheduler. A plan serves only the kernels it was made for (checked).

    The workspace also holds the split partials and merge counters, so the calls that share a plan
    must run one after another on one stream (torch's current stream, as each call uses; the plan's
    own launch too) and must see the same cache_seqlens values, q shape and head_dim_v as the plan:
    the shape and device are checked, the values cannot be without a host sync (a plan of other
    lengths decodes wrongly). Make a new plan when the lengths change; a CUDA graph may capture the
    plan with the decodes.
    """

    def __init__(self, kernel, device, shape, parts, workspace_bytes, seqlens):
        self.kernel = kernel  # "bf16" or "fp8" (_PLAN_MAKERS)
        self.device, self.shape, self.parts, self.workspace_bytes = device, shape, parts, workspace_bytes
        self.workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device=device)
        # The lengths the schedule is computed from: kept alive with the plan, since its launch reads
        # them on the device after the call returns.
        self.seqlens = seqlens


def check_plan(plan, kernel, what, q, head_dim_v, d_r):
    """Refuses a plan that is not a DecodePlan of `kernel` for q's device and shape (each message
    names the field, the plan's value and the call's); `what` names the call."""
    maker, kernels = _PLAN_MAKERS[kernel]
    _require(isinstance(plan, DecodePlan), f"plan = {type(plan).__name__}: must be a DecodePlan of {maker}")
    made_by, made_for = _PLAN_MAKERS[plan.kernel]
    _require(plan.kernel == kernel, f"plan: made by {made_by} for {made_for}; this {what} takes a plan of {maker} "
                                    f"(for {kernels}: the schedules and workspaces differ)")
    _require(q.device == plan.device, f"plan: made for {plan.device}, this {what} has q on {q.device}")
    b, s_q, h, _ = q.shape
    shape = (b, s_q, h, head_dim_v, d_r)
    bad = [i for i in range(len(_PLAN_FIELDS)) if shape[i] != plan.shape[i]]
    _require(not bad, "plan: made for " + ", ".join(f"{_PLAN_FIELDS[i]} = {plan.shape[i]}" for i in bad)
             + f"; this {what} has " + ", ".join(f"{_PLAN_FIELDS[i]} = {shape[i]}" for i in bad)
             + f" ((batch, s_q, heads, head_dim_v, d_r): plan {plan.shape}, call {shape})")


def decode_parts(q, head_dim_v):
    """The number of split-KV parts a call with q's shape uses (what the CPU twin needs to split alike)."""
    b, s_q, h, d = q.shape
    return _Plan.get(q.device.index, b, s_q, h, head_dim_v, d - head_dim_v)[0]


def check_common(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale):
    """Validates what every path needs; returns (cache as [num_pages, page, dim], softmax scale)."""
    _check_tensor("q", q, torch.bfloat16, (4,))
    dev = q.device
    _check_tensor("k_cache", k_cache, torch.bfloat16, (3, 4), dev)
    _check_tensor("block_table", block_table, torch.int32, (2,), dev)
    _check_tensor("cache_seqlens", cache_seqlens, torch.int32, (1,), dev)
    b, _, h, d = q.shape
    _require(b >= 1, f"q.shape[0] (batch) = {b}: must be >= 1")
    _require(1 <= h <= MAX_HEADS, f"q.shape[2] (num_heads_q) = {h}: supported 1..{MAX_HEADS}")
    _require(isinstance(head_dim_v, int) and head_dim_v in HEAD_DIMS_V,
             f"head_dim_v = {head_dim_v!r}: supported {HEAD_DIMS_V}")
    d_r = d - head_dim_v
    _require(16 <= d_r <= 128 and d_r % 16 == 0,
             f"q.shape[-1] - head_dim_v = {d} - {head_dim_v} = {d_r} (RoPE width): supported multiples of 16 in 16..128")
    cache = _cache_as_pages(k_cache, d)
    _require(block_table.shape[0] == b, f"block_table.shape = {tuple(block_table.shape)}: must have batch = {b} rows")
    _require(block_table.shape[1] >= 1, f"block_table.shape = {tuple(block_table.shape)}: needs >= 1 column")
    _require(cache_seqlens.shape[0] == b, f"cache_seqlens.shape = {tuple(cache_seqlens.shape)}: must be ({b},)")
    if softmax_scale is None:
        softmax_scale = d ** -0.5
    _require(isinstance(softmax_scale, (int, float)) and math.isfinite(softmax_scale) and softmax_scale > 0,
             f"softmax_scale = {softmax_scale!r}: must be a finite float > 0")
    return cache, float(softmax_scale)


def mla_decode_plan(q, cache_seqlens, head_dim_v):
    """The DecodePlan of one decode step whose queries have q's shape [batch, s_q, heads, d_c + d_r]
    (bf16; only the shape is read) over cache_seqlens (int32 [batch], read on the device): one
    kernel launch on torch's current stream, no host sync. Every layer's mla_decode_with_kvcache of
    the step with plan= then reads this schedule instead of launching its own scheduler (bit-equal
    to an unplanned call). The calls sharing it run in order on one stream, with q of this shape and
    head_dim_v (checked) and these cache_seqlens values (not checked: that needs a host sync);
    DecodePlan says more."""
    _check_tensor("q", q, torch.bfloat16, (4,))
    _check_tensor("cache_seqlens", cache_seqlens, torch.int32, (1,), q.device)
    b, s_q, h, d_r = check_query_shape(q, cache_seqlens, head_dim_v, HEAD_DIMS_V, ROPE_DIMS, "the BF16 decode")
    parts, ws_bytes = _Plan.get(q.device.index, b, s_q, h, head_dim_v, d_r)
    cache_seqlens = cache_seqlens.contiguous()
    plan = DecodePlan("bf16", q.device, (b, s_q, h, head_dim_v, d_r), parts, ws_bytes, cache_seqlens)
    stream, err = stream_and_err(q.device)
    # The scheduler reads only the lengths and writes the workspace; the host checks it shares with
    # the decode want every pointer non-null and sane paging sizes, so q's pointer stands in for the
    # cache, page table and outputs (never dereferenced) and the paging sizes are placeholders.
    unread = q.data_ptr()
    with torch.cuda.device(q.device):
        rc = _lib.decode.entry("mla_decode_capi_plan")(
            unread, unread, unread, cache_seqlens.data_ptr(), unread, unread, b, s_q, h, head_dim_v, d_r, 1, 64, 1,
            1.0, 0, parts, plan.workspace.data_ptr(), ws_bytes, stream, err, _lib.ERR_LEN)
    _lib.check(rc, err, "mla_decode_plan")
    return plan


def launch(q, cache, block_table, cache_seqlens, head_dim_v, softmax_scale, plan=None,
           what="mla_decode_with_kvcache call"):
    """One kernel call on validated inputs: q [b, s_q <= 2, h, d] (made contiguous), cache
    [num_pages, page, d] contiguous; with plan (a DecodePlan of mla_decode_plan, checked against q's
    shape; `what` names the call in its errors) the schedule is the plan's. Returns out
    [b, s_q, h, head_dim_v] bf16, lse [b, s_q, h] fp32."""
    q = q.contiguous()
    block_table = block_table.contiguous()
    cache_seqlens = cache_seqlens.contiguous()
    b, s_q, h, d = q.shape
    d_r = d - head_dim_v
    if plan is None:
        parts, ws_bytes = _Plan.get(q.device.index, b, s_q, h, head_dim_v, d_r)
        ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=q.device)
        run = _lib.decode.get().mla_decode_capi_run  # launches its own scheduler
    else:
        check_plan(plan, "bf16", what, q, head_dim_v, d_r)
        parts, ws_bytes, ws = plan.parts, plan.workspace_bytes, plan.workspace
        run = _lib.decode.entry("mla_decode_capi_run_planned")  # reads the plan's schedule
    out = torch.empty(b, s_q, h, head_dim_v, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(b, s_q, h, dtype=torch.float32, device=q.device)
    stream, err = stream_and_err(q.device)
    with torch.cuda.device(q.device):
        rc = run(q.data_ptr(), cache.data_ptr(), block_table.data_ptr(), cache_seqlens.data_ptr(), out.data_ptr(),
                 lse.data_ptr(), b, s_q, h, head_dim_v, d_r, cache.shape[0], cache.shape[1], block_table.shape[1],
                 softmax_scale, 0, parts, ws.data_ptr(), ws_bytes, stream, err, _lib.ERR_LEN)
    _lib.check(rc, err, "mla_decode_bf16")
    return out, lse


def mla_decode_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale=None, *, plan=None):
    """BF16 paged MLA decode with the kernel's own conventions.

    q:             [batch, s_q, heads, d_c + d_r] bf16, s_q 1 or 2 (2: the causal MTP rule), heads 1..128
    k_cache:       [num_pages, page, 1, d_c + d_r] (or [num_pages, page, d_c + d_r]) bf16, page 64 or 128,
                   contiguous; token j of a request = [x_j (d_c values) | k_pe_j (d_r values)]
    block_table:   [batch, max_pages] int32 page ids (entries past a request's pages are not read)
    cache_seqlens: [batch] int32 cache lengths L (they include the s_q new tokens)
    head_dim_v:    d_c: 32, 64, 128, 256 (a TPLA slice of 512 over 2 ranks), 512
    softmax_scale: default 1 / sqrt(d_c + d_r); for a converted TPLA rank pass the model's scale
    plan:          a DecodePlan of this step (mla_decode_plan): the call then launches no scheduler,
                   and gives the same bits. Its q shape and head_dim_v must be this call's (checked:
                   UnsupportedArgument naming the field), its cache_seqlens values too (not
                   checked), and the calls sharing it run in order on one stream. Without it every
                   call schedules itself.
    Returns out [batch, s_q, heads, d_c] bf16 and lse [batch, s_q, heads] fp32 (natural log, -inf
    for a row that sees no key, whose output is 0).
    """
    cache, scale = check_common(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale)
    _require(q.shape[1] in (1, 2), f"q.shape[1] (s_q) = {q.shape[1]}: supported 1, 2 (flash_mla_with_kvcache "
             f"takes more)")
    return launch(q, cache, block_table, cache_seqlens, head_dim_v, scale, plan)
