#!/usr/bin/env python3
"""Writes the malformed safetensors corpus and its manifest (manifest.tsv).

Every file breaks exactly one rule of the format (see docs/formats/safetensors.md) and is
listed in manifest.tsv with the SafetensorsError::Kind our reader must report; files with
kind OK are valid positive controls. The files are built byte by byte here (not with the
safetensors package) so the defects are exact. Re-running gives identical bytes.

    python3 datasets/malformed/generate.py [out_dir]   # default: this script's folder
"""
import json
import os
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def prefix(n):
    return struct.pack("<Q", n)


def st(header, data=b"", raw=None):
    """A file from a header (dict -> compact JSON, or raw str/bytes) and a data buffer."""
    if raw is None:
        raw = json.dumps(header, separators=(",", ":"))
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    return prefix(len(raw)) + raw + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


CASES = []


def case(name, kind, content, what):
    CASES.append((name, kind, content, what))


# --- positive controls ---
case("valid_two_tensors.safetensors", "OK",
     st({"__metadata__": {"format": "pt"}, "a": t("F32", [2, 2], 0, 16), "b": t("BF16", [3], 16, 22)}, bytes(range(22))),
     "two tensors and string metadata")
case("valid_empty.safetensors", "OK", st({}), "no tensors at all")
case("valid_f4_and_zero_size.safetensors", "OK",
     st({"p": t("F4", [2, 3], 0, 3), "z": t("I64", [0, 5], 3, 3), "e": t("F8_E8M0", [1], 3, 4)}, b"\x12\x34\x56\x7f"),
     "packed F4, a zero-element tensor, an E8M0 scale")

# --- length prefix / framing ---
case("empty.safetensors", "TooSmall", b"", "zero bytes")
case("truncated_prefix.safetensors", "TooSmall", b"\x10\x00\x00\x00\x00", "5 bytes, shorter than the u64 prefix")
case("header_past_eof.safetensors", "HeaderPastEof", prefix(1000) + b'{"a":1}', "N = 1000 but only 7 bytes follow")
case("header_too_large.safetensors", "HeaderTooLarge", prefix(100_000_001) + b"{}", "N = 100,000,001 (limit 100,000,000)")
case("header_len_u64_max.safetensors", "HeaderTooLarge", prefix(2**64 - 1) + b"{}", "N = 2^64-1 (8 + N would overflow)")
good = st({"w": t("F32", [4], 0, 16)}, bytes(16))
case("truncated_data.safetensors", "BufferSizeMismatch", good[:-3], "valid header, data cut 3 bytes short")
case("trailing_bytes.safetensors", "BufferSizeMismatch", good + b"\x00" * 4, "4 bytes after the last tensor")

# --- text / JSON ---
case("not_json.safetensors", "InvalidJson", st(None, raw="{hello world}"), "header is not JSON")
case("trailing_garbage.safetensors", "InvalidJson", st(None, raw="{} trailing"), "text after the JSON object")
case("number_out_of_range.safetensors", "InvalidJson",
     st(None, raw='{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1e400]}}', data=b"\x00"),
     "1e400 overflows a double (fuzzer crash 1, see docs/fuzzing.md)")
case("nul_in_header.safetensors", "InvalidJson", st(None, raw=b"{\x00}"), "a NUL byte inside the object")
case("header_array.safetensors", "NotAnObject", st(None, raw="[1, 2]"), "header is a JSON array")
case("header_leading_space.safetensors", "OK", st(None, raw=" \n{}"),
     "whitespace before the object: valid JSON, accepted by the reference too")
