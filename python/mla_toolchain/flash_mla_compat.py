"""FlashMLA's dense-decoding interface (deepseek-ai/FlashMLA flash_mla_interface.py) on our kernel.

Same names, argument order, shapes, dtypes and return values for what the two share: BF16 paged
cache [num_blocks, page_block_size, 1, head_dim] with page 64 or 128, one latent KV head,
head_dim_v = d_c (FlashMLA: 512; here also the TPLA slice widths), causal or not, LSE in natural
log returned as [batch, num_heads_q, s_q] with +inf for a row that sees no key (FlashMLA's value).

How FlashMLA's cases map onto the kernel (which runs s_q 1 or 2 with the causal MTP rule):
  * s_q = 1, or s_q = 2 and causal: one kernel call as it is.
  * not causal and s_q * heads <= 128: the s_q query tokens become heads of one token (same
    memory layout, one call, the cache read once).
  * otherwise (s_q > 2, or not causal with s_q * heads > 128): each query token becomes its own
    request of one token over the same pages, with its causal length L - (s_q - 1 - t) (or L):
    one call, the cache read s_q times, so slower than a native kernel would be.
The FlashMLASchedMeta of get_mla_metadata() holds the step's split schedule, as FlashMLA's holds its
tile-scheduler metadata: the first call with a fresh one makes it (a DecodePlan of the shape the
call launches: one scheduler launch), and every later call with that meta (the other layers of the
decode step) reads it and launches no scheduler. So, as in FlashMLA, the calls sharing a meta must
have the same cache_seqlens values (not checked: that needs a host sync) and run in order on one
stream; take a fresh meta for each decode step (in a CUDA graph: inside the captured step, so the
schedule is captured too and follows the lengths written before each replay).
Unsupported arguments (FP8 cache, sparse indices, attention sink, extra cache, fp16, several KV
heads) raise UnsupportedArgument naming the argument and its value.
"""
import dataclasses
from typing import Optional, Tuple

import torch

from . import decode
from .decode import UnsupportedArgument, _require


@dataclasses.dataclass
class FlashMLASchedMeta:
    """What get_mla_metadata returns: one decode step's scheduling state. The first
    flash_mla_with_kvcache call with it records its configuration and makes the step's split-KV
    schedule on the device (a DecodePlan, kept in _plan); later calls must match the configuration,
    as in FlashMLA, and their cache_seqlens values must be the first call's (not checked), since
    they read that schedule instead of launching a scheduler."""

    @dataclasses.dataclass
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]
        extra_page_block_size: Optional[int]
        extra_topk: Optional[int]

    have_initialized: bool = False
    config: Optional[Config] = None
    tile_scheduler_metadata: Optional[torch.Tensor] = None  # unused here (kept for code that reads it)
    num_splits: Optional[torch.Tensor] = None
    # Ours: the schedule the first call made (mla_decode_plan, for the shape it launched).
    _plan: Optional[decode.DecodePlan] = dataclasses.field(default=None, repr=False, compare=False)


def get_mla_metadata(*args, **kwargs) -> Tuple[FlashMLASchedMeta, None]:
    """(FlashMLASchedMeta(), None), as FlashMLA; arguments of the old interface are ignored."""
    return FlashMLASchedMeta(), None


def _check_none(**named):
    for name, value in named.items():
        _require(value is None, f"{name} = {type(value).__name__}: not supported (dense BF16 decode only; "
                 f"FlashMLA's sparse / sink / extra-cache features are not in this package)")


