#!/usr/bin/env bash
# mla-convert into a filesystem that is too small, and into one that runs out of inodes
# part-way (enough bytes, so the up-front space check passes and a file creation fails
# mid-conversion): exit 1, a message naming the output / file and the need, nothing left
# behind. Needs unprivileged user + mount namespaces for a private tmpfs; exit 77 (CTest:
# skipped) where the machine forbids them.
set -u
CONVERT=$1 CKPT=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK/mnt" || exit 1
unshare -r -m true 2>/dev/null || { echo "SKIP: unshare -r -m not permitted here"; exit 77; }
exec unshare -r -m bash -s "$CONVERT" "$CKPT" "$WORK" <<'EOS'
set -u
CONVERT=$1 CKPT=$2 WORK=$3 M=$WORK/mnt
fail() { echo "FAIL: $*"; cat "$LOG"; ls -la "$M"; exit 1; }
mount -t tmpfs -o size=1m tmpfs "$M" || { echo "SKIP: cannot mount tmpfs"; exit 77; }

LOG=$WORK/too_small.log
"$CONVERT" --tp 2 -o "$M/out" "$CKPT" >"$LOG" 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "too small: exit $rc, expected 1"
grep -q "needs .* of disk space" "$LOG" || fail "too small: no message with the need"
grep -q "$M/out" "$LOG" || fail "too small: the output is not named"
[ -z "$(ls -A "$M")" ] || fail "too small: left behind"
umount "$M"

mount -t tmpfs -o size=256m,nr_inodes=6 tmpfs "$M" || { echo "SKIP: cannot mount tmpfs"; exit 77; }
LOG=$WORK/no_inodes.log
"$CONVERT" --tp 2 -o "$M/out" "$CKPT" >"$LOG" 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "out of inodes: exit $rc, expected 1"
grep -q "No space left on device" "$LOG" || fail "out of inodes: no ENOSPC message"
grep -q "$M/" "$LOG" || fail "out of inodes: the file is not named"
[ -z "$(ls -A "$M")" ] || fail "out of inodes: left behind"
echo "disk-full cases passed"
EOS
