#!/usr/bin/env bash
# Session 10, call 6 (nvidia-h200-x4, came as 4 H200s, warm after call 5): issue 17's verify-decode
# runs (tp=4, g=4 and g=2, exact and approx norm, DCP over 4 GPUs) and a third mla-bench --tp 4.
mkdir -p /tmp/o && OUT=/tmp/o/tp4 TP=4 LGROUPS="4 2" bash tools/mla-bench/run_tp_device.sh > /tmp/o/console-tp4.txt 2>&1
grep -E "^==|PASS|FAIL|rc=|ranks on|DCP, tokens|build:|GPUs:" /tmp/o/console-tp4.txt; tar czf $OUT/tp-s10-call6.tgz -C /tmp/o .
