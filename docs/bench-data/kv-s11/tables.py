#!/usr/bin/env python3
"""Markdown table of an mla-bench --kv run archive (kvb*.tar.gz here): one row per route and shape."""
import json
import sys
import tarfile

def rows(path):
    runs = []
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if m.name.endswith(".json"):
                j = json.load(t.extractfile(m))
                if "routes" in j:
                    s = j["shape"]
                    runs.append(((j["kv"], -s["d_c"], s["heads"], s["s_q"], s["seqlen"], s["page"]), j))
    for _, j in sorted(runs, key=lambda r: r[0]):
            s = j["shape"]
            shape = f"H{s['heads']} s_q{s['s_q']} d_c{s['d_c']} L{s['seqlen'] // 1024}K" + (
                f" page{s['page']}" if s["page"] != 64 else "")
            for name, r in j["routes"].items():
                if "refused" in r:
                    yield shape, name, None
                else:
                    yield shape, name, r

def main():
    print("| shape (B = 128) | route | us | B/token | floor us (bound) | % of floor | vs our BF16 decode |")
    print("|---|---|---|---|---|---|---|")
    for path in sys.argv[1:]:
        for shape, name, r in rows(path):
            if r is None:
                print(f"| {shape} | {name} | refused | | | | |")
                continue
            print(f"| {shape} | {name} | {r['us']:.1f} | {r['bytes_per_token']} | {r['floor_us']:.1f} ({r['floor_bound']}) "
                  f"| {100 * r['frac_floor']:.0f}% | {r['vs_bf16']:.2f}x |")

if __name__ == "__main__":
    main()
