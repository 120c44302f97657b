#!/usr/bin/env python3
"""Markdown tables of scripts/tpla_study.sh's outputs (a reporting helper, not on the product's
path): the end-to-end loss change of every setting with its paired 95% interval, and per layer
the held-out logit error of the calibration and the attention-output error of verify-decode."""
import glob
import json
import math
import os
import sys


def t_quantile(p, df):
    """Student t quantile by bisection on the CDF (Simpson integration of the density)."""
    c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x):
        n = 2 * int(math.ceil(100 * (1 + x)))
        h = x / n
        f = lambda v: math.exp(c - (df + 1) / 2 * math.log1p(v * v / df))
        s = f(0) + f(x) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, n))
        return 0.5 + s * h / 3

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2

out = sys.argv[1]
runs = {}
for p in sorted(glob.glob(os.path.join(out, "tp*.json"))):
    tag = os.path.basename(p)[:-5]
    runs[tag] = json.load(open(p))


def key(tag):
    tp, basis, norm, mu, pd = tag.split("-")
    order = {"identity": 0, "hadamard": 1, "pca": 2, "qk": 3}
    return (norm != "approx", mu != "mulayer", pd != "pd", int(tp[2:]), order[basis])


print("| tp | basis | norm | mu | PD sep. | windows x tokens | original bits/byte | change (bits/byte) | 95% CI "
      "(paired t over windows) | change % | CI excludes 0 | top-1 agreement | mean attn rel. L2 (f64 path) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for tag in sorted(runs, key=key):
    j = runs[tag]
    tp, basis, norm, mu, pd = tag.split("-")
    c = j["perplexity"]["paired"]
    base = c["original_bits_per_token"]
    rel = [l["f64_path_vs_original"]["rel_l2"] for l in j["layers"]]
    print(f"| {tp[2:]} | {basis} | {norm} | {mu[2:]} | {'yes' if pd == 'pd' else 'no'} | "
          f"{c['windows']} x {c['tokens'] // c['windows']} | {base:.4f} | {c['difference_bits_per_token']:+.5f} | "
          f"[{c['interval']['lo']:+.5f}, {c['interval']['hi']:+.5f}] | "
          f"{100 * c['difference_bits_per_token'] / base:+.2f}% | {'yes' if c['excludes_zero'] else 'no'} | "
          f"{c['top1_agreement']:.4f} | {sum(rel) / len(rel):.3e} |")

calib = os.path.join(out, "calib.json")
if os.path.exists(calib):
    cj = json.load(open(calib))
    print("\nPer layer (held-out): logit error = sum_k f_k (1 - R^2_k) of the calibration (value-weighted share "
          "of the content logit the slices lose; mu fitted per layer), and verify-decode's attention-output "
          "relative L2 (float64 TPLA path vs original; PD separation, approx norm; 2 sequences x 224 decoded tokens).\n")
    bases = ["identity", "hadamard", "pca", "qk"]
    print("| tp | layer | " + " | ".join(f"logit err. {b}" for b in bases) + " | " +
          " | ".join(f"attn rel. L2 {b}" for b in bases) + " |")
    print("|---|---|" + "---|" * (2 * len(bases)))
    for tp in (2, 4, 8):
        for layer in cj["layers"]:
            g = layer[f"g{tp}"]
            errs = []
            for b in bases:
                s = g[b]
                errs.append(sum(f * (1 - r) for f, r in zip(s["f"], s["r2"])))
            attn = []
            for b in bases:
                j = runs.get(f"tp{tp}-{b}-approx-mulayer-pd")
                if j is None:
                    attn.append("-")
                    continue
                row = [l for l in j["layers"] if l["layer"] == layer["layer"]]
                attn.append(f"{row[0]['f64_path_vs_original']['rel_l2']:.3e}" if row else "-")
            print(f"| {tp} | {layer['layer']} | " + " | ".join(f"{e:.4f}" for e in errs) + " | " + " | ".join(attn) + " |")
    print("\nmu per layer (fit part; per slice), PCA and qk:\n")
    print("| tp | layer | mu pca | mu qk |")
    print("|---|---|---|---|")
    for tp in (2, 4, 8):
        for layer in cj["layers"]:
            g = layer[f"g{tp}"]
            fmt = lambda v: " ".join(f"{x:.3g}" for x in v)
            print(f"| {tp} | {layer['layer']} | {fmt(g['pca']['mu'])} | {fmt(g['qk']['mu'])} |")

head = os.path.join(out, "calib-head.json")
if os.path.exists(head):
    hj = json.load(open(head))
    print("\nmu per head (fit part): range over the heads of each slice's mu, PCA and qk:\n")
    print("| tp | layer | pca: min..max per slice | qk: min..max per slice |")
    print("|---|---|---|---|")
    for tp in (2, 4, 8):
        for layer in hj["layers"]:
            cells = []
            for b in ("pca", "qk"):
                m = layer[f"g{tp}"][b].get("mu_per_head")
                if not m:
                    cells.append("-")
                    continue
                cols = list(zip(*m))
                cells.append(" ".join(f"{min(c):.3g}..{max(c):.3g}" for c in cols))
            print(f"| {tp} | {layer['layer']} | {cells[0]} | {cells[1]} |")

def window_means(run):
    """Per-window mean loss change: from the per-token differences, or (the slimmed JSONs kept
    in docs/bench-data) from window_mean_difference_bits."""
    p = run["perplexity"]
    if "nll_difference_bits" in p:
        return [sum(x) / len(x) for x in p["nll_difference_bits"]]
    return p["window_mean_difference_bits"]


# qk against PCA directly: both conversions scored the same windows, so the per-window
# difference of their loss changes has its own (much narrower) paired interval.
print("\nqk minus PCA, paired over the same windows (bits/byte; negative: qk loses less):\n")
print("| tp | norm | mu | PD sep. | windows | qk - pca | 95% CI | CI excludes 0 |")
print("|---|---|---|---|---|---|---|---|")
for tag in sorted(runs, key=key):
    tp, basis, norm, mu, pd = tag.split("-")
    if basis != "pca":
        continue
    other = runs.get(tag.replace("-pca-", "-qk-"))
    if other is None:
        continue
    a, b = window_means(runs[tag]), window_means(other)
    if len(a) != len(b):
        continue
    d = [y - x for x, y in zip(a, b)]
    n = len(d)
    m = sum(d) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in d) / (n - 1))
    h = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    print(f"| {tp[2:]} | {norm} | {mu[2:]} | {'yes' if pd == 'pd' else 'no'} | {n} | {m:+.5f} | "
          f"[{m - h:+.5f}, {m + h:+.5f}] | {'yes' if (m - h > 0 or m + h < 0) else 'no'} |")
