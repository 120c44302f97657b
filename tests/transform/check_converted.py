"""CLI round trip of mla-convert, checked with the Python `safetensors` package.

Makes a tiny FP8 synthetic checkpoint (mla-synth), converts it at tp=2 (g=2, Hadamard,
--absorb) and checks, independently of our C++ reader: every rank file parses with the
reference `safetensors.deserialize`, the BF16 tensors decode (via numpy bit shifts) to finite
values, shapes follow the rank's own config.json, the `tpla` section is there, and every
SHA-256 in manifest.json matches the file. Also: --dry-run writes nothing, a bad option exits 1.
Usage: check_converted.py MLA_SYNTH MLA_CONVERT SCRATCH_DIR
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from safetensors import deserialize

synth, convert, scratch = sys.argv[1:4]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
inp, out = os.path.join(scratch, "in"), os.path.join(scratch, "out")
subprocess.run([synth, inp, "--preset", "tiny-v3", "--experts", "-1", "--seed", "2", "-q"], check=True)
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


dry = subprocess.run([convert, inp, "-o", out, "--tp", "2", "--dry-run"], capture_output=True, text=True)
check(dry.returncode == 0 and "KV cache" in dry.stdout, f"dry run: rc {dry.returncode} {dry.stdout}")
check(not os.path.exists(out), "dry run wrote the output")
bad = subprocess.run([convert, inp, "-o", out, "--tp", "2", "--reparam", "pca"], capture_output=True, text=True)
check(bad.returncode == 1 and "calib" in bad.stderr, f"pca without calib: rc {bad.returncode} {bad.stderr}")
check(not os.path.exists(out), "failed run left an output")

subprocess.run([convert, inp, "-o", out, "--tp", "2", "--reparam", "hadamard", "--seed", "9", "--absorb", "-q"],
               check=True)
manifest = json.load(open(os.path.join(out, "manifest.json")))
for rel, digest in manifest["outputs"].items():
    with open(os.path.join(out, rel), "rb") as f:
        check(hashlib.sha256(f.read()).hexdigest() == digest, f"sha256 of {rel}")
src_cfg = json.load(open(os.path.join(inp, "config.json")))
for r in range(2):
    rd = os.path.join(out, f"rank-{r:02d}-of-02")
    cfg = json.load(open(os.path.join(rd, "config.json")))
    t = cfg["tpla"]
    check(t["rank"] == r and t["tp"] == 2 and t["g"] == 2, f"rank {r}: tpla {t}")
    check(t["latent_slice"] == [r * src_cfg["kv_lora_rank"] // 2, (r + 1) * src_cfg["kv_lora_rank"] // 2],
          f"rank {r}: latent slice {t['latent_slice']}")
    with open(os.path.join(rd, "model.safetensors"), "rb") as f:
        tensors = dict(deserialize(f.read()))
    H, dc = cfg["num_attention_heads"], cfg["kv_lora_rank"]
    dn, dv, dr = cfg["qk_nope_head_dim"], cfg["v_head_dim"], cfg["qk_rope_head_dim"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}.self_attn."
        check(list(tensors[p + "kv_b_proj.weight"]["shape"]) == [H * (dn + dv), dc], f"rank {r} layer {i} kv_b shape")
        check(list(tensors[p + "kv_a_proj_with_mqa.weight"]["shape"]) == [dc + dr, cfg["hidden_size"]],
              f"rank {r} layer {i} kv_a shape")
        check(list(tensors[p + "absorbed_w_uk"]["shape"]) == [H, dn, dc], f"rank {r} layer {i} w_uk shape")
    for name, info in tensors.items():
        if info["dtype"] == "BF16":
            bits = np.frombuffer(bytes(info["data"]), dtype="<u2").astype(np.uint32) << 16
            vals = bits.view(np.float32)
            check(bool(np.all(np.isfinite(vals))), f"rank {r}: {name} has non-finite values")
        check(info["dtype"] in ("BF16", "F32"), f"rank {r}: {name} dtype {info['dtype']}")
print("checked", len(manifest["outputs"]), "output files;", "FAILED" if failures else "ok")
sys.exit(1 if failures else 0)
