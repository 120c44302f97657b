"""Independent FP8 block dequantisation of the shipped tiny-v3 checkpoint (numpy, own
safetensors header parsing and E4M3 decoding), printing the figures that
test_checkpoint.cpp (PythonCrossCheck) compares against. Run from the repository root:
    python3 tests/io/python_dequant_reference.py
"""
import json
import struct

import numpy as np

D = "datasets/synthetic/tiny-v3"
WEIGHT_MAP = json.load(open(f"{D}/model.safetensors.index.json"))["weight_map"]


def load(name):
    with open(f"{D}/{WEIGHT_MAP[name]}", "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    e = json.loads(b[8:8 + n])[name]
    s, t = e["data_offsets"]
    return e["dtype"], e["shape"], b[8 + n + s:8 + n + t]


def e4m3(codes):
    c = codes.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 0xF, c & 7
    return sign * np.where(e == 0, m * 2.0**-9, (8 + m) * 2.0 ** (e - 10))


for name in ["model.layers.1.self_attn.kv_a_proj_with_mqa.weight", "model.layers.0.self_attn.kv_b_proj.weight"]:
    _, shape, raw = load(name)
    q = np.frombuffer(raw, np.uint8).reshape(shape)
    _, sshape, sraw = load(name + "_scale_inv")
    s = np.frombuffer(sraw, "<f4").reshape(sshape).astype(np.float64)
    w = e4m3(q) * np.repeat(np.repeat(s, 128, 0), 128, 1)[: shape[0], : shape[1]]
    r, c = shape[0] - 1, shape[1] - 1
    print(name, shape, repr(w.sum()), repr((w * w).sum()), repr(w[r, c]), repr(w[130 % shape[0], 7]))
