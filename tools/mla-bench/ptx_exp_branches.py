#!/usr/bin/env python3
"""Finds exponentials that the compiler put behind a branch each, in the PTX of kernel files.

In session 22 the FP8 narrow kernel's softmax had `live ? exp2f(x - m) : 0`: exp2f is a library
call to the front end, so the select became a branch around every exp2 in the PTX, which ptxas
turned into predicated code (predicate logic a token, beside exp2f's range fix-up). With the exp2
unconditional (a masked token's x is -inf, so its exp2 is 0) and ex2.approx.ftz, warpgroup 0's
loop lost 27% of its SASS instructions and the 32-row shapes ran 1.3x faster (with two tiles a
pass). This tool looks for that shape in the PTX, where it is plain to see (sass_loops.py then
shows what ptxas made of it): it compiles
each file to PTX (nvcc -ptx, sm_90a, the kernels' flags), groups every entry's ex2 instructions
into clusters (ex2s less than --gap lines apart) and prints, per cluster, its ex2 count and the
branches inside it. A cluster with about one branch per ex2 is the pattern; the in-kernel split
merges (expf once per split and row, behind the row's -inf test) show it too and are not hot.

    python3 tools/mla-bench/ptx_exp_branches.py kernels/fp8_decode_narrow.cu kernels/decode_manyhead_v6.cu
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

NVCC_FLAGS = ["-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr", "-I.",
              "-Ilib"]


def ptx_of(path, nvcc):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "k.ptx")
        r = subprocess.run([nvcc, *NVCC_FLAGS, "-ptx", path, "-o", out], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"ptx_exp_branches: nvcc -ptx {path} failed:\n{r.stderr[-2000:]}")
        with open(out) as f:
            return f.read()


def short_name(mangled):
    """The kernel's demangled name without its namespaces and parameter list (c++filt where present)."""
    try:
        full = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
    except OSError:
        return mangled[-60:]
    full = full.replace("(anonymous namespace)::", "")
    full = re.sub(r"\(.*\)$", "", full)  # the parameter list
    full = re.sub(r"^\w+ ", "", full)  # the return type
    return re.sub(r"\b[\w]+::", "", full)


def clusters(lines, gap):
    ex = [i for i, line in enumerate(lines) if "ex2.approx" in line]
    groups = []
    for i in ex:
        if groups and i - groups[-1][-1] <= gap:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="kernel .cu files (run from the repository root)")
    ap.add_argument("--nvcc", default="/usr/local/cuda/bin/nvcc")
    ap.add_argument("--gap", type=int, default=60, help="PTX lines between two ex2s of one cluster (default 60)")
    ap.add_argument("--min-ex2", type=int, default=4, help="report clusters of at least this many ex2s (default 4)")
    args = ap.parse_args()
    flagged = 0
    for path in args.files:
        ptx = ptx_of(path, args.nvcc)
        starts = [m.start() for m in re.finditer(r"\.entry ", ptx)]
        for a, b in zip(starts, starts[1:] + [len(ptx)]):
            name = short_name(ptx[a:a + 400].split("(")[0].split()[-1])
            lines = ptx[a:b].splitlines()
            for c in clusters(lines, args.gap):
                if len(c) < args.min_ex2:
                    continue
                branches = sum("bra" in line for line in lines[c[0]:c[-1] + 1])
                mark = "  <- a branch an exp2" if branches * 2 > len(c) else ""
                flagged += bool(mark)
                print(f"{os.path.basename(path)} {name}: {len(c)} ex2, {branches} branches{mark}")
    print(f"{flagged} cluster(s) with about a branch an exp2")


if __name__ == "__main__":
    main()
