#!/usr/bin/env python3
"""Cross-check: compares two mla-capture/1 files group by group (tokens equal, then the worst
relative L2 |a-b|/|b| per dataset over sequences), e.g. the C++ `mla-forward capture` against
datasets/capture_activations.py (transformers) on the same tokens. Exit 2 when a relative L2
exceeds --tol (default 1e-4). Usage: compare_captures.py A.h5 B.h5 [--tol 1e-4]"""
import argparse
import sys

import h5py
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("a")
    ap.add_argument("b", help="the reference")
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    worst = 0.0
    with h5py.File(args.a, "r") as fa, h5py.File(args.b, "r") as fb:
        def attr(f, key):  # the C++ writer stores fixed-length byte strings, h5py vlen str
            v = f.attrs[key]
            return v.decode() if isinstance(v, bytes) else v
        for key in ("schema", "model_type", "num_layers", "hidden_size"):
            if attr(fa, key) != attr(fb, key):
                print(f"root attr {key}: {fa.attrs[key]!r} vs {fb.attrs[key]!r}")
                return 2
        for g in ("calib", "eval", "reference"):
            if g not in fa or g not in fb:
                continue
            if not np.array_equal(fa[g]["tokens"][()], fb[g]["tokens"][()]):
                print(f"/{g}/tokens differ")
                return 2
            names = []
            fb[g].visit(lambda n: names.append(n) if isinstance(fb[g][n], h5py.Dataset) and n != "tokens" else None)
            for n in sorted(names):
                A, B = fa[g][n], fb[g][n]
                rel = max(float(np.linalg.norm(A[s].astype(np.float64) - B[s]) / np.linalg.norm(B[s].astype(np.float64)))
                          for s in range(B.shape[0]))
                worst = max(worst, rel)
                print(f"/{g}/{n:20s} worst rel L2 {rel:.3e}")
    print(f"worst rel L2 overall {worst:.3e} (tol {args.tol:g})")
    return 0 if worst <= args.tol else 2


if __name__ == "__main__":
    sys.exit(main())
