#!/usr/bin/env bash
# CTest (label unit, CUDA builds): the register budget the kernels' setmaxnreg divisions are checked
# against (kernels/setmaxnreg.cuh) is what ptxas allocates: for probe kernels of 384, 512, 640 and
# 768 threads ptxas must report 168, 128, 96 and 80 registers (launch_regs' values, asserted in the
# probe), and a division that asks for more than the launch allocates must not compile. A new nvcc
# that allocates otherwise fails this test instead of hanging a kernel in its setmaxnreg.inc.
# Usage: check.sh NVCC REPO_ROOT
set -uo pipefail
nvcc=$1 root=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/mla-setmaxnreg-check.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
compile() {
  "$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I"$root" -Xptxas -v "$@" \
    -c "$root/tests/kernels/setmaxnreg/probe.cu" -o "$dir/probe.o"
}
compile > "$dir/ok.log" 2>&1 || { echo "FAIL: the probe did not compile:"; cat "$dir/ok.log"; exit 1; }
for pair in 384:168 512:128 640:96 768:80; do
  threads=${pair%%:*} want=${pair##*:}
  # ptxas -v: "Compiling entry function '..setmaxnreg_probeILi<threads>E..'" then "... Used N registers"
  got=$(awk -v t="ILi${threads}E" '
    /Compiling entry function/ { hit = index($0, t) > 0 }
    hit && /Used [0-9]+ registers/ { match($0, /Used [0-9]+ registers/); print substr($0, RSTART + 5, RLENGTH - 15); hit = 0 }
  ' "$dir/ok.log")
  [ "$got" = "$want" ] ||
    { echo "FAIL: $threads threads: ptxas allocates '$got' registers a thread, launch_regs says $want"; cat "$dir/ok.log"; exit 1; }
done
if compile -DMLA_PROBE_OVERDRAW > "$dir/overdraw.log" 2>&1; then
  echo "FAIL: a division asking for more registers than the launch allocates compiled"; exit 1
fi
grep -q "setmaxnreg asks for more registers than the launch allocates" "$dir/overdraw.log" ||
  { echo "FAIL: the over-budget probe failed for another reason:"; cat "$dir/overdraw.log"; exit 1; }
echo "ok: ptxas allocates what launch_regs says at 384-768 threads, and an overdrawn division is refused"
