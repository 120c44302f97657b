#!/usr/bin/env bash
# Session 11, call 7 (nvidia-h200): the package's DecodePlan (fp8_decode_plan): both device checks,
# then the per-call time of FP8 decodes from Python with and without a plan. Written before: a
# planned decode launches no scheduler, so it should save one launch and its gap, ~3-6 us a call.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
T0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla_decode_capi mla_fp8_capi mla_kv4_capi >> "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
export MLA_TOOLCHAIN_LIB_DIR=/tmp/b/tools/mla-bench PYTHONPATH=$PWD/python
for c in check_package_gpu check_kv_package_gpu; do
  python3 python/tests/$c.py > "$OUT/$c.log" 2>&1; echo "$c rc=$?"
  grep "^\[FAIL\]" "$OUT/$c.log" | head; grep -E "planned" "$OUT/$c.log"; tail -1 "$OUT/$c.log"
done
python3 - <<'PY'
import torch, mla_toolchain as mt
torch.manual_seed(0)
for B, H, L in [(8, 16, 1024), (128, 16, 8192), (32, 128, 4096)]:
    d_c, d_r, page = 512, 64, 64
    pages = (L + page - 1) // page
    cache = mt.alloc_kv_cache("fp8", B * pages, page, d_c, d_r)
    table = torch.randperm(B * pages, dtype=torch.int32, device="cuda").view(B, pages)
    kv = torch.randn(B, L, d_c + d_r, device="cuda").to(torch.bfloat16)
    mt.fp8_append_kvcache(kv, cache, table, torch.zeros(B, dtype=torch.int32, device="cuda"), d_c)
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    q = torch.randn(B, 1, H, d_c + d_r, device="cuda").to(torch.bfloat16)
    plan = mt.fp8_decode_plan(q, lens, d_c)
    res = {}
    for name, kw in (("self-scheduling", {}), ("planned", {"plan": plan})):
        f = lambda: mt.fp8_decode_with_kvcache(q, cache, table, lens, d_c, **kw)
        for _ in range(20): f()
        ts = []
        for _ in range(7):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(100): f()
            e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) * 10)  # us per call
        ts.sort(); res[name] = ts[3]
    print(f"fp8 decode B={B} H={H} L={L}: self-scheduling {res['self-scheduling']:.1f} us/call, planned "
          f"{res['planned']:.1f} us/call (back to back, L2 warm, median of 7 x 100)")
PY
echo "total $(( $(date +%s) - T0 )) s"
