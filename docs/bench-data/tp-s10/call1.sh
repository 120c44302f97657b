#!/usr/bin/env bash
# Session 10, call 1 (nvidia-h200-x4; may come as 4 H100s): tp=2 on GPUs 0,1 and tp=4 on all four,
# with run_tp_device.sh (build once, multi-device tests, verify-decode TPLA g=tp and g=2 / DCP, mla-bench --tp).
set -uo pipefail
R=/tmp/o; mkdir -p $R
nvidia-smi -L; echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-(unset)}"
OUT=$R/tp2 TP=2 CUDA_VISIBLE_DEVICES=0,1 bash tools/mla-bench/run_tp_device.sh 2>&1 | tee $R/console-tp2.txt
OUT=$R/tp4 TP=4 LGROUPS="4 2" bash tools/mla-bench/run_tp_device.sh 2>&1 | tee $R/console-tp4.txt
tar czf "$OUT/tp-s10-call1.tgz" -C $R .
