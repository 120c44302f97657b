"""PyTorch entry points to the toolchain's CUDA decode kernels (docs/python.md).

FlashMLA-compatible:  get_mla_metadata, flash_mla_with_kvcache (dense BF16 decode).
Our own:              mla_decode_with_kvcache (the kernel's conventions; any supported d_c, so a
                      converted TPLA rank's slice of 128 or 256 latent dimensions); mla_decode_plan /
                      DecodePlan (one split schedule per decode step, as get_mla_metadata; plan=).
Quantised caches:     kv_quant (FP8, FP4, codebook): alloc_kv_cache, kv_cache_bytes_per_token,
                      {fp8,fp4,codebook}_append_kvcache, {fp8,fp4,codebook}_decode_with_kvcache
                      (FP4: route="bf16" | "fp8"), kv_decode_parts; fp8_decode_plan (a DecodePlan
                      for the FP8 kernels).
Needs only torch at run time; the kernels come from libmla_decode_capi.so, libmla_fp8_capi.so and
libmla_kv4_capi.so (built by CMake).
"""
from .decode import DecodePlan, UnsupportedArgument, decode_parts, mla_decode_plan, mla_decode_with_kvcache
from .flash_mla_compat import FlashMLASchedMeta, flash_mla_with_kvcache, get_mla_metadata
from .kv_quant import (KV_FORMATS, alloc_kv_cache, codebook_append_kvcache, codebook_decode_with_kvcache,
                       fp4_append_kvcache, fp4_decode_with_kvcache, fp8_append_kvcache, fp8_decode_plan,
                       fp8_decode_with_kvcache, kv_cache_bytes_per_token, kv_decode_parts)

__all__ = ["DecodePlan", "FlashMLASchedMeta", "KV_FORMATS", "UnsupportedArgument", "alloc_kv_cache", "codebook_append_kvcache",
           "codebook_decode_with_kvcache", "decode_parts", "flash_mla_with_kvcache", "fp4_append_kvcache",
           "fp4_decode_with_kvcache", "fp8_append_kvcache", "fp8_decode_plan", "fp8_decode_with_kvcache", "get_mla_metadata",
           "kv_cache_bytes_per_token", "kv_decode_parts", "mla_decode_plan", "mla_decode_with_kvcache"]
