#!/usr/bin/env bash
# The sanitizer part of CI (called by scripts/test.sh; docs/fuzzing.md):
#  1. builds everything with AddressSanitizer + UndefinedBehaviorSanitizer (gcc, -O1) and runs
#     the unit tests once (label unit, not gpu);
#  2. builds the libFuzzer targets (clang) and runs each for FUZZ_SECONDS (default 30) on a
#     scratch copy of its seed corpus (tests/fuzz/corpus/<target>, datasets/malformed for the
#     safetensors header). A crash, a sanitizer report or a leak-free abort fails CI; the
#     crashing input is kept under $FUZZ_BUILD_DIR/artifacts.
# MLA_SANITIZE_STEPS=units,fuzz selects the steps (default both).
set -euo pipefail
cd "$(dirname "$0")/.."
SAN_BUILD_DIR=${SAN_BUILD_DIR:-build-asan}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
STEPS=${MLA_SANITIZE_STEPS:-units,fuzz}
jobs=$(nproc)
# HDF5 and OpenBLAS keep global allocations until exit: leak reports there are not ours.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [[ $STEPS == *units* ]]; then
  start=$(date +%s)
  cmake -S . -B "$SAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
        -DMLA_ENABLE_CUDA=OFF -DMLA_SANITIZE=ON >/dev/null
  cmake --build "$SAN_BUILD_DIR" -j "$jobs"
  ctest --test-dir "$SAN_BUILD_DIR" -L unit -LE gpu --output-on-failure -j "$jobs"
  echo "sanitize: unit tests under ASan+UBSan: $(( $(date +%s) - start )) s"
fi

if [[ $STEPS == *fuzz* ]]; then
  start=$(date +%s)
  cmake -S . -B "$FUZZ_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
        -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DMLA_ENABLE_CUDA=OFF \
        -DMLA_BUILD_FUZZERS=ON -DMLA_SANITIZE=ON >/dev/null
  targets=(safetensors_header config_json safetensors_index calib_h5 capture_h5 calib_h5_recipe capture_h5_recipe)
  cmake --build "$FUZZ_BUILD_DIR" -j "$jobs" --target "${targets[@]/#/fuzz_}"
  mkdir -p "$FUZZ_BUILD_DIR/artifacts"
  for t in "${targets[@]}"; do
    seeds=tests/fuzz/corpus/$t
    [[ $t == safetensors_header ]] && seeds=datasets/malformed
    scratch=$(mktemp -d)
    cp "$seeds"/* "$scratch"/
    dict=()
    [[ $t == safetensors_header ]] && dict=(-dict=tests/fuzz/safetensors.dict)
    echo "fuzz_$t: ${FUZZ_SECONDS} s on $(ls "$scratch" | wc -l) seeds"
    log="$FUZZ_BUILD_DIR/artifacts/$t.log"
    if [[ $t == *_h5 ]]; then
      # The HDF5 C library (Debian's 1.10.8) itself crashes and hangs on some damaged files
      # (docs/fuzzing.md): keep fuzzing past those, and fail only on a report whose first
      # frames are not inside libhdf5, i.e. a fault in our code.
      "$FUZZ_BUILD_DIR/tests/fuzz/fuzz_$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -timeout=5 \
          -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -artifact_prefix="$FUZZ_BUILD_DIR/artifacts/$t-" \
          "$scratch" >"$log" 2>&1 || true
      status=0
      awk '/ERROR: AddressSanitizer|ERROR: UndefinedBehaviorSanitizer|runtime error:/ {inrep = 1; n = 0; hdf = 0; next}
           inrep && /^ *#[0-9]+ / {n++; if ($0 ~ /libhdf5/) hdf = 1; if (n == 4) {if (!hdf) bad = 1; inrep = 0}}
           END {exit bad}' "$log" || status=1
      grep -E '^#[0-9]+: cov' "$log" | tail -1 || true
      echo "  reports inside libhdf5 (not ours, kept going): $(grep -c 'ERROR: AddressSanitizer' "$log" || true)"
    else
      "$FUZZ_BUILD_DIR/tests/fuzz/fuzz_$t" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -print_final_stats=1 \
          "${dict[@]}" -artifact_prefix="$FUZZ_BUILD_DIR/artifacts/$t-" "$scratch" >"$log" 2>&1 && status=0 || status=$?
      grep -E '^stat::number_of_executed_units|SUMMARY' "$log" || true
    fi
    rm -rf "$scratch"
    if [[ $status -ne 0 ]]; then echo "fuzz_$t failed; report in $log, input in $FUZZ_BUILD_DIR/artifacts"; exit 1; fi
  done
  echo "sanitize: fuzz targets: $(( $(date +%s) - start )) s"
fi
