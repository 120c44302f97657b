"""A stand-in for FlashMLA's `flash_mla` module, re-exporting mla_toolchain's compatible functions.

Put python/compat first on PYTHONPATH to run code written for FlashMLA (FlashMLA's own
tests/test_flash_mla_dense_decoding.py among it) on our kernels. Only the dense decode is here;
FlashMLA's prefill and sparse functions are absent, so code that needs them fails at import.
"""
from mla_toolchain import FlashMLASchedMeta, flash_mla_with_kvcache, get_mla_metadata

__all__ = ["FlashMLASchedMeta", "flash_mla_with_kvcache", "get_mla_metadata"]
