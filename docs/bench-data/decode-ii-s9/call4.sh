#!/usr/bin/env bash
# session 9 call 4: the record of every decode suite (BF16 issue 10, FP8 issue 11, 4-bit issue 12)
# from HBM and with --l2-resident (the kernels' floors without HBM), beside FlashMLA.
set -uo pipefail
T0=$(date +%s)
SUITES="bf16 fp8 kv4" MODES="hbm l2" OUT=$OUT bash tools/mla-bench/run_peers_device.sh 2>&1 | tee $OUT/record.txt
echo "total $(( $(date +%s) - T0 )) s"
