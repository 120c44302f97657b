#!/usr/bin/env bash
# mla-convert under low address-space limits (ulimit -v), each hitting a different step on the
# shipped tiny model (mapping the input, starting threads, converting a tensor; several limits
# around each step, since which allocation fails first varies run to run): exit 1 with
# a message that says out of memory / cannot map and names what it was doing and the limit or
# the need, nothing left behind. Not under AddressSanitizer (its shadow memory needs terabytes
# of address space).
set -u
CONVERT=$1 CKPT=$2 WORK=$3
LIMITS_KB=${4:-"30000 50000 55000 60000 65000 70000 75000 80000 85000"}
checked=0
for kb in $LIMITS_KB; do
  rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
  LOG=$WORK/../low_memory_$kb.log
  ( ulimit -v "$kb"; exec "$CONVERT" --tp 2 --threads 2 -o "$WORK/out" "$CKPT" ) >"$LOG" 2>&1; rc=$?
  fail() { echo "FAIL at ulimit -v $kb: $*"; cat "$LOG"; ls -la "$WORK"; exit 1; }
  if [ "$rc" -eq 0 ]; then echo "ulimit -v $kb: enough memory here, nothing to check"; continue; fi
  # Below the address space the program's own shared libraries need (how much depends on the
  # distribution: Ubuntu 24.04's OpenSSL pulls in p11-kit), the dynamic loader fails before
  # main: not ours to handle, and nothing was written.
  if [ "$rc" -eq 127 ] && grep -q "error while loading shared libraries" "$LOG"; then
    [ -z "$(ls -A "$WORK")" ] || fail "left behind"
    echo "ulimit -v $kb: below what the loader needs here, nothing to check"; continue
  fi
  [ "$rc" -eq 1 ] || fail "exit $rc, expected 1 (a clean error, not a crash)"
  grep -Eq "out of memory|Cannot allocate memory" "$LOG" || fail "no out-of-memory message"
  grep -Eq "ulimit -v|[0-9] bytes|MiB|GiB" "$LOG" || fail "neither the need nor the limit is given"
  [ -z "$(ls -A "$WORK")" ] || fail "left behind"
  echo "ulimit -v $kb: $(grep -Eo 'error .{0,120}' "$LOG" | head -1)"
  checked=$((checked + 1))
done
# A run where no limit reached the program's own error handling checked nothing.
[ "$checked" -gt 0 ] || { echo "FAIL: no limit in '$LIMITS_KB' produced an out-of-memory error to check"; exit 1; }
echo "low-memory cases passed ($checked limits checked)"
