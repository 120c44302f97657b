#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's warp-stall samples per SASS instruction.

Input: the CSV of `ncu --import REPORT.ncu-rep --page source --csv --print-source sass` for a
report taken with `--section SourceCounters` (one kernel launch). Prints the total samples, the
instructions with the most samples (address, share, SASS text) and the samples summed by opcode
class (named barriers, mbarrier waits, wgmma waits and issues, wait-loop branches, others by
opcode), all samples beside the not-issued ones. The session 16-17 call scripts under
docs/bench-data/ carry the same summary inline (they are the record of what ran then).

    python3 tools/mla-bench/ncu_stalls.py sass.csv [--top 40] [--label "v6, 128 rows 8K"]
"""
import argparse
import collections
import csv
import re
import sys


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=30, help="instructions to list (0: none)")
    ap.add_argument("--classes", type=int, default=16, help="opcode classes to list")
    ap.add_argument("--label", default="", help="a name for the first line")
    return ap.parse_args()


def num(v):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0


def opcode_class(src):
    """The class an instruction's samples are summed under."""
    op = re.sub(r"^@!?U?P[T0-9]+\s+", "", src.strip()).split(" ")[0]
    base = op.split(".")[0]
    if base == "BAR":
        return "BAR (named barrier) " + op
    if base == "SYNCS":
        return "SYNCS (mbarrier wait/arrive)"
    if op.startswith("WARPGROUP.DEPBAR"):
        return "WARPGROUP.DEPBAR (wgmma wait)"
    if op.startswith("WARPGROUP"):
        return "WARPGROUP.ARRIVE"
    if base in ("HGMMA", "QGMMA"):
        return base + " (issue)"
    if base == "BRA":
        return "BRA (mostly wait-loop retries)"
    return base


def main():
    args = parse_args()
    rows = list(csv.reader(open(args.csv)))
    try:
        hdr = next(i for i, r in enumerate(rows)
                   if "Source" in r and any(k.startswith("Warp Stall Sampling (All") for k in r))
    except StopIteration:
        sys.exit(f"ncu_stalls: {args.csv} has no 'Source' / 'Warp Stall Sampling (All Samples)' columns "
                 "(take the report with --section SourceCounters and export --page source --print-source sass)")
    h = rows[hdr]
    isrc = h.index("Source")
    iaddr = h.index("Address") if "Address" in h else None
    iall = next(i for i, k in enumerate(h) if k.startswith("Warp Stall Sampling (All"))
    inot = next((i for i, k in enumerate(h) if k.startswith("Warp Stall Sampling (Not")), None)
    body = [r for r in rows[hdr + 1:] if len(r) == len(h)]
    tot_all = sum(num(r[iall]) for r in body)
    tot_not = sum(num(r[inot]) for r in body) if inot is not None else 0.0
    if tot_all == 0:
        sys.exit(f"ncu_stalls: no stall samples in {args.csv}")
    label = f"{args.label}: " if args.label else ""
    print(f"{label}{tot_all:.0f} samples ({tot_not:.0f} not issued), {len(body)} instructions")
    if args.top > 0:
        print(f"top {args.top} instructions (address, % of all samples, SASS):")
        for r in sorted(body, key=lambda r: -num(r[iall]))[:args.top]:
            addr = r[iaddr] if iaddr is not None else ""
            print(f"  {addr:>16} {num(r[iall]) / tot_all * 100:5.1f}%  {r[isrc].strip()[:96]}")
    agg = collections.defaultdict(lambda: [0.0, 0.0])
    for r in body:
        c = opcode_class(r[isrc])
        agg[c][0] += num(r[iall])
        agg[c][1] += num(r[inot]) if inot is not None else 0.0
    print("by opcode class (% of all samples, % of not-issued samples):")
    for c, (a, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:args.classes]:
        print(f"  {a / tot_all * 100:5.1f}%  {n / max(tot_not, 1.0) * 100:5.1f}%  {c}")


if __name__ == "__main__":
    main()