def _record_or_check(meta, config):
    if not meta.have_initialized:
        meta.have_initialized = True
        meta.config = config
        return
    for field in dataclasses.fields(config):
        was, now = getattr(meta.config, field.name), getattr(config, field.name)
        if was != now:
            raise ValueError(f"tile_scheduler_metadata.config.{field.name} = {was!r} but this call has {now!r}: a "
                             f"FlashMLASchedMeta may be reused only across calls of the same configuration")


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: Optional[torch.Tensor],
    cache_seqlens: Optional[torch.Tensor],
    head_dim_v: int,
    tile_scheduler_metadata: FlashMLASchedMeta,
    num_splits: None = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = False,
    indices: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices_in_kvcache: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's flash_mla_with_kvcache (dense BF16 decode).

    q [batch, s_q, num_heads_q, head_dim] bf16; k_cache [num_blocks, page_block_size, 1, head_dim]
    bf16; block_table [batch, max_num_blocks_per_seq] int32; cache_seqlens [batch] int32;
    head_dim_v = d_c. Returns out [batch, s_q, num_heads_q, head_dim_v] bf16 and softmax_lse
    [batch, num_heads_q, s_q] fp32 (natural log; +inf where a row sees no key).
    The first call with a fresh tile_scheduler_metadata also computes the split schedule into it;
    later calls with it reuse that schedule, so they must see the same cache_seqlens values
    (FlashMLA's rule: one meta per decode step, shared by its layers).
    """
    _require(isinstance(tile_scheduler_metadata, FlashMLASchedMeta),
             f"tile_scheduler_metadata = {type(tile_scheduler_metadata).__name__}: must be the FlashMLASchedMeta "
             f"that get_mla_metadata() returns")
    _require(num_splits is None, f"num_splits = {type(num_splits).__name__}: must be None")
    _require(is_fp8_kvcache is False, f"is_fp8_kvcache = {is_fp8_kvcache!r}: only BF16 caches are supported (FlashMLA's "
             f"FP8 layout is not ours; our FP8 / 4-bit caches: fp8_decode_with_kvcache etc., docs/python.md)")
    _check_none(indices=indices, attn_sink=attn_sink, extra_k_cache=extra_k_cache,
                extra_indices_in_kvcache=extra_indices_in_kvcache, topk_length=topk_length,
                extra_topk_length=extra_topk_length)
    _require(block_table is not None, "block_table = None: required for dense decode")
    _require(cache_seqlens is not None, "cache_seqlens = None: required for dense decode")
    _require(isinstance(causal, bool), f"causal = {causal!r}: must be a bool")
    cache, scale = decode.check_common(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale)
    b, s_q, h, d = q.shape
    _require(s_q >= 1, f"q.shape[1] (s_q) = {s_q}: must be >= 1")
    _record_or_check(tile_scheduler_metadata, FlashMLASchedMeta.Config(
        b, s_q, h, k_cache.shape[1], k_cache.shape[2] if k_cache.dim() == 4 else 1, causal, False, None, None, None))

    # Each case is one kernel call of a derived shape: q_run [b', s_q' <= 2, h', d] over the pages
    # `table` with the lengths `lens`.
    if s_q == 1 or (s_q == 2 and causal):
        q_run, table, lens = q, block_table, cache_seqlens
    elif not causal and s_q * h <= decode.MAX_HEADS:
        # Every query token sees all L keys: the tokens are heads of one query token.
        q_run, table, lens = q.reshape(b, 1, s_q * h, d), block_table, cache_seqlens
    else:
        # One request per query token, over the same pages; token t of s_q sees L - (s_q - 1 - t)
        # keys when causal (at least 0), all L otherwise.
        lens = cache_seqlens.unsqueeze(1).expand(b, s_q)
        if causal:
            back = torch.arange(s_q - 1, -1, -1, dtype=torch.int32, device=q.device)
            lens = (lens - back).clamp_(min=0)
        table = block_table.unsqueeze(1).expand(b, s_q, block_table.shape[1]).reshape(b * s_q, -1)
        q_run, lens = q.reshape(b * s_q, 1, h, d), lens.reshape(b * s_q)
    meta = tile_scheduler_metadata
    if meta._plan is None:
        # The step's first call: the schedule of the launched shape and lengths (the derived ones),
        # which the later calls of the step derive alike from the same configuration and lengths.
        meta._plan = decode.mla_decode_plan(q_run, lens, head_dim_v)
    out, lse = decode.launch(q_run, cache, table, lens, head_dim_v, scale, meta._plan,
                             "flash_mla_with_kvcache call (tile_scheduler_metadata's plan; shapes as launched)")
    out = out.view(b, s_q, h, head_dim_v)
    lse = lse.view(b, s_q, h).transpose(1, 2).contiguous()
    lse.masked_fill_(lse == float("-inf"), float("inf"))
    return out, lse
