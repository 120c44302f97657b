"""Compares our scalar dtype codecs (via dtype_dump) with ml_dtypes, exhaustively for decode
and on 200k random + edge-case float32 values for encode (round to nearest even).

Deliberate differences, checked explicitly rather than skipped:
  - E4M3 and E2M1 encoders SATURATE (like cvt.rn.satfinite on the GPU); ml_dtypes gives NaN
    (E4M3) above the range, so values beyond the max finite are compared to +-max.
"""
import subprocess
import sys

import ml_dtypes
import numpy as np
import warnings
warnings.filterwarnings("ignore", category=RuntimeWarning)


def main(dumper):
    rng = np.random.default_rng(7)
    probes = np.concatenate([
        rng.standard_normal(100000).astype(np.float32) * np.float32(3.0),
        (rng.standard_normal(50000) * 1e-3).astype(np.float32),
        (rng.standard_normal(50000) * 300).astype(np.float32),
        np.array([0.0, -0.0, 0.25, 0.75, 1.25, 2.5, 5.0, 448.0, 464.0, 480.0, 1e6, 6.0, 7.0, 65504.0, 65520.0,
                  1e-8, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11], dtype=np.float32),
    ]).astype(np.float32)
    inp = "\n".join("%08x" % b for b in probes.view(np.uint32)) + "\n"
    out = subprocess.run([dumper], input=inp, capture_output=True, text=True, check=True).stdout.splitlines()

    bad = 0

    def report(msg):
        nonlocal bad
        bad += 1
        if bad <= 20:
            print("MISMATCH", msg)

    tables = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e8m0": ml_dtypes.float8_e8m0fnu,
              "e2m1": ml_dtypes.float4_e2m1fn, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
    enc_lines = []
    n_dec = 0
    for line in out:
        parts = line.split()
        if parts[0] == "dec":
            kind, code, val = parts[1], int(parts[2]), float.fromhex(parts[3]) if "nan" not in parts[3] else float("nan")
            width = np.uint16 if kind in ("bf16", "f16") else np.uint8
            ref = float(np.array([code], dtype=width).view(tables[kind])[0]) if kind not in ("e2m1",) else \
                float(np.array([code], dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)[0])
            n_dec += 1
            if not ((np.isnan(ref) and np.isnan(val)) or ref == val):
                report(f"decode {kind} code {code}: ours {val} ml_dtypes {ref}")
        else:
            enc_lines.append(parts)

    assert len(enc_lines) == len(probes), "dumper did not encode every probe"
    ours = np.array([[int(x) for x in p[2:]] for p in enc_lines], dtype=np.int64)
    ref_bf16 = probes.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.int64)
    ref_f16 = probes.astype(np.float16).view(np.uint16).astype(np.int64)
    clipped_e4m3 = np.clip(probes, -448, 448)
    ref_e4m3 = clipped_e4m3.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).astype(np.int64)
    ref_e5m2 = probes.astype(ml_dtypes.float8_e5m2).view(np.uint8).astype(np.int64)
    ref_e2m1 = np.clip(probes, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8).astype(np.int64) & 0xF
    for col, (name, ref) in enumerate([("bf16", ref_bf16), ("f16", ref_f16), ("e4m3", ref_e4m3),
                                       ("e5m2", ref_e5m2), ("e2m1", ref_e2m1)]):
        diff = np.nonzero(ours[:, col] != ref)[0]
        for i in diff[:5]:
            report(f"encode {name} of {probes[i]!r}: ours {ours[i, col]:#x} ml_dtypes {ref[i]:#x}")
        bad += max(0, len(diff) - 5)
    print(f"checked {n_dec} decodes and {len(probes)} x 5 encodes; {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
