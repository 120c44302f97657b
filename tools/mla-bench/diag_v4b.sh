# Diagnostic device call 2 for the experimental v4 path: outputs and workspace NaN-poisoned, and
# the v4 cases under variants 8 (as committed), 10 (consumers compute the tile's valid rows),
# 11 (tensor map in global memory + tensormap proxy fence), 12 (10 + 11 without PDL).
set -u
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON > $OUT/build.log 2>&1 && cmake --build /tmp/b -j16 --target test_kernels_decode_gpu >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
T=/tmp/b/tests/kernels/test_kernels_decode_gpu
timeout 200 $T > $OUT/gpu_test.log 2>&1; echo "default gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) " $OUT/gpu_test.log | tail -5
for v in 8 10 11 12; do
  MLA_V4_VARIANT=$v timeout 150 $T --gtest_also_run_disabled_tests --gtest_repeat=3 --gtest_filter='*WgmmaManyHeadPath*' > $OUT/v4_$v.log 2>&1
  echo "=== variant $v rc=$? : $(grep -c '^\[       OK' $OUT/v4_$v.log) OK, $(grep -c '^\[  FAILED  \] DecodeGpu' $OUT/v4_$v.log) FAILED"
  grep -E "rel_l2=[0-9.e+-]+ .*twin|request [0-9]+ \(L" $OUT/v4_$v.log | grep -vE "vs f64: n=[0-9]+ rmse=[^ ]+ cos_diff=[^ ]+ rel_l2=[0-9.]+e-0[3-9]" | cut -c1-160 | head -12
done
