"""PyTorch entry points to the toolchain's CUDA decode kernels (docs/python.md).

FlashMLA-compatible:  get_mla_metadata, flash_mla_with_kvcache (dense BF16 decode).
Our own:              mla_decode_with_kvcache (the kernel's conventions; any supported d_c, so a
                      converted TPLA rank's slice of 128 or 256 latent dimensions).
Needs only torch at run time; the kernels come from libmla_decode_capi.so (built by CMake).
"""
from .decode import UnsupportedArgument, decode_parts, mla_decode_with_kvcache
from .flash_mla_compat import FlashMLASchedMeta, flash_mla_with_kvcache, get_mla_metadata

__all__ = ["FlashMLASchedMeta", "UnsupportedArgument", "decode_parts", "flash_mla_with_kvcache", "get_mla_metadata",
           "mla_decode_with_kvcache"]