case("empty_header.safetensors", "InvalidJson", st(None, raw=""), "N = 0: no JSON at all")
case("invalid_utf8.safetensors", "InvalidUtf8", st(None, raw=b'{"a\xff":{}}'), "0xFF byte in a tensor name")
case("overlong_utf8.safetensors", "InvalidUtf8", st(None, raw=b'{"a\xc0\xaf":{}}'), "overlong encoding of '/'")
case("surrogate_utf8.safetensors", "InvalidUtf8", st(None, raw=b'{"a\xed\xa0\x80":{}}'), "UTF-8-encoded surrogate U+D800")
case("duplicate_names.safetensors", "DuplicateName",
     st(None, raw='{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                  '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', data=b"\x01\x02"),
     "tensor 'a' twice")
case("duplicate_field.safetensors", "DuplicateName",
     st(None, raw='{"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}', data=b"\x01"),
     "field 'dtype' twice inside one entry")

# --- offsets ---
case("overlapping_offsets.safetensors", "NotContiguous",
     st({"a": t("U8", [4], 0, 4), "b": t("U8", [4], 2, 6)}, bytes(6)), "b starts inside a")
case("hole_in_offsets.safetensors", "NotContiguous",
     st({"a": t("U8", [4], 0, 4), "b": t("U8", [4], 6, 10)}, bytes(10)), "2 unused bytes between a and b")
case("offsets_not_from_zero.safetensors", "NotContiguous", st({"a": t("U8", [4], 2, 6)}, bytes(6)),
     "first tensor starts at 2")
case("offsets_reversed.safetensors", "BadOffsets", st({"a": t("U8", [0], 4, 0)}, bytes(4)), "begin 4 > end 0")
case("offsets_one_value.safetensors", "BadOffsets",
     st(None, raw='{"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}}', data=b"\x00"), "data_offsets has one value")
case("offsets_negative.safetensors", "BadOffsets",
     st(None, raw='{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}', data=b"\x00"), "negative begin")
case("missing_offsets.safetensors", "MissingField",
     st(None, raw='{"a":{"dtype":"U8","shape":[1]}}', data=b"\x00"), "no data_offsets field")

# --- dtype / shape / size ---
case("size_mismatch.safetensors", "SizeMismatch", st({"a": t("BF16", [3, 2], 0, 10)}, bytes(10)),
     "BF16 [3, 2] needs 12 bytes, offsets give 10")
case("f4_odd_numel.safetensors", "SizeMismatch", st({"a": t("F4", [3], 0, 2)}, bytes(2)),
     "F4 [3] is 12 bits, not whole bytes")
case("unknown_dtype.safetensors", "BadDtype", st({"a": t("F128", [1], 0, 16)}, bytes(16)), "dtype F128")
case("lowercase_dtype.safetensors", "BadDtype", st({"a": t("bf16", [1], 0, 2)}, bytes(2)), "dtype bf16 (case matters)")
case("dtype_not_string.safetensors", "BadDtype",
     st(None, raw='{"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}}', data=b"\x00"), "dtype is a number")
case("missing_dtype.safetensors", "MissingField",
     st(None, raw='{"a":{"shape":[1],"data_offsets":[0,1]}}', data=b"\x00"), "no dtype field")
case("negative_dim.safetensors", "BadShape", st({"a": t("U8", [-1, 4], 0, 4)}, bytes(4)), "shape [-1, 4]")
case("float_dim.safetensors", "BadShape",
     st(None, raw='{"a":{"dtype":"U8","shape":[2.5],"data_offsets":[0,2]}}', data=b"\x00\x00"), "shape [2.5]")
case("shape_not_array.safetensors", "BadShape", st({"a": t("U8", 4, 0, 4)}, bytes(4)), "shape is the number 4")
case("dims_overflow.safetensors", "Overflow", st({"a": t("U8", [2**32, 2**32, 2], 0, 0)}),
     "numel 2^65 overflows u64")
case("bits_overflow.safetensors", "Overflow", st({"a": t("F64", [2**62], 0, 0)}),
     "numel fits but 2^62 x 64 bits overflows")
case("dim_above_u64.safetensors", "Overflow",
     st(None, raw='{"a":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,0]}}'),
     "a dimension above 2^64")
case("dim_above_i64.safetensors", "Overflow", st({"a": t("U8", [2**63, 0], 0, 0)}),
     "dimension 2^63 does not fit int64 (numel is 0)")
case("entry_not_object.safetensors", "MissingField", st({"a": [1, 2, 3]}), "tensor entry is an array")

# --- metadata ---
case("metadata_not_string.safetensors", "BadMetadata", st({"__metadata__": {"step": 5}}), "metadata value 5")
case("metadata_not_object.safetensors", "BadMetadata", st({"__metadata__": "hello"}), "__metadata__ is a string")


def main():
    os.makedirs(OUT, exist_ok=True)
    names = [c[0] for c in CASES]
    assert len(names) == len(set(names)), "duplicate case name"
    lines = ["# file\texpected_kind\twhat is wrong (generated by generate.py; do not edit)"]
    for name, kind, content, what in CASES:
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(content)
        lines.append(f"{name}\t{kind}\t{what}")
    with open(os.path.join(OUT, "manifest.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(CASES)} files to {OUT}")


if __name__ == "__main__":
    main()
