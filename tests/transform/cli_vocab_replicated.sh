#!/usr/bin/env bash
# mla-convert on the shipped trained tiny-v3 (vocab_size 260): at tp 4 the vocabulary is split
# (65 rows of embed_tokens / lm_head per rank); at tp 8 it cannot be, so both are replicated on
# every rank with a warning, and each rank's config keeps vocab_size 260 with
# tpla.vocab_parallel = false (docs/sharding.md). Before, tp 8 was refused outright.
set -u
CONVERT=$1 CKPT=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
check() {  # tp expected_rows expected_vocab_parallel
  local tp=$1 rows=$2 vp=$3 out=$WORK/tp$1
  "$CONVERT" --tp "$tp" -o "$out" "$CKPT" > "$WORK/tp$tp.log" 2>&1 || { cat "$WORK/tp$tp.log"; fail "tp $tp: exit $?"; }
  if [ "$vp" = false ]; then
    grep -q "vocab_size 260 is not divisible by tp $tp" "$WORK/tp$tp.log" || fail "tp $tp: no replication warning"
  fi
  python3 - "$out" "$tp" "$rows" "$vp" <<'PY' || fail "tp $tp: rank outputs"
import glob, json, sys
from safetensors import safe_open
out, tp, rows, vp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "true"
ranks = sorted(glob.glob(out + "/rank-*"))
assert len(ranks) == tp, ranks
for d in ranks:
    c = json.load(open(d + "/config.json"))
    assert c["tpla"]["vocab_parallel"] == vp, (d, c["tpla"]["vocab_parallel"])
    assert c["vocab_size"] == (260 if not vp else 260 // tp), (d, c["vocab_size"])
    seen = set()
    for f in glob.glob(d + "/*.safetensors"):
        with safe_open(f, "np") as s:
            for k in s.keys():
                if k in ("lm_head.weight", "model.embed_tokens.weight"):
                    assert s.get_slice(k).get_shape()[0] == rows, (d, k, s.get_slice(k).get_shape())
                    seen.add(k)
    assert seen == {"lm_head.weight", "model.embed_tokens.weight"}, (d, seen)
print(f"tp {tp}: {len(ranks)} ranks, embed_tokens/lm_head rows {rows}, vocab_parallel {vp}")
PY
}
check 4 65 true
check 8 260 false
rm -rf "$WORK"
