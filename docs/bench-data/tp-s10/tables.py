#!/usr/bin/env python3
"""Tables of docs/benchmarks.md "Several GPUs, session 10" from the mla-bench --tp text outputs here.
Per (L, mode): range over runs of attention (measured / roofline), q_proj, out_proj, o_proj
all-reduce, exact-norm all-reduce, DCP merge, step (measured / roofline) and the attention and step
speed-ups over head-parallel in the same run. Usage: python3 tables.py (in this folder)."""
import re

NAMES = ('head-parallel', 'tpla', 'tpla-g2', 'dcp')


def parse(f):
    d = {}
    for line in open(f):
        m = re.match(r'^(head-parallel|tpla-g2|tpla|dcp)\s+(\d+)\s+\d+\s+\d+\s+\d+ \|(.*)\|\s*([\d.]+)/([\d.]+)\s*\|', line)
        if m:
            parts = [tuple(map(float, x.split('/'))) for x in m.group(3).split()]
            d[(int(m.group(2)), m.group(1))] = dict(parts=parts, step=float(m.group(4)), pred=float(m.group(5)))
    return d


def rng(vals, fmt):
    vals = sorted(vals)
    lo, hi = fmt.format(vals[0]), fmt.format(vals[-1])
    return lo if lo == hi else f'{lo}-{hi}'


SETS = {'4 x H200, tp = 4': ['call5-tp4a-bench-h200.txt', 'call5-tp4b-bench-h200.txt', 'call6-tp4-bench-h200.txt',
                             'call7-tp4c-bench-h200.txt'],
        '2 x H200 (GPUs 0, 1 of the four), tp = 2': ['call5-tp2-bench-h200.txt', 'call7-tp2a-bench-h200.txt',
                                               'call7-tp2b-bench-h200.txt', 'call7-tp2c-bench-h200.txt'],
        '4 x H100, tp = 4': ['call2-tp4a-bench.txt', 'call2-tp4b-bench.txt'],
        '2 x H100 (GPUs 0, 1 of the four), tp = 2': ['call2-tp2-bench.txt']}
for title, fs in SETS.items():
    runs = [parse(f) for f in fs]
    print(f'\n{title} ({len(runs)} run{"s" if len(runs) > 1 else ""})\n')
    print('| L | mode | attention / roofline | q_proj | W_UV + o_proj | o_proj all-reduce | norm all-reduce | DCP merge '
          '| step / roofline | attention vs head-parallel | step vs head-parallel |')
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    for L in (8192, 32768):
        for mode in NAMES:
            if (L, mode) not in runs[0]:
                continue
            rs = [r[(L, mode)] for r in runs]
            hp = [r[(L, 'head-parallel')] for r in runs]
            col = lambda i: rng([x['parts'][i][0] for x in rs], '{:.1f}')
            print(f"| {L // 1024}K | {mode} | {col(2)} / {rs[0]['parts'][2][1]:.1f} | {col(1)} | {col(4)} | {col(5)} | "
                  f"{col(0) if mode.startswith('tpla') else '-'} | {col(3) if mode == 'dcp' else '-'} | "
                  f"{rng([x['step'] for x in rs], '{:.1f}')} / {rs[0]['pred']:.1f} | "
                  f"{rng([h['parts'][2][0] / x['parts'][2][0] for h, x in zip(hp, rs)], '{:.2f}')}x | "
                  f"{rng([h['step'] / x['step'] for h, x in zip(hp, rs)], '{:.2f}')}x |")
