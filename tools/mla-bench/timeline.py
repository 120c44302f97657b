#!/usr/bin/env python3
"""Where a tile's time goes in a many-head split kernel, per warpgroup, from the SM clock.

Needs the C API library built with the kernel timeline compiled in (cmake -DMLA_TIMELINE=ON; the
macros of kernels/timeline.cuh are empty otherwise): lane 0 of each warp of grid block (0, 0)
records (clock64 << 8) | event id at named points of the kernel, keeping its last 1,024 events
(about 110 tiles: the end of the CTA's run; its first 1,024 with cmake -DMLA_TIMELINE_FIRST=ON). One
decode call of the shape (after two warm-up calls), then per warpgroup the median cycles between
consecutive events over the recorded tiles (the first two and the last left out) and the median tile
period; then, per warpgroup, every event at which one of its warps runs more than 100 cycles behind
the others (each warp's median lag). --kernel v6 also prints every CTA's span (thread 0's globaltimer
and clock64 at the CTA's start and end): the grid's length, the spread of the CTAs' cycles, the clock
they imply, CTA (0, 0) and the slowest other CTAs.

The events cost time in the CTA that records them: on v6 CTA (0, 0) ran 14-15% more cycles than every
other CTA (session 27), so its period and steps are relative figures for that CTA; whole-kernel cycles
come from the spans, which the other CTAs record without events.

Reading the figures: an event recorded right after a named-barrier sync (`bar.sync`) is the time the
warp *reached* the barrier, not when the barrier completed: the SM clock read is issued before the
barrier's wait resolves, and the wait shows up in the next step instead (session 19 found v6's
warpgroup 1 "past" barrier 6 ~1,560 cycles before warpgroup 0 arrived there). The period and steps
bounded by wgmma waits or mbarrier waits are not affected.

--kernel v6 (the BF16 many-head kernel, decode_manyhead_v6.cu; libmla_decode_capi.so):
  warpgroup 0 (S, softmax, its half of O): 0 tile start, 1 its previous P.V done, 2 the tile landed,
  3 S done, 4 row max (factors published), 5 O rescaled and the exponentials, 6 its P.V issued,
  7 the P buffer free (barrier 3), 8 P handed over (barrier 4); warpgroup 1 (the other half of O):
  10 tile start, 11 its previous P.V done, 12 the row factors (barrier 6), 13 O rescaled,
  14 barrier 3, 15 P visible (barrier 4), 16 its P.V issued.
--kernel fp8-rows64 (the FP8 64-row kernel, fp8_decode_rows64.cu; libmla_fp8_capi.so):
  warpgroup 0 (S and the softmax): 0 tile start, 1 the tile landed, 2 S done, 3 softmax inputs read
  (stage released), 4 softmax, 5 P buffer free, 6 P handed over; warpgroup 1 (P.V over half of
  d_c): 10 tile start, 11 the tile landed, 12 V^T fragments of k-step 0, 13 P8 of the tile,
  14 O rescaled, 15 k-step 0's P.V done, 16 V^T fragments of k-step 1, 17 k-step 1's P.V done,
  18 (FP4 pages) its share of tile it + kS converted.
--kernel fp4-rows64 (the same kernel on FP4 pages, the FP4 cache's FP8 route at > 32 rows;
  libmla_kv4_capi.so): the same events.
--kernel fp8-narrow / fp4-narrow (the FP8 narrow kernel, <= 32 query rows, fp8_decode_narrow.cu, on FP8
  pages from libmla_fp8_capi.so or on FP4 pages, the FP4 cache's FP8 route, from libmla_kv4_capi.so;
  pass --heads 16 or 32): warpgroup 0 (S and the softmax, a pass of two tiles on FP8 pages, one on FP4
  pages: its period is a pass's): 0 pass start, 1 a stage landed (once a tile), 2 S done,
  3 S^T staged (barrier), 4 softmax, 5 P buffer free, 6 P handed over; warpgroup 1 (P.V over half of
  d_c): 10 tile start, 11 FP4 pages: tile it + 2 converted, 12 the stage landed, 13 V^T fragments
  (stage released), 14 P visible, 15 P.V done; fp4-narrow also warpgroup 3 (the copying thread's warp,
  which converts every tile): 20 tile start, 21 raw copies issued, 22 tile converted.
--kernel flashmla (FlashMLA's sm90 dense decode, the peer: a FlashMLA built from a source tree that
  tools/mla-bench/flashmla_timeline_patch.py edited, first on PYTHONPATH; --lib defaults to its
  flash_mla.cuda extension): its "tile" is a pair of 64-token blocks (block 0 on warpgroup 0,
  block 1 on warpgroup 1, O's columns split between them). Warpgroup 0: 0 pair start (S of block 0
  done), 1 softmax of block 0 (factors out), 2 P0 V0L issued (P from registers), 3 P0 V0L done,
  4 block 1's factors, 5 P0 rescaled and stored, 6 warpgroup 1 issued P0 V0R, 7 P1 V1L issued (P
  from shared memory), 8 P1 V1L done, 9 next S of block 0 issued; warpgroup 1: 10 pair start (S of
  block 1 done), 11 block 0's factors, 12 softmax of block 1, 13 P1 stored and P1 V1R issued, 14 P0
  visible, 15 P0 V0R issued, 16 P1 V1R done, 17 P0 V0R done, 18 next S of block 1 issued. Its
  events keep the last 51 pairs (fixed slots a pair); a per-pair period is two of v6's tiles.
  tools/mla-bench/flashmla_timeline.sh builds it and runs this on a GPU machine.

    python3 tools/mla-bench/timeline.py --kernel v6 --lib build-tl/tools/mla-bench/libmla_decode_capi.so \
        --heads 128 --s-q 1 --seqlen 8192 [--parts N] [--json out.json]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_flashmla import Case, Ours  # noqa: E402

WARPS, EVENTS = 16, 1024  # kernels/timeline.cuh
NAMES = {
    "v6": {0: "tile start", 1: "own previous P.V done", 2: "tile landed", 3: "S done", 4: "row max",
           5: "O rescaled, exponentials", 6: "P.V issued", 7: "P buffer free (bar 3)", 8: "P handed over (bar 4)",
           10: "tile start", 11: "own previous P.V done", 12: "row factors (bar 6)", 13: "O rescaled",
           14: "bar 3", 15: "P visible (bar 4)", 16: "P.V issued"},
    "fp8-rows64": {0: "tile start", 1: "tile landed", 2: "S done", 3: "softmax inputs read", 4: "softmax",
                   5: "P buffer free", 6: "P handed over", 10: "tile start", 11: "tile landed",
                   12: "V^T fragments, k-step 0", 13: "P8 of the tile", 14: "O rescaled", 15: "k-step 0 P.V done",
                   16: "V^T fragments, k-step 1", 17: "k-step 1 P.V done", 18: "FP4: tile it + kS converted"},
    "flashmla": {0: "pair start (S0 done)", 1: "softmax 0, factors out", 2: "P0 V0L issued (RS)", 3: "P0 V0L done",
                 4: "block 1's factors", 5: "P0 rescaled, stored", 6: "wg1 issued P0 V0R", 7: "P1 V1L issued (SS)",
                 8: "P1 V1L done", 9: "next S0 issued", 10: "pair start (S1 done)", 11: "block 0's factors",
                 12: "softmax 1, factors out", 13: "P1 stored, P1 V1R issued (RS)", 14: "P0 visible",
                 15: "P0 V0R issued (SS)", 16: "P1 V1R done", 17: "P0 V0R done", 18: "next S1 issued"},
    "fp8-narrow": {0: "pass start", 1: "stage landed", 2: "S done", 3: "S^T staged (bar)", 4: "softmax",
                   5: "P buffer free", 6: "P handed over", 10: "tile start", 11: "FP4: tile it + 2 converted",
                   12: "stage landed", 13: "V^T fragments", 14: "P visible", 15: "P.V done",
                   20: "tile start", 21: "raw copies issued", 22: "tile converted"},
}
NAMES["fp4-narrow"] = NAMES["fp8-narrow"]
NAMES["fp4-rows64"] = NAMES["fp8-rows64"]
# The C API function that reads each kernel's events.
READER = {"v6": "mla_decode_capi_timeline", "fp8-rows64": "mla_fp8_capi_timeline", "flashmla": "mla_fm_timeline",
          "fp8-narrow": "mla_fp8_capi_narrow_timeline", "fp4-narrow": "mla_kv4_capi_narrow_timeline",
          "fp4-rows64": "mla_kv4_capi_rows64_timeline"}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", choices=sorted(READER), default="v6")
    ap.add_argument("--lib", help="libmla_decode_capi.so (v6), libmla_fp8_capi.so (fp8-rows64, fp8-narrow) or "
                    "libmla_kv4_capi.so (fp4-narrow, fp4-rows64) built with "
                    "-DMLA_TIMELINE=ON; for flashmla the patched flash_mla.cuda extension (default: the imported one)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--s-q", type=int, default=1)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--parts", type=int, default=0,
                    help="--kernel v6: this many split parts instead of the library's default (fewer CTAs, "
                         "fewer SMs streaming: does the period follow the memory side's load?)")
    ap.add_argument("--json", help="write the per-warp event lists and the summary here")
    args = ap.parse_args()
    if args.parts and args.kernel != "v6":
        ap.error(f"--parts {args.parts}: only --kernel v6 takes a parts override (got --kernel {args.kernel})")
    if args.parts < 0:
        ap.error(f"--parts {args.parts}: a count of split parts is positive (0: the library's default)")
    return args


SPAN_WARP = 12  # kernels/timeline.cuh kSpanWarp


def cta_spans(words, row_blocks):
    """Every CTA's (globaltimer, clock64) at its start and end: the spread of their lengths in ns and cycles,
    the clock they imply, the grid's extent, CTA (0, 0) and the slowest other CTAs as (row block, part)."""
    ctas = []
    for i in range(len(words) // 4):
        t0, c0, t1, c1 = words[4 * i:4 * i + 4]
        if t0 and t1:
            ctas.append({"cta": [i % row_blocks, i // row_blocks], "ns": t1 - t0, "cycles": c1 - c0,
                         "start_ns": t0, "end_ns": t1})
    if not ctas:
        return {}
    t_first, t_last = min(c["start_ns"] for c in ctas), max(c["end_ns"] for c in ctas)
    for c in ctas:
        c["start_ns"] -= t_first
        c["end_ns"] -= t_first

    def spread(key):  # min, median, max over the CTAs
        v = [c[key] for c in ctas]
        return [min(v), statistics.median(v), max(v)]

    return {"ctas": len(ctas), "grid_ns": t_last - t_first, "ns": spread("ns"), "cycles": spread("cycles"),
            "ghz_median": round(statistics.median(c["cycles"] / c["ns"] for c in ctas), 3),
            "cta00": next((c for c in ctas if c["cta"] == [0, 0]), None),
            "slowest": sorted((c for c in ctas if c["cta"] != [0, 0]), key=lambda c: -c["end_ns"])[:4]}


def events_of(words):
    """[(clock, id)] of one warp's filled slots (0 = empty) in clock order: the slots are a ring of
    the warp's last events (kernels/timeline.cuh; FlashMLA's: fixed slots a block pair)."""
    return sorted((w >> 8, w & 0xFF) for w in words if w != 0)


def tiles(events, start_id):
    """The warp's events split into tiles at each start_id event."""
    out, cur = [], None
    for clk, ev in events:
        if ev == start_id:
            if cur:
                out.append(cur)
            cur = [(clk, ev)]
        elif cur is not None:
            cur.append((clk, ev))
    if cur:
        out.append(cur)
    return out


def summary(events, start_id, names):
    """Median cycles from each event to the next within a tile, and the median tile period."""
    ts = tiles(events, start_id)
    steady = ts[2:-1] if len(ts) > 4 else ts
    gaps = {}
    for t in steady:
        for (c0, e0), (c1, e1) in zip(t, t[1:]):
            gaps.setdefault((e0, e1), []).append(c1 - c0)
    periods = [b[0][0] - a[0][0] for a, b in zip(steady, steady[1:])]
    rows = [{"from": e0, "to": e1, "what": names.get(e1, str(e1)), "median_cycles": statistics.median(v),
             "tiles": len(v)} for (e0, e1), v in gaps.items()]
    rows.sort(key=lambda r: (r["from"], r["to"]))
    return {"tiles_recorded": len(ts), "tiles_used": len(steady),
            "period_cycles": statistics.median(periods) if periods else None, "gaps": rows}


def warp_lags(per_warp, warps):
    """Per event id: each warp's median lag (cycles) behind the earliest of `warps` at the same occurrence.

    The warps of one warpgroup record the same events in the same order, so the k-th occurrence of an id
    is the same point of the same tile in each (their rings end at the same event). A warp that lags at
    one event and not at the next is the one its warpgroup waited for in between (a wgmma issues when
    all four warps of its warpgroup reach it): session 19 found the seesaw probe's loader warps this way.
    """
    lags = {}
    ids = sorted({e for w in warps for _, e in per_warp[w]})
    for e in ids:
        times = [[c for c, x in per_warp[w] if x == e] for w in warps]
        n = min(len(t) for t in times)
        if n == 0:
            continue
        lags[e] = [statistics.median(times[k][i] - min(t[i] for t in times) for i in range(n))
                   for k in range(len(warps))]
    return lags


def main():
    args = parse_args()
    case = Case(args.batch, args.heads, args.s_q, 512, 64, args.seqlen, 64, seed=0)
    if args.kernel == "flashmla":
        import flash_mla.cuda
        from peer_flashmla import flashmla_runner
        lib = ctypes.CDLL(args.lib or flash_mla.cuda.__file__)  # the loaded extension: the same buffer
        if not hasattr(lib, READER["flashmla"]):
            sys.exit(f"timeline: {lib._name} has no {READER['flashmla']}: not a FlashMLA built from a tree that "
                     "tools/mla-bench/flashmla_timeline_patch.py edited (tools/mla-bench/flashmla_timeline.sh builds one)")
        fm_reader = getattr(lib, READER["flashmla"])
        fm_reader.restype, fm_reader.argtypes = ctypes.c_int, [ctypes.c_void_p]

        def timeline(host):
            torch.cuda.synchronize()
            if fm_reader(host) != 0:
                sys.exit("timeline: reading FlashMLA's events failed (cudaMemcpyFromSymbol / cudaMemset)")

        run, parts = flashmla_runner(case), "FlashMLA's"
    else:
        if not args.lib:
            sys.exit(f"timeline: --lib is needed for --kernel {args.kernel}")
        lib = ctypes.CDLL(args.lib)
        reader = getattr(lib, READER[args.kernel])
        reader.restype = ctypes.c_int
        reader.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        err = ctypes.create_string_buffer(1024)
        stream = torch.cuda.current_stream().cuda_stream

        def timeline(host):
            if reader(host, ctypes.c_void_p(stream), err, 1024) != 0:
                sys.exit(f"timeline: {err.value.decode()}")

        if args.kernel == "v6":
            run, parts = Ours(args.lib).prepare(case, 0, args.parts)
        elif args.kernel in ("fp4-narrow", "fp4-rows64"):  # FP4 pages of case's shape, the FP8 route (route 1)
            from peer_kv4 import Ours as Kv4Ours, pack_pages
            pages, _, levels = pack_pages(case, "fp4", torch.Generator(device="cuda").manual_seed(5000))
            run, parts = Kv4Ours(args.lib).prepare(case, "fp4", pages, levels, route=1)
        else:
            from peer_fp8 import Ours as Fp8Ours  # the FP8 cache written by our append kernel from case's values
            run, parts = Fp8Ours(args.lib).prepare(case)
    run()
    run()
    timeline(None)
    run()
    torch.cuda.synchronize()
    buf = (ctypes.c_uint64 * (WARPS * EVENTS))()
    timeline(ctypes.addressof(buf))
    per_warp = [events_of(buf[w * EVENTS:(w + 1) * EVENTS]) for w in range(WARPS)]
    if not per_warp[0] or not per_warp[4]:
        sys.exit(f"timeline: no events recorded for {case.name}: the call did not run the {args.kernel} kernel "
                 "(v6: > 16 query rows outside the TPLA-slice path; fp8-rows64: > 32 query rows outside the "
                 "TPLA-slice path, fp4-rows64 likewise on FP4 pages; fp8-narrow / fp4-narrow: <= 32 query rows (--heads 16); see docs/kernels.md; flashmla: a FlashMLA without the events)")
    names = NAMES[args.kernel]
    report = {"device": torch.cuda.get_device_name(), "kernel": args.kernel, "shape": case.name, "parts": parts,
              "warpgroup0": summary(per_warp[0], 0, names), "warpgroup1": summary(per_warp[4], 10, names)}
    if args.kernel == "v6":  # every CTA's span (kernels/timeline.cuh: record_span, warp kSpanWarp's slots)
        report["spans"] = cta_spans(buf[SPAN_WARP * EVENTS:(SPAN_WARP + 1) * EVENTS], -(-args.heads * args.s_q // 64))
    groups = [("warpgroup0", 0), ("warpgroup1", 4)]
    if args.kernel == "fp4-narrow" and per_warp[12]:  # the copying and converting warpgroup
        report["warpgroup3"] = summary(per_warp[12], 20, names)
        groups.append(("warpgroup3", 12))
    print(f"device {report['device']}, {args.kernel}, {case.name}, {parts} parts; CTA (0, 0), warps "
          + ", ".join(str(w) for _, w in groups))
    sp = report.get("spans")
    if sp:
        print(f"CTA spans: {sp['ctas']} CTAs, grid {sp['grid_ns'] / 1e3:.1f} us; per CTA us min / median / max "
              + " / ".join(f"{v / 1e3:.1f}" for v in sp["ns"]) + ", k cycles " + " / ".join(f"{v / 1e3:.0f}" for v in sp["cycles"])
              + f", median clock {sp['ghz_median']} GHz")
        if sp["cta00"] and sp["cycles"][1] > 0:
            extra = sp["cta00"]["cycles"] / sp["cycles"][1] - 1
            if extra > 0.03:  # session 27: v6's events cost its CTA (0, 0) 14-15%
                print(f"  note: CTA (0, 0) ran {100 * extra:.0f}% more cycles than the median CTA: its events slow it, "
                      "so the steps below are that CTA's, not the grid's")
        for c in [sp["cta00"]] + sp["slowest"]:
            if c:
                print(f"  CTA {tuple(c['cta'])}: start {c['start_ns'] / 1e3:.1f} us, end {c['end_ns'] / 1e3:.1f} us, "
                      f"{c['cycles'] / 1e3:.0f} k cycles")
    for wg, first in groups:
        s = report[wg]
        print(f"{wg}: {s['tiles_used']} of {s['tiles_recorded']} tiles, median period {s['period_cycles']} cycles")
        for r in s["gaps"]:
            print(f"  {r['from']:>2} -> {r['to']:>2}  {r['median_cycles']:>8.0f}  {r['what']}")
        warps = [w for w in range(first, first + 4) if per_warp[w]]
        if len(warps) > 1:
            lags = warp_lags(per_warp, warps)
            report[wg]["warp_lags"] = {str(e): v for e, v in lags.items()}
            late = {e: v for e, v in lags.items() if max(v) > 100}
            for e, v in late.items():
                print(f"  event {e:>2} ({names.get(e, e)}): warps {warps[0]}-{warps[-1]} behind the first by "
                      + " / ".join(f"{x:.0f}" for x in v) + " cycles")
    if args.json:
        report["events"] = {str(w): per_warp[w] for w in range(WARPS) if per_warp[w]}
        tmp = args.json + ".tmp"  # renamed once complete: a stopped run leaves no half-written report
        try:
            with open(tmp, "w") as f:
                json.dump(report, f, indent=1)
            os.replace(tmp, args.json)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


if __name__ == "__main__":
    main()
