#!/usr/bin/env bash
# Session 10, call 10 (nvidia-h200-x4): does DecodeGpu.EveryDeviceRunsTheLargeSharedMemoryPaths
# fail when the shared-memory limit is raised once per process (the old behaviour, patched in a
# copy) and pass with the tree? Then mla-bench --tp 4 --mode tpla-g2 once (the new parse).
set -uo pipefail
nvidia-smi -L
export NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
rm -rf /tmp/broken && mkdir -p /tmp/broken && tar --exclude=./.git --exclude='./build*' -cf - . | tar -C /tmp/broken -xf -
(cd /tmp/broken && patch -s -p1 < .carry/broken-smem.patch)  # = call10-broken-smem.patch here || { echo "patch failed"; exit 1; }
for t in tree broken; do src=$PWD; [ $t = broken ] && src=/tmp/broken
  cmake -S $src -B /tmp/b-$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLA_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a > /tmp/cfg-$t.log 2>&1 || exit 1
done
(cmake --build /tmp/b-tree -j32 --target test_kernels_decode_gpu mla-bench > /tmp/b-tree.log 2>&1 || echo "tree build failed") &
(cmake --build /tmp/b-broken -j32 --target test_kernels_decode_gpu > /tmp/b-broken.log 2>&1 || echo "broken build failed") &
wait
for t in broken tree; do
  echo "== $t"
  timeout 120 /tmp/b-$t/tests/kernels/test_kernels_decode_gpu --gtest_filter='DecodeGpu.EveryDevice*:DecodeGpu.ManyHeadsTwoRowBlocks' 2>&1 |
    grep -E "^\[  (FAILED|PASSED|  OK) |^\[       OK|invalid argument|Failure" | head -8
done
timeout 120 /tmp/b-tree/tools/mla-bench/mla-bench --tp 4 --mode head-parallel --mode tpla-g2 --batch 128 --seqlens 8192 --runs 5 2>&1 | grep -E "^(mla-bench|head|tpla|GPU 0)"
