#!/usr/bin/env bash
# Session 11, call 2 (nvidia-h200): mla-bench's new FP8 GEMM ceiling (cuBLASLt) beside torch's
# _scaled_mm (what peer_fp8.py measures), then mla-bench --kv over the issue 11 / 12 shape matrix.
set -uo pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build /tmp/b -j16 --target mla-bench >> "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "mla-bench built $(( $(date +%s) - T0 )) s"
python3 - <<'PY'
import torch
n = 8192
a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
one = torch.ones((), device="cuda")
f = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
for _ in range(3): f()
ts = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); f(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
ts.sort()
print(f"torch._scaled_mm fp8 8192^3: {2 * n**3 / (ts[len(ts) // 2] * 1e-3) / 1e12:.1f} TFLOP/s")
PY
B=/tmp/b/tools/mla-bench/mla-bench
run() {  # name, args
  local n=$1; shift
  timeout 120 $B --runs 30 "$@" --json "$OUT/kvb_$n.json" > "$OUT/kvb_$n.txt" 2>&1
  echo "== $n rc=$? ($(( $(date +%s) - T0 )) s): $*"; grep -E "^ceilings|^  " "$OUT/kvb_$n.txt"
}
for L in 4096 8192 32768; do
  run fp8_h16_$L --kv fp8 --heads 16 --seqlen $L
  run fp4_h16_$L --kv fp4 --heads 16 --seqlen $L
done
for H in 64 128; do
  run fp8_h${H}_8192 --kv fp8 --heads $H --seqlen 8192
  run fp4_h${H}_8192 --kv fp4 --heads $H --seqlen 8192
done
run fp8_h128_32768 --kv fp8 --heads 128 --seqlen 32768
run fp4_h128_32768 --kv fp4 --heads 128 --seqlen 32768
run fp8_h16_sq2_8192 --kv fp8 --heads 16 --sq 2 --seqlen 8192
run fp4_h16_sq2_8192 --kv fp4 --heads 16 --sq 2 --seqlen 8192
run fp8_h128_sq2_8192 --kv fp8 --heads 128 --sq 2 --seqlen 8192
run fp8_h16_8192_page128 --kv fp8 --heads 16 --seqlen 8192 --page 128
run fp8_tpla_h128_dc256_8192 --kv fp8 --heads 128 --dc 256 --seqlen 8192
run fp8_tpla_h128_dc256_32768 --kv fp8 --heads 128 --dc 256 --seqlen 32768
run fp4_tpla_h64_dc256_8192 --kv fp4 --heads 64 --dc 256 --seqlen 8192
run cb_h16_8192 --kv codebook --heads 16 --seqlen 8192
run cb_h16_32768 --kv codebook --heads 16 --seqlen 32768
run bf16_h128_8192 --heads 128 --seqlen 8192
tar -C "$OUT" -czf "$OUT/kvb2.tar.gz" $(cd "$OUT" && ls kvb_*) && rm -f "$OUT"/kvb_*
echo "total $(( $(date +%s) - T0 )) s"
