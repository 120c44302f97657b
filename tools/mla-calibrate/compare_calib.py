#!/usr/bin/env python3
"""Compares two calib.h5 files of the same capture layer by layer (docs/calibration.md, "BF16
second moment"): typically --moment f64 (reference) against --moment bf16 or f32.

  python3 tools/mla-calibrate/compare_calib.py REF.h5 OTHER.h5

Per common layer: max|dM| / max|M| of the second moment E[u u^T], max|d lambda| / lambda_max
and the largest relative error of the eigenvalues above 1e-6 lambda_max, max|d f_k| of the
energy fractions (fit and held-out, every g and basis), the largest principal-angle sine
between the PCA slice subspaces (every g, slice), and max|d| of the held-out norm errors."""
import sys

import h5py
import numpy as np


def main(ref_path, other_path):
    with h5py.File(ref_path, "r") as a, h5py.File(other_path, "r") as b:
        print(f"reference: {a.attrs['second_moment_accumulation']}")
        print(f"other:     {b.attrs['second_moment_accumulation']}")
        layers = sorted(set(k for k in a if k.startswith("layer_")) & set(k for k in b if k.startswith("layer_")))
        print("layer  tokens   dM/max|M|  dlam/lmax  max rel dlam  max|df|   max sin(PCA slice)  max|d normerr|")
        for name in layers:
            la, lb = a[name], b[name]
            ma, mb = la["second_moment"][()], lb["second_moment"][()]
            dm = np.abs(ma - mb).max() / np.abs(ma).max()
            ea, eb = la["eigenvalues"][()], lb["eigenvalues"][()]
            dl = np.abs(ea - eb).max() / ea[0]
            big = ea > 1e-6 * ea[0]
            rl = (np.abs(ea - eb)[big] / ea[big]).max()
            ua, ub = la["pca_basis"][()], lb["pca_basis"][()]  # columns = eigenvectors
            df = dn = sn = 0.0
            for gname in la:
                if not gname.startswith("g"):
                    continue
                g = int(gname[1:])
                for basis in la[gname]:
                    for ds in ("energy_fraction", "energy_fraction_holdout"):
                        df = max(df, np.abs(la[gname][basis][ds][()] - lb[gname][basis][ds][()]).max())
                    dn = max(dn, np.abs(la[gname][basis]["norm_rel_error_holdout"][()] -
                                        lb[gname][basis]["norm_rel_error_holdout"][()]).max())
                w = ua.shape[1] // g
                for k in range(g):
                    s = np.linalg.svd(ua[:, k * w:(k + 1) * w].T @ ub[:, k * w:(k + 1) * w], compute_uv=False)
                    sn = max(sn, float(np.sqrt(max(0.0, 1.0 - min(1.0, s.min()) ** 2))))
            print(f"{name}  {la.attrs['tokens_fit']:8d}  {dm:9.3g}  {dl:9.3g}  {rl:11.3g}  {df:8.3g}  {sn:18.3g}  {dn:13.3g}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
