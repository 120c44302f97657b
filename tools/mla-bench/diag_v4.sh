# Diagnostic device call for the experimental v4 path (docs/gpu-notes.md, v4).
set -u
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/build.log 2>&1 && cmake --build /tmp/b -j16 --target test_kernels_decode_gpu mla-bench >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
T=/tmp/b/tests/kernels/test_kernels_decode_gpu
timeout 200 $T > $OUT/gpu_test.log 2>&1; echo "default gpu test rc=$?"; grep -E "^\[  (PASSED|FAILED) " $OUT/gpu_test.log | tail -5
for rep in 1 2; do
timeout 90 $T --gtest_also_run_disabled_tests --gtest_filter='*WgmmaWithoutPdl*:*WgmmaSmallFailing*' > $OUT/v4_tests_$rep.log 2>&1; echo "v4 tests rc=$?"; grep -E "^\[.*(vs f64|OK|FAILED)" $OUT/v4_tests_$rep.log | cut -c1-200
done
B=/tmp/b/tools/mla-bench/mla-bench
for v in 9 8 7; do timeout 60 $B --batch 128 --heads 128 --dc 512 --dr 64 --seqlen 8192 --page 64 --variant $v 2>&1 | grep -E "^decode|ceilings"; done
