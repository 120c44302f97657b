#!/usr/bin/env bash
# kv_lora_rank 96 through the tools: mla-synth makes the checkpoint, mla-convert --reparam
# hadamard refuses it naming hadamard-block, --reparam hadamard-block converts it.
set -u
SYNTH=$1 CONVERT=$2 SRC=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
python3 -c "
import json, sys
c = json.load(open('$SRC/datasets/tiny-v3/config.json')); c['kv_lora_rank'] = 96
json.dump(c, open('$WORK/config96.json', 'w'))" || exit 1
fail() { echo "FAIL: $*"; cat "$WORK"/*.log; exit 1; }
"$SYNTH" "$WORK/ckpt" --config "$WORK/config96.json" --layers 2 --dtype bf16 >"$WORK/synth.log" 2>&1 || fail "mla-synth"
"$CONVERT" --tp 2 --reparam hadamard -o "$WORK/out_h" "$WORK/ckpt" >"$WORK/hadamard.log" 2>&1 && fail "hadamard accepted d_c 96"
grep -q "hadamard-block" "$WORK/hadamard.log" || fail "the refusal does not offer hadamard-block"
[ ! -e "$WORK/out_h" ] || fail "refused run left output"
"$CONVERT" --tp 2 --reparam hadamard-block -o "$WORK/out" "$WORK/ckpt" >"$WORK/block.log" 2>&1 || fail "hadamard-block refused"
grep -q '"reparam": "hadamard-block"' "$WORK/out/rank-00-of-02/config.json" || fail "rank config does not record the basis"
echo passed
