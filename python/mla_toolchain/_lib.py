"""The shared libraries behind the package, loaded through ctypes.

Each library exposes C entry points to launchers of kernels/ (tools/mla-bench/*_capi.cpp), with
the CPU twins the device checks compare against: libmla_decode_capi (BF16 decode), libmla_fp8_capi
(FP8 cache), libmla_kv4_capi (FP4 and codebook caches). A library is looked up in
MLA_TOOLCHAIN_LIB_DIR when that is set, else next to this file (where the CMake target
mla_toolchain_python stages it), and loaded on first use. Other kernels' entry points are added as
another `_Library` with its own binder.
"""
import ctypes
import os
import pathlib
import threading

_I, _F, _P, _S = ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_size_t


def library_dir():
    env = os.environ.get("MLA_TOOLCHAIN_LIB_DIR")
    return pathlib.Path(env) if env else pathlib.Path(__file__).resolve().parent


class _Library:
    def __init__(self, file_name, bind):
        self.file_name, self._bind, self._cdll = file_name, bind, None
        self._lock = threading.Lock()

    def get(self):
        with self._lock:
            if self._cdll is None:
                path = library_dir() / self.file_name
                if not path.is_file():
                    raise ImportError(
                        f"mla_toolchain: {path} not found. Build it with CMake (-DMLA_ENABLE_CUDA=ON, target "
                        f"mla_toolchain_python, which stages it in <build>/python/mla_toolchain), or set "
                        f"MLA_TOOLCHAIN_LIB_DIR to the folder that holds {self.file_name}")
                cdll = ctypes.CDLL(str(path))
                self._bind(cdll)
                self._cdll = cdll
            return self._cdll

    def entry(self, name):
        """The library's function `name`, for an entry point newer than the library's first ones: a
        library built before it was added fails here, with what to do, rather than when loaded (so
        the calls that do not need it still run)."""
        cdll = self.get()
        if not hasattr(cdll, name):
            raise RuntimeError(f"mla_toolchain: {library_dir() / self.file_name} has no {name} (it was built before "
                               f"that entry point was added): rebuild it (CMake target mla_toolchain_python, or "
                               f"{pathlib.Path(self.file_name).stem[3:]})")
        return getattr(cdll, name)


def _bind_decode(lib):
    # int mla_decode_capi_parts(batch, s_q, heads, d_c, d_r, variant, size_t* workspace_bytes)
    lib.mla_decode_capi_parts.restype = _I
    lib.mla_decode_capi_parts.argtypes = [_I] * 6 + [ctypes.POINTER(_S)]
    # int mla_decode_capi_run(q, kv_cache, page_table, seqlens, out, lse, batch, s_q, heads, d_c, d_r,
    #     num_pages, page_size, max_pages, scale, variant, num_parts, workspace, workspace_bytes, stream,
    #     err, err_len)
    lib.mla_decode_capi_run.restype = _I
    lib.mla_decode_capi_run.argtypes = ([_P] * 6 + [_I] * 8 + [_F, _I, _I, _P, _S, _P, ctypes.c_char_p, _S])
    # int mla_decode_capi_twin(same as run without workspace and stream): the CPU twin on host buffers
    lib.mla_decode_capi_twin.restype = _I
    lib.mla_decode_capi_twin.argtypes = ([_P] * 6 + [_I] * 8 + [_F, _I, _I, ctypes.c_char_p, _S])
    # int mla_decode_capi_plan(run's arguments): the split schedule alone, into the workspace (one launch);
    # int mla_decode_capi_run_planned(run's arguments): the decode reading that schedule (no scheduler).
    # Bound where present: a library older than them still serves unplanned calls (entry() says why not).
    for name in ("mla_decode_capi_plan", "mla_decode_capi_run_planned"):
        if hasattr(lib, name):
            getattr(lib, name).restype = _I
            getattr(lib, name).argtypes = lib.mla_decode_capi_run.argtypes


# The BF16 decode launcher (kernels/mla_decode.hpp) and its CPU twin.
decode = _Library("libmla_decode_capi.so", _bind_decode)

_ERR = [ctypes.c_char_p, _S]


