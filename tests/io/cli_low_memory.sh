#!/usr/bin/env bash
# mla-convert under a low address-space limit (ulimit -v): exit 1 with a message that says
# out of memory / cannot map and names what it was doing and the need, nothing left behind.
# Not under AddressSanitizer (its shadow memory needs terabytes of address space).
set -u
CONVERT=$1 CKPT=$2 WORK=$3 LIMIT_KB=${4:-400000}
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
LOG=$WORK/low_memory.log
( ulimit -v "$LIMIT_KB"; exec "$CONVERT" --tp 2 --threads 2 -o "$WORK/out" "$CKPT" ) >"$LOG" 2>&1; rc=$?
fail() { echo "FAIL: $*"; cat "$LOG"; ls -la "$WORK"; exit 1; }
[ "$rc" -eq 1 ] || fail "exit $rc, expected 1 (a clean error, not a crash)"
grep -Eq "out of memory|Cannot allocate memory" "$LOG" || fail "no out-of-memory message"
grep -Eq "ulimit -v|bytes|MiB|GiB" "$LOG" || fail "the need or the limit is not given"
[ -z "$(ls -A "$WORK" | grep -v low_memory.log)" ] || fail "left behind"
echo "low-memory case passed"
