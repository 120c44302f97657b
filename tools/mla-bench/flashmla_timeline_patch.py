#!/usr/bin/env python3
"""Puts SM-clock events into a copy of FlashMLA's sm90 dense decode kernel, for timeline.py --kernel flashmla.

Our kernels' timeline (kernels/timeline.cuh, `cmake -DMLA_TIMELINE=ON`) splits a tile's time
between the hand-offs of its warpgroups; this does the same for the peer, so that FlashMLA's
seesaw can be read beside v6 cycle for cycle (docs/gpu-notes.md, sessions 17-18). It edits a
FlashMLA source tree in place (a copy: tools/mla-bench/flashmla_timeline.sh extracts one from
.peer/flashmla-src.tar.xz); nothing of FlashMLA is kept in this repository, only the short
statements used as anchors below.

What it inserts:
  csrc/sm90/decode/dense/splitkv_mla.cuh: under MLA_FM_TIMELINE, a [16 warps x 1024] buffer and
    MLA_FM_TL(id): lane 0 of each warp of grid block (0, 0, 0) stores (clock64 << 8) | id at slot
    (pair % 51) * 20 + id, pair = block_idx / 2 (the subroutines run once per pair of 64-token
    blocks and have no counter to carry, so each pair's events have fixed slots: the last 51
    pairs are kept, older ones of the same slots overwritten; timeline.py orders by clock);
    the events at the hand-offs of wg0_subroutine (ids 0-9) and wg1_subroutine (10-18).
  csrc/sm90/decode/dense/instantiations/bf16.cu: MLA_FM_TIMELINE defined before the include (the
    fp16 instantiation stays as it is) and `extern "C" int mla_fm_timeline(void* host)`: host NULL
    clears the buffer, else copies it out (0 = success).

    python3 tools/mla-bench/flashmla_timeline_patch.py SRC_DIR
"""
import argparse
import pathlib
import sys

HEADER = "csrc/sm90/decode/dense/splitkv_mla.cuh"
BF16 = "csrc/sm90/decode/dense/instantiations/bf16.cu"
MARK = "MLA_FM_TIMELINE"

DEFS = r"""
// ---- inserted by mla-toolchain tools/mla-bench/flashmla_timeline_patch.py ----
#ifdef MLA_FM_TIMELINE
static __device__ unsigned long long g_mla_fm_tl[16 * 1024];
__device__ __forceinline__ void mla_fm_tl(int block_idx, int id) {
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && (threadIdx.x & 31) == 0) {
        const unsigned long long c = clock64();
        g_mla_fm_tl[(threadIdx.x >> 5) * 1024 + ((block_idx >> 1) % 51) * 20 + id] = (c << 8) | (unsigned long long)id;
    }
}
#define MLA_FM_TL(id) mla_fm_tl(block_idx, (id))
#else
#define MLA_FM_TL(id) ((void)0)
#endif
// ---- end of insertion ----
"""

READER = r"""
// ---- inserted by mla-toolchain tools/mla-bench/flashmla_timeline_patch.py ----
extern "C" __attribute__((visibility("default"))) int mla_fm_timeline(void* host) {
    const size_t bytes = sizeof(unsigned long long) * 16 * 1024;
    if (host != nullptr) return cudaMemcpyFromSymbol(host, g_mla_fm_tl, bytes) != cudaSuccess;
    void* dev = nullptr;
    if (cudaGetSymbolAddress(&dev, g_mla_fm_tl) != cudaSuccess) return 1;
    return cudaMemset(dev, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
}
"""

