#!/usr/bin/env python3
"""Runs FlashMLA's own tests/test_flash_mla_dense_decoding.py, unmodified, against mla_toolchain.

The test file is loaded from a FlashMLA checkout (--flashmla; its tests/ folder goes on sys.path
for its kernelkit helpers) with `import flash_mla` resolved to python/compat/flash_mla, which
re-exports this package's get_mla_metadata and flash_mla_with_kvcache: that folder goes first on
sys.path, and the runner refuses to start if `flash_mla` resolves anywhere else.

The test's main() builds its case lists and calls the module's test_flash_mla(case) for each, in
order, stopping at the first exception. To see every case, this runner replaces that module
attribute with a wrapper that calls the original and records how the case ended:
  pass          the test's assertions passed (out and lse vs its PyTorch reference, its tolerances)
  pass_timing   the assertions passed; then the timing step (kernelkit.bench_kineto) looked up
                FlashMLA's kernel name "flash_fwd_splitkv_mla_kernel" among the profiled kernels
                and found ours instead (a name lookup, not a result)
  out_of_scope  the package raised UnsupportedArgument (the message says which argument)
  fail          anything else (an assertion: a numerical mismatch, printed above it by the test)
The test's own code (data, reference, tolerances) runs as written. Prints a summary, writes it
as JSON (--json, also every 100 cases), exits 1 when any case failed.
"""
import argparse
import collections
import importlib.util
import json
import os
import pathlib
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
COMPAT = HERE.parent / "compat"
PACKAGE = HERE.parent


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flashmla", required=True, help="FlashMLA checkout (holds tests/test_flash_mla_dense_decoding.py)")
    ap.add_argument("--json", help="write the per-case outcomes and the summary here")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop running cases after this long (the rest are recorded as not_run); 0 = no limit")
    return ap.parse_args()


def load_test(flashmla):
    tests = pathlib.Path(flashmla) / "tests"
    path = tests / "test_flash_mla_dense_decoding.py"
    if not path.is_file():
        sys.exit(f"error: --flashmla {flashmla}: {path} not found")
    sys.path[:0] = [str(COMPAT), str(PACKAGE), str(tests)]
    import flash_mla  # noqa: F401  (the stand-in, first on the path)
    where = pathlib.Path(flash_mla.__file__).resolve()
    if COMPAT not in where.parents:
        sys.exit(f"error: `import flash_mla` resolved to {where}, not to {COMPAT}")
    spec = importlib.util.spec_from_file_location("test_flash_mla_dense_decoding", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path, where


def classify(exc):
    import mla_toolchain
    if isinstance(exc, mla_toolchain.UnsupportedArgument):
        return "out_of_scope", str(exc)
    msg = str(exc)
    if isinstance(exc, ValueError) and "No kernel name matched for substring flash_fwd_splitkv_mla_kernel" in msg:
        ours = sorted({line.strip()[2:][:90] for line in msg.splitlines()[1:]
                       if line.strip().startswith("- ") and "mla::kernels" in line})
        return "pass_timing", "timing looked up FlashMLA's kernel name; ours: " + ", ".join(ours)
    return "fail", f"{type(exc).__name__}: {msg.splitlines()[0] if msg else ''}"


def main():
    args = parse_args()
    module, test_path, shim = load_test(args.flashmla)
    import torch
    print(f"FlashMLA test: {test_path}\nflash_mla resolves to: {shim}\ndevice: {torch.cuda.get_device_name()}",
          flush=True)
    original = module.test_flash_mla
    records, start = [], time.time()

    def summary():
        counts = collections.Counter(r["outcome"] for r in records)
        reasons = collections.Counter((r["outcome"], r["detail"]) for r in records if r["outcome"] != "pass")
        return {"test": str(test_path), "cases": len(records), "counts": dict(counts),
                "reasons": [{"outcome": o, "detail": d, "cases": n} for (o, d), n in reasons.most_common()],
                "seconds": time.time() - start}

    def dump():
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"summary": summary(), "records": records}, f, indent=1)
            os.replace(tmp, args.json)

    def wrapped(t):
        case = {k: getattr(t, k) for k in ("b", "s_q", "s_k", "is_varlen", "is_causal", "test_performance",
                                           "have_zero_seqlen_k", "block_size", "h_q", "h_kv", "d", "dv")}
        if args.max_seconds and time.time() - start > args.max_seconds:
            records.append({**case, "outcome": "not_run", "detail": f"--max-seconds {args.max_seconds} reached"})
            return
        try:
            original(t)
            outcome, detail = "pass", ""
        except Exception as e:  # recorded per case; the run goes on
            outcome, detail = classify(e)
            if outcome == "fail":
                traceback.print_exc()
        print(f"=> {outcome}{': ' + detail if detail else ''}", flush=True)
        records.append({**case, "outcome": outcome, "detail": detail})
        if len(records) % 100 == 0:
            dump()

    module.test_flash_mla = wrapped  # main() calls it by its module-level name
    module.main(torch.bfloat16)
    dump()
    s = summary()
    print("\n=== FlashMLA dense decoding test against mla_toolchain ===")
    print(f"cases: {s['cases']}  " + "  ".join(f"{k}: {v}" for k, v in sorted(s["counts"].items())))
    for r in s["reasons"]:
        print(f"  {r['outcome']:<13} x{r['cases']:<5} {r['detail']}")
    print(f"{s['seconds']:.0f} s")
    sys.exit(1 if s["counts"].get("fail", 0) else 0)


if __name__ == "__main__":
    main()