def _bind_fp8(lib):
    # int mla_fp8_capi_append(kv_new, positions, page_table, cache, batch, n_new, d_c, d_r, max_pages, num_pages,
    #     page_size, stream, err, err_len)
    lib.mla_fp8_capi_append.restype = _I
    lib.mla_fp8_capi_append.argtypes = [_P] * 4 + [_I] * 7 + [_P] + _ERR
    # int mla_fp8_capi_parts(batch, s_q, heads, d_c, d_r, size_t* workspace_bytes)
    lib.mla_fp8_capi_parts.restype = _I
    lib.mla_fp8_capi_parts.argtypes = [_I] * 5 + [ctypes.POINTER(_S)]
    # int mla_fp8_capi_run(q, cache, page_table, seqlens, out, lse, batch, s_q, heads, d_c, d_r, num_pages, page_size,
    #     max_pages, scale, num_parts, workspace, workspace_bytes, mode, stream, err, err_len)
    lib.mla_fp8_capi_run.restype = _I
    lib.mla_fp8_capi_run.argtypes = [_P] * 6 + [_I] * 8 + [_F, _I, _P, _S, _I, _P] + _ERR
    # Twins on host buffers: the append (run's append arguments less the stream), the decode (run's less
    # workspace, mode and stream; the query quantised by the twin).
    lib.mla_fp8_capi_append_twin.restype = _I
    lib.mla_fp8_capi_append_twin.argtypes = [_P] * 4 + [_I] * 7 + _ERR
    lib.mla_fp8_capi_twin.restype = _I
    lib.mla_fp8_capi_twin.argtypes = [_P] * 6 + [_I] * 8 + [_F, _I] + _ERR


def _bind_kv4(lib):
    # int mla_kv4_capi_parts(route, batch, s_q, heads, d_c, d_r, size_t* workspace_bytes)
    lib.mla_kv4_capi_parts.restype = _I
    lib.mla_kv4_capi_parts.argtypes = [_I] * 6 + [ctypes.POINTER(_S)]
    # int mla_kv4_capi_run(route, format, levels, q, cache, page_table, seqlens, out, lse, batch, s_q, heads, d_c,
    #     d_r, num_pages, page_size, max_pages, scale, num_parts, workspace, workspace_bytes, mode, stream, err,
    #     err_len)
    lib.mla_kv4_capi_run.restype = _I
    lib.mla_kv4_capi_run.argtypes = [_I, _I] + [_P] * 7 + [_I] * 8 + [_F, _I, _P, _S, _I, _P] + _ERR
    # int mla_kv4_capi_append(format, c, levels, kv_new, positions, page_table, cache, batch, n_new, d_c, d_r,
    #     max_pages, num_pages, page_size, stream, err, err_len); _twin: the same less the stream
    lib.mla_kv4_capi_append.restype = _I
    lib.mla_kv4_capi_append.argtypes = [_I, _F] + [_P] * 5 + [_I] * 7 + [_P] + _ERR
    lib.mla_kv4_capi_append_twin.restype = _I
    lib.mla_kv4_capi_append_twin.argtypes = [_I, _F] + [_P] * 5 + [_I] * 7 + _ERR
    # int mla_kv4_capi_to_bf16_twin(format, levels, cache, num_pages, page_size, d_c, d_r, bf16_cache, err, err_len)
    lib.mla_kv4_capi_to_bf16_twin.restype = _I
    lib.mla_kv4_capi_to_bf16_twin.argtypes = [_I, _P, _P] + [_I] * 4 + [_P] + _ERR
    # int mla_kv4_capi_fp4_to_fp8_twin(cache, num_pages, page_size, d_c, d_r, fp8_cache, err, err_len)
    lib.mla_kv4_capi_fp4_to_fp8_twin.restype = _I
    lib.mla_kv4_capi_fp4_to_fp8_twin.argtypes = [_P] + [_I] * 4 + [_P] + _ERR


# The FP8 cache's append and decode launchers (kernels/fp8_append.hpp, kernels/fp8_decode.hpp) and twins.
fp8 = _Library("libmla_fp8_capi.so", _bind_fp8)
# The 4-bit caches' append and decode launchers (kernels/kv4_append.hpp, kernels/kv4_decode.hpp, the FP8
# route of kernels/fp8_decode.hpp) and twins.
kv4 = _Library("libmla_kv4_capi.so", _bind_kv4)

ERR_LEN = 2048


def check(rc, err, what):
    """Raises the C++ error's message (a bad shape names the field) when rc != 0."""
    if rc != 0:
        raise RuntimeError(f"{what}: {err.value.decode(errors='replace')}")
