#!/usr/bin/env python3
"""Static instruction mix of a kernel's loops, from its SASS: where a tile's instructions go,
without a GPU (docs/gpu-notes.md counts tile loops this way before and after a change).

Usage:
  nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I. -Ilib \\
       -c kernels/fp8_decode_rows64.cu -o /tmp/k.o
  python3 tools/mla-bench/sass_loops.py /tmp/k.o --function rows64_split_kernelILi512ELi64ELb0
      [--cuobjdump PATH] [--min 40]

A loop is the span from a backward branch's target to the branch; each is printed with its
instruction count and its most frequent opcodes (predicates and modifiers stripped), so a
warpgroup's tile loop is recognised by its mix (QGMMA/HGMMA, MUFU, LDSM, ...). Counts are
static: a loop holding branches (masked and unmasked tiles) counts both sides. For one path
through a loop, `--path START-END --skip A-B ...` counts the instructions between two addresses
less the blocks a branch skips on that path (read the addresses off `cuobjdump -sass`).
cuobjdump ships with the CUDA toolkit; where the toolkit has none (this repo's CI image), the
pinned PyPI wheel has it: pip download --no-deps nvidia-cuda-cuobjdump==13.5.37, unzip, and pass
its bin/cuobjdump with --cuobjdump; cuobjdump -sass runs nvdisasm, from nvidia-cuda-nvdisasm==13.5.37
the same way (its bin/ on PATH).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys


def sass_of(obj, function, cuobjdump):
    if not os.path.isfile(cuobjdump):
        sys.exit(f"sass_loops: no cuobjdump at {cuobjdump} (pass --cuobjdump; see --help for the PyPI wheel)")
    names = subprocess.run([cuobjdump, "-sass", obj], check=True, capture_output=True, text=True).stdout
    found = sorted({m for m in re.findall(r"Function : (\S+)", names) if function in m})
    if not found:
        sys.exit(f"sass_loops: no function containing '{function}' in {obj}")
    if len(found) > 1:
        sys.exit(f"sass_loops: '{function}' matches {len(found)} functions, narrow it:\n  " + "\n  ".join(found))
    return subprocess.run([cuobjdump, "-sass", "-fun", found[0], obj], check=True, capture_output=True,
                          text=True).stdout, found[0]


def instructions(sass):
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def opcode(text):
    text = re.sub(r"^@!?U?P\w+\s+", "", text)
    return text.split()[0].split(".")[0]


def loops(ins, min_len):
    at = {a: i for i, (a, _) in enumerate(ins)}
    spans = set()
    for i, (a, t) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            spans.add((at[int(m.group(1), 16)], i))
    return [(s, e) for s, e in sorted(spans) if e - s + 1 >= min_len]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("object", help="a compiled .o (sm_90a)")
    ap.add_argument("--function", required=True, help="a substring of the mangled kernel name (one match)")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump")
    ap.add_argument("--min", type=int, default=40, help="loops shorter than this many instructions are left out")
    ap.add_argument("--top", type=int, default=14, help="opcodes shown per loop")
    ap.add_argument("--path", metavar="START-END",
                    help="instead of the loops: the instructions from address START to END (hex, END excluded) "
                         "less every --skip range: one pass along a path whose untaken branches are skipped "
                         "(how session 24 counted a tile's fast path)")
    ap.add_argument("--skip", metavar="A-B", action="append", default=[],
                    help="with --path: leave out addresses A to B (hex, B excluded); repeatable")
    args = ap.parse_args()
    if args.skip and not args.path:
        ap.error("--skip needs --path")
    sass, name = sass_of(args.object, args.function, args.cuobjdump)
    ins = instructions(sass)
    print(f"{name}: {len(ins)} instructions")
    if args.path:
        def span(text):
            try:
                a, b = (int(x, 16) for x in text.split("-"))
            except ValueError:
                sys.exit(f"sass_loops: '{text}' is not a hex address range A-B")
            return a, b
        lo, hi = span(args.path)
        skips = [span(x) for x in args.skip]
        kept = [t for a, t in ins if lo <= a < hi and not any(s <= a < e for s, e in skips)]
        mix = collections.Counter(opcode(t) for t in kept)
        print(f"path {lo:#x}-{hi:#x} less {len(skips)} range(s): {len(kept)} instructions; "
              + ", ".join(f"{k} {v}" for k, v in mix.most_common(args.top)))
        return
    for s, e in loops(ins, args.min):
        mix = collections.Counter(opcode(t) for _, t in ins[s:e + 1])
        print(f"loop {ins[s][0]:#x}-{ins[e][0]:#x}: {e - s + 1} instructions; "
              + ", ".join(f"{k} {v}" for k, v in mix.most_common(args.top)))


if __name__ == "__main__":
    main()
