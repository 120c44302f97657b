#!/usr/bin/env python3
"""Cross-check of our safetensors reader/writer against the reference Python package.

  1. ours -> theirs: st_interop writes one tensor per dtype; safetensors.deserialize (the
     Rust reference, with its own validation) must accept it and return the same dtype,
     shape, bytes and metadata.
  2. theirs -> ours: safetensors.serialize writes every dtype it knows (plus numpy's
     save_file for the numpy dtypes); st_interop dump must return the same.
  3. ours == theirs byte for byte in the data buffer for the same tensors (both order by
     dtype then name); the header text may differ (key order).
  4. The reference's verdict on datasets/malformed: it must reject every file our manifest
     marks malformed and accept every OK one, except the documented places where we are
     stricter (STRICTER_THAN_REFERENCE). This keeps the corpus honest: each file is
     malformed by the reference's rules, not only by ours.

usage: interop.py <path to st_interop> <scratch dir>
"""
import json
import os
import subprocess
import sys

import numpy as np
import safetensors
import safetensors.numpy
from safetensors import TensorSpec, deserialize, serialize

DTYPES = ["BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F8_E4M3", "F8_E5M2",
          "F8_E8M0", "F4", "F16", "BF16", "F32", "F64"]
BITS = {"BOOL": 8, "U8": 8, "I8": 8, "U16": 16, "I16": 16, "U32": 32, "I32": 32, "U64": 64, "I64": 64,
        "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F4": 4, "F16": 16, "BF16": 16, "F32": 32, "F64": 64}
# The Python package's names for our dtypes.
PY_NAME = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16", "U32": "uint32",
           "I32": "int32", "U64": "uint64", "I64": "int64", "F8_E4M3": "float8_e4m3fn",
           "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "F4": "float4_e2m1fn_x2",
           "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}
SHAPE = [3, 4]
METADATA = {"producer": "st_interop", "note": "caf\u00e9"}
MALFORMED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "datasets", "malformed")
# Files the reference accepts and we reject on purpose (docs/formats/safetensors.md).
STRICTER_THAN_REFERENCE = {"dim_above_i64.safetensors"}  # our Shape is int64


def expected_bytes(dtype, k):
    """Same pattern as st_interop.cpp's pattern()."""
    n = 12 * BITS[dtype] // 8
    if dtype == "BOOL":
        return bytes((i + k) % 2 for i in range(n))
    return bytes((i * 37 + k * 11 + 5) & 0xFF for i in range(n))


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def ours_to_theirs(tool, scratch):
    path = os.path.join(scratch, "ours.safetensors")
    subprocess.run([tool, "write", path], check=True)
    with open(path, "rb") as f:
        raw = f.read()
    got = dict(deserialize(raw))  # raises on anything the reference rejects
    check(set(got) == {"t_" + d for d in DTYPES}, f"tensor names {sorted(got)}")
    for k, d in enumerate(DTYPES):
        t = got.get("t_" + d)
        if t is None:
            continue
        check(t["dtype"] == d, f"{d}: dtype {t['dtype']}")
        check(list(t["shape"]) == SHAPE, f"{d}: shape {t['shape']}")
        check(bytes(t["data"]) == expected_bytes(d, k), f"{d}: bytes differ")
    with safetensors.safe_open(path, framework="numpy") as f:
        check(f.metadata() == METADATA, f"metadata {f.metadata()}")
        # numpy-typed reads through the package's own loader
        check(np.array_equal(f.get_tensor("t_I32"), np.frombuffer(expected_bytes("I32", 6), "<i4").reshape(SHAPE)),
              "I32 via safe_open.get_tensor")
    return raw


def theirs_bytes():
    """The same tensors as st_interop write, serialised by the reference package."""
    buffers = [np.frombuffer(expected_bytes(d, k), dtype=np.uint8).copy() for k, d in enumerate(DTYPES)]
    specs = {}
    for k, d in enumerate(DTYPES):
        # F4 storage shape: two values per byte in the last dimension (the package doubles it).
        shape = [3, 2] if d == "F4" else SHAPE
        specs["t_" + d] = TensorSpec(dtype=PY_NAME[d], shape=shape, data_ptr=buffers[k].ctypes.data,
                                     data_len=buffers[k].nbytes)
    return bytes(serialize(specs, metadata=METADATA))


def dump(tool, path):
    out = subprocess.run([tool, "dump", path], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def theirs_to_ours(tool, scratch):
    raw = theirs_bytes()
    path = os.path.join(scratch, "theirs.safetensors")
    with open(path, "wb") as f:
        f.write(raw)
    got = dump(tool, path)
    check(got["metadata"] == METADATA, f"metadata read by us: {got['metadata']}")
    for k, d in enumerate(DTYPES):
        t = got["tensors"].get("t_" + d)
        check(t is not None, f"{d}: missing when read by us")
        if t is None:
            continue
        check(t["dtype"] == d and t["shape"] == SHAPE, f"{d}: read as {t['dtype']} {t['shape']}")
        check(bytes.fromhex(t["hex"]) == expected_bytes(d, k), f"{d}: bytes read by us differ")

    # numpy arrays through the package's high-level writer (non-contiguous sizes, 1-D, 0-d)
    rng = np.random.default_rng(7)
    arrays = {"f32": rng.standard_normal((5, 3)).astype(np.float32), "i64": np.arange(7, dtype=np.int64),
              "f16": rng.standard_normal((2, 2, 2)).astype(np.float16), "u8": np.array(9, dtype=np.uint8),
              "b": np.array([True, False, True])}
    path2 = os.path.join(scratch, "numpy.safetensors")
    safetensors.numpy.save_file(arrays, path2)
    got = dump(tool, path2)
    for name, a in arrays.items():
        t = got["tensors"][name]
        check(t["shape"] == list(a.shape), f"numpy {name}: shape {t['shape']} vs {list(a.shape)}")
        check(bytes.fromhex(t["hex"]) == a.tobytes(), f"numpy {name}: bytes differ")
    return raw


def reference_verdicts():
    n = 0
    with open(os.path.join(MALFORMED, "manifest.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip() and not line.startswith("#")]
    for name, kind, _ in rows:
        with open(os.path.join(MALFORMED, name), "rb") as f:
            data = f.read()
        try:
            deserialize(data)
            accepted, why = True, ""
        except Exception as e:  # the package raises SafetensorError (and others) on bad input
            accepted, why = False, str(e)
        want_accept = kind == "OK" or name in STRICTER_THAN_REFERENCE
        check(accepted == want_accept,
              f"reference {'accepts' if accepted else 'rejects'} {name} (manifest: {kind}) {why}")
        n += 1
    print(f"reference verdicts agree with the manifest on {n} files "
          f"({len(STRICTER_THAN_REFERENCE)} where we are stricter)")


def main():
    tool, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    ours = ours_to_theirs(tool, scratch)
    theirs = theirs_to_ours(tool, scratch)
    # Header JSON text may legitimately differ (key order, padding); the data layout must not.
    n_ours = int.from_bytes(ours[:8], "little")
    n_theirs = int.from_bytes(theirs[:8], "little")
    check(ours[8 + n_ours:] == theirs[8 + n_theirs:], "data buffers differ: tensor order is not the reference's")
    reference_verdicts()
    print(f"safetensors {safetensors.__version__}: identical files: {ours == theirs} "
          f"(header {n_ours} vs {n_theirs} bytes)")
    if failures:
        print(f"{len(failures)} interop check(s) failed")
        return 1
    print("interop OK: both directions, every dtype")
    return 0


if __name__ == "__main__":
    sys.exit(main())
