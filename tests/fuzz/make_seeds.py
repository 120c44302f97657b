#!/usr/bin/env python3
"""Writes the small seed corpus of the libFuzzer targets (docs/fuzzing.md) into corpus/.

Run from anywhere: python3 tests/fuzz/make_seeds.py. Deterministic (fixed values, no
timestamps in the HDF5 files), so the committed seeds change only when this script does.
The shapes match the fixed model each HDF5 target assumes (fuzz_hdf5_common.hpp):
2 layers, hidden 8, 2 heads, d_c 8, d_r 4, g 2, fingerprint "fuzz".
"""
import json
import pathlib
import shutil

import h5py
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = HERE / "corpus"
L, D, H, DC, DR, G, S, T = 2, 8, 2, 8, 4, 2, 2, 4


def fresh(name):
    """Empties corpus/<name>, keeping the regression_* inputs (found by fuzzing, kept by hand)."""
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    for p in d.iterdir():
        if not p.name.startswith("regression_"):
            p.unlink()
    return d


def h5file(path):
    # track_times=False and a fixed library version range keep the bytes reproducible.
    return h5py.File(path, "w", libver=("earliest", "v110"), track_order=False)


def ds(group, name, data):
    return group.create_dataset(name, data=data, track_times=False)


def config_seeds():
    d = fresh("config_json")
    for f in sorted((ROOT / "tests/io/data").glob("*.config.json")):
        shutil.copy(f, d / f.name)
    for f in ("tiny-v2", "tiny-v3"):
        shutil.copy(ROOT / "datasets" / f / "config.json", d / f"{f}.config.json")


def index_seeds():
    d = fresh("safetensors_index")
    (d / "two_shards.json").write_text(json.dumps({
        "metadata": {"total_size": 1024},
        "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                       "lm_head.weight": "model-00002-of-00002.safetensors"}}))
    (d / "bad_path.json").write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    (d / "empty.json").write_text(json.dumps({"weight_map": {}}))


def calib_seeds():
    d = fresh("calib_h5")
    rng = np.random.default_rng(7)
    for variant in ("mu", "mu_per_head"):
        with h5file(d / f"calib_{variant}.h5") as f:
            f.attrs["schema"] = "mla-calib/1"
            f.attrs["checkpoint_fingerprint"] = "fuzz"
            f.attrs["hadamard_seed"] = np.int64(5065793)
            for layer in range(L):
                lg = f.create_group(f"layer_{layer:02d}")
                q, _ = np.linalg.qr(rng.standard_normal((DC, DC)))
                ds(lg, "pca_basis", q)
                for basis in ("identity", "hadamard", "pca"):
                    b = lg.create_group(f"g{G}/{basis}")
                    ds(b, "energy_fraction", np.array([0.75, 0.25]))
                    if variant == "mu":
                        ds(b, "mu", np.array([1.0, 0.9]))
                    else:
                        ds(b, "mu_per_head", np.full((H, G), 0.95))


def capture_seeds():
    d = fresh("capture_h5")
    rng = np.random.default_rng(11)
    for kind in ("hidden", "latent"):
        with h5file(d / f"capture_{kind}.h5") as f:
            f.attrs["schema"] = "mla-capture/1"
            f.attrs["model_type"] = "deepseek_v3"
            f.attrs["num_layers"] = np.int64(L)
            f.attrs["hidden_size"] = np.int64(D)
            f.attrs["source"] = "make_seeds.py"
            f.attrs["corpus_sha256"] = "0" * 64
            f.attrs["checkpoint_fingerprint"] = "fuzz"
            g = f.create_group("calib")
            ds(g, "tokens", rng.integers(0, 256, (S, T), dtype=np.int32))
            for layer in range(L):
                lg = g.create_group(f"layer_{layer:02d}")
                if kind == "hidden":
                    lg.create_dataset("hidden", data=rng.standard_normal((S, T, D)).astype(np.float32),
                                      chunks=(1, T, D), track_times=False)
                else:
                    lg.create_dataset("latent", data=rng.standard_normal((S, T, DC)).astype(np.float32),
                                      chunks=(1, T, DC), track_times=False)
                    lg.create_dataset("k_pe", data=rng.standard_normal((S, T, DR)).astype(np.float32),
                                      chunks=(1, T, DR), track_times=False)


def recipe_seeds():
    """Seeds of the structure-aware targets (*_recipe): their input is a recipe that
    FuzzedDataProvider decodes, not a file. b"\\0" and zeros decode to a valid file (every
    choice 0); the others are fixed pseudo-random recipes. regression_* inputs (found by
    fuzzing, committed by hand) are kept."""
    rng = np.random.default_rng(15)
    for target in ("calib_h5_recipe", "capture_h5_recipe"):
        d = fresh(target)
        (d / "valid_default").write_bytes(b"\0")
        (d / "valid_zeros_64").write_bytes(bytes(64))
        for i in range(6):
            (d / f"random_{i}").write_bytes(rng.bytes(24 + 24 * i))


if __name__ == "__main__":
    config_seeds()
    index_seeds()
    calib_seeds()
    capture_seeds()
    recipe_seeds()
    for sub in sorted(OUT.iterdir()):
        n = sum(p.stat().st_size for p in sub.iterdir())
        print(f"{sub.name}: {len(list(sub.iterdir()))} files, {n} bytes")
