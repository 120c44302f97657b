#!/usr/bin/env bash
# A checkpoint whose config is as transformers 5.x saves DeepseekV3Config, whose
# num_key_value_heads keeps the class default 128 whatever num_attention_heads is. MLA does not
# use the key: mla-inspect and mla-convert warn and go on, and each rank's config gets its own
# head count there.
set -u
INSPECT=$1 CONVERT=$2 SRC=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK/ckpt" || exit 1
for f in "$SRC"/*; do ln -s "$(realpath "$f")" "$WORK/ckpt/"; done
rm "$WORK/ckpt/config.json"
python3 - "$SRC/config.json" "$WORK/ckpt/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_key_value_heads"] = 128
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
fail() { echo "FAIL: $*"; cat "$WORK"/*.log; exit 1; }
"$INSPECT" "$WORK/ckpt" >"$WORK/inspect.log" 2>&1 || fail "mla-inspect refused it"
grep -q "num_key_value_heads.*not used by MLA" "$WORK/inspect.log" || fail "no warning from mla-inspect"
"$CONVERT" --tp 2 -o "$WORK/out" "$WORK/ckpt" >"$WORK/convert.log" 2>&1 || fail "mla-convert refused it"
grep -q "num_key_value_heads.*not used by MLA" "$WORK/convert.log" || fail "no warning from mla-convert"
python3 - "$WORK/out" <<'PY' || fail "rank config"
import json, pathlib, sys
for cfg in sorted(pathlib.Path(sys.argv[1]).glob("rank-*/config.json")):
    c = json.load(open(cfg))
    assert c["num_key_value_heads"] == c["num_attention_heads"], (cfg, c["num_key_value_heads"])
print("rank configs: num_key_value_heads = the rank's head count")
PY
echo "passed"
