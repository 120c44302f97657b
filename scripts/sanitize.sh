#!/usr/bin/env bash
# The sanitizer part of CI (called by scripts/test.sh; docs/fuzzing.md). One clang build with
# AddressSanitizer + UndefinedBehaviorSanitizer (-O1, -fno-sanitize-recover=all; the libraries
# the fuzz targets link also carry libFuzzer's coverage instrumentation) serves both steps:
#  1. units: builds only the unit-test executables (target mla_unit_tests, no tools) and runs
#     the unit tests once (label unit, not gpu);
#  2. fuzz: builds the libFuzzer targets and runs each for FUZZ_SECONDS (default 30) on a
#     scratch copy of its seed corpus (tests/fuzz/corpus/<target>, datasets/malformed for the
#     safetensors header), as many at a time as there are cores. A crash, a sanitizer report
#     or a failed oracle fails CI; the crashing input is kept under $SAN_BUILD_DIR/artifacts.
# MLA_SANITIZE_STEPS=units,fuzz selects the steps (default both).
set -euo pipefail
cd "$(dirname "$0")/.."
SAN_BUILD_DIR=${SAN_BUILD_DIR:-build-sanitize}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
STEPS=${MLA_SANITIZE_STEPS:-units,fuzz}
jobs=$(nproc)
# HDF5 and OpenBLAS keep global allocations until exit: leak reports there are not ours.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
targets=(safetensors_header config_json safetensors_index calib_h5 capture_h5 calib_h5_recipe capture_h5_recipe)

start=$(date +%s)
# -gline-tables-only: reports keep function, file and line of every frame; ~5% less compile time than -g.
cmake -S . -B "$SAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DMLA_ENABLE_CUDA=OFF \
      -DMLA_BUILD_FUZZERS=ON -DMLA_SANITIZE=ON >/dev/null
build=()
[[ $STEPS == *units* ]] && build+=(mla_unit_tests)
[[ $STEPS == *fuzz* ]] && build+=("${targets[@]/#/fuzz_}")
cmake --build "$SAN_BUILD_DIR" -j "$jobs" --target "${build[@]}"
echo "sanitize: clang ASan+UBSan build: $(( $(date +%s) - start )) s"

if [[ $STEPS == *units* ]]; then
  start=$(date +%s)
  ctest --test-dir "$SAN_BUILD_DIR" -L unit -LE gpu --output-on-failure -j "$jobs"
  echo "sanitize: unit tests under ASan+UBSan: $(( $(date +%s) - start )) s"
fi

# Runs one target for FUZZ_SECONDS; its log is $art/<t>.log, its verdict $art/<t>.status.
fuzz_one() {
  local t=$1 art=$2 seeds=tests/fuzz/corpus/$1 scratch status=0
  [[ $t == safetensors_header ]] && seeds=datasets/malformed
  scratch=$(mktemp -d)
  cp "$seeds"/* "$scratch"/
  local dict=()
  [[ $t == safetensors_header ]] && dict=(-dict=tests/fuzz/safetensors.dict)
  local log="$art/$t.log" bin="$SAN_BUILD_DIR/tests/fuzz/fuzz_$t"
  if [[ $t == calib_h5 || $t == capture_h5 ]]; then
    # Raw bytes as HDF5: Debian's libhdf5 1.10.8 itself crashes and hangs on some damaged files
    # (docs/fuzzing.md): keep fuzzing past those, and fail only on a report whose first frames
    # are not inside libhdf5, i.e. a fault in our code.
    "$bin" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -timeout=5 \
        -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -artifact_prefix="$art/$t-" "$scratch" >"$log" 2>&1 || true
    awk '/ERROR: AddressSanitizer|ERROR: UndefinedBehaviorSanitizer|runtime error:/ {inrep = 1; n = 0; hdf = 0; next}
         inrep && /^ *#[0-9]+ / {n++; if ($0 ~ /libhdf5/) hdf = 1; if (n == 4) {if (!hdf) bad = 1; inrep = 0}}
         END {exit bad}' "$log" || status=1
  else
    "$bin" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -print_final_stats=1 \
        "${dict[@]}" -artifact_prefix="$art/$t-" "$scratch" >"$log" 2>&1 || status=$?
  fi
  rm -rf "$scratch"
  echo "$status" >"$art/$t.status"
}

if [[ $STEPS == *fuzz* ]]; then
  start=$(date +%s)
  art="$SAN_BUILD_DIR/artifacts"
  rm -rf "$art" && mkdir -p "$art"
  # Each fuzzer is one process on one core: run as many at a time as there are cores.
  running=0
  for t in "${targets[@]}"; do
    if (( running >= jobs )); then wait -n || true; running=$((running - 1)); fi
    echo "fuzz_$t: ${FUZZ_SECONDS} s"
    fuzz_one "$t" "$art" &
    running=$((running + 1))
  done
  wait
  failed=0
  for t in "${targets[@]}"; do
    log="$art/$t.log"
    if [[ $t == calib_h5 || $t == capture_h5 ]]; then
      echo "fuzz_$t: $(grep -E '^#[0-9]+: cov' "$log" | tail -1 || true);" \
           "reports inside libhdf5 (not ours, kept going): $(grep -c 'ERROR: AddressSanitizer' "$log" || true)"
    else
      echo "fuzz_$t: $(grep -E '^stat::number_of_executed_units|SUMMARY' "$log" | tr '\n' ' ' || true)"
    fi
    if [[ $(cat "$art/$t.status" 2>/dev/null || echo missing) != 0 ]]; then
      echo "fuzz_$t failed; report in $log, input in $art"
      failed=1
    fi
  done
  echo "sanitize: fuzz targets: $(( $(date +%s) - start )) s"
  exit "$failed"
fi