# (function, anchor, event id, before/after): the first occurrence of the anchor inside that
# function's text (the two subroutines share statements); "after" inserts behind the statement
# on the anchor's line, "before" a line above it.
EVENTS = [
    ("wg0", "// Calc P0 = softmax(P0)", 0, "before"),                 # pair start: S of block 0 done
    ("wg0", "NamedBarriers::sScale0Ready);", 1, "after"),              # softmax of block 0, factors out
    ("wg0", "warpgroup_cooperative_pv_gemm_localP<T>(", 2, "after"),   # P0 V0L issued (P from registers)
    ("wg0", "cute::warpgroup_wait<0>();", 3, "after"),                 # P0 V0L done
    ("wg0", "NamedBarriers::sScale1Ready);", 4, "after"),              # block 1's factors (from wg1)
    ("wg0", "NamedBarriers::sP0Ready);", 5, "after"),                  # P0 rescaled and stored
    ("wg0", "NamedBarriers::rO1sP0sV0RIssued);", 6, "after"),          # wg1 issued its P0 V0R
    ("wg0", "warpgroup_cooperative_pv_gemm_remoteP<T>(", 7, "after"),  # P1 V1L issued (P from smem)
    ("wg0", "cute::warpgroup_wait<4>();", 8, "after"),                 # P1 V1L done
    ("wg0", "// Wait for P0 = Q @ K0^T", 9, "before"),                 # next S of block 0 issued
    ("wg1", "// Wait for rP1 and warpgroup 0", 10, "before"),          # pair start: S of block 1 done
    ("wg1", "NamedBarriers::sScale0Ready);", 11, "after"),             # block 0's factors (from wg0)
    ("wg1", "NamedBarriers::sScale1Ready);", 12, "after"),             # softmax of block 1, factors out
    ("wg1", "warpgroup_cooperative_pv_gemm_localP<T>(", 13, "after"),  # P1 stored, P1 V1R issued
    ("wg1", "NamedBarriers::sP0Ready);", 14, "after"),                 # P0 visible
    ("wg1", "warpgroup_cooperative_pv_gemm_remoteP<T>(", 15, "after"), # P0 V0R issued
    ("wg1", "cute::warpgroup_wait<1>();", 16, "after"),                # P1 V1R done
    ("wg1", "cute::warpgroup_wait<0>();", 17, "after"),                # P0 V0R done
    ("wg1", "// We put the `cute::warpgroup_wait<0>()` out", 18, "before"),  # next S of block 1 issued
]


def function_span(text, start_marker, end_marker):
    a = text.find(start_marker)
    b = text.find(end_marker, a + 1)
    if a < 0 or b < 0:
        raise SystemExit(f"flashmla_timeline_patch: {HEADER}: cannot find '{start_marker}' .. '{end_marker}' "
                         "(another FlashMLA version? the anchors match deepseek-ai/FlashMLA 9241ae3)")
    return a, b


def statement_end(text, pos):
    """Index just past the statement starting on the line at pos (its ';' outside parentheses)."""
    depth = 0
    i = pos
    while i < len(text):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == ";" and depth == 0:
            return i + 1
        i += 1
    raise SystemExit("flashmla_timeline_patch: unterminated statement")


def insert_events(text):
    spans = {"wg0": function_span(text, "void wg0_subroutine(", "void wg1_subroutine("),
             "wg1": function_span(text, "void wg1_subroutine(", "// A helper function for determining")}
    inserts = []  # (position, code)
    for fn, anchor, ev, where in EVENTS:
        a, b = spans[fn]
        found = text.find(anchor, a, b)
        if found < 0:
            raise SystemExit(f"flashmla_timeline_patch: {HEADER}: '{anchor}' not found in {fn}_subroutine")
        line_start = text.rfind("\n", 0, found) + 1
        if where == "before":
            inserts.append((line_start, f"    MLA_FM_TL({ev});\n"))
        else:
            inserts.append((statement_end(text, line_start), f" MLA_FM_TL({ev});"))
    for pos, code in sorted(inserts, reverse=True):
        text = text[:pos] + code + text[pos:]
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", help="a FlashMLA source tree (a copy: it is edited in place)")
    args = ap.parse_args()
    root = pathlib.Path(args.src)
    header, bf16 = root / HEADER, root / BF16
    for f in (header, bf16):
        if not f.is_file():
            sys.exit(f"flashmla_timeline_patch: {f}: no such file (not a FlashMLA source tree?)")
    text = header.read_text()
    if MARK in text:
        sys.exit(f"flashmla_timeline_patch: {header} already carries the events")
    anchor = '#include "traits.h"\n'
    if anchor not in text:
        sys.exit(f"flashmla_timeline_patch: {header}: no '#include \"traits.h\"' to put the buffer after")
    text = text.replace(anchor, anchor + DEFS, 1)
    text = insert_events(text)
    src = bf16.read_text()
    tmp_h, tmp_b = header.with_suffix(".cuh.tmp"), bf16.with_suffix(".cu.tmp")
    tmp_h.write_text(text)
    tmp_b.write_text(f"#define {MARK}\n" + src + READER)
    tmp_h.replace(header)
    tmp_b.replace(bf16)
    print(f"flashmla_timeline_patch: {len(EVENTS)} events in {header}, reader in {bf16}")


if __name__ == "__main__":
    main()
