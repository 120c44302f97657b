#!/usr/bin/env python3
"""Captures MLA attention inputs (and reference outputs) of a transformers model into HDF5.

Works for any transformers MLA model whose decoder layers have `input_layernorm` and
`self_attn` (DeepSeek-V2 / V2-Lite / V3 / R1, Kimi-K2 through their transformers classes, and
the tiny models in datasets/tiny-v*). Writes the schema of docs/formats/capture.md
("mla-capture/1"):

  root attrs: schema, model_type, num_layers, hidden_size, source, corpus_sha256,
              checkpoint_files_sha256 (checkpoint_fingerprint is left to the C++ writer)
  /calib, /eval:  tokens int32 [S, T]; layer_{i:02d}/hidden float32 [S, T, D]
                  (attention input after input_layernorm; one sequence per chunk)
  /reference:     tokens int32 [R, T]; layer_{i:02d}/hidden and layer_{i:02d}/attn_out
                  float32 [R, T, D]; logits float32 [R, T, V]

Sequences are streamed: one batch of sequences goes through the model, its activations are
written, and nothing else is kept, so the capture can be much larger than memory.

Token sources: a byte file (byte-level models such as the tiny ones: token = byte value),
or a UTF-8 text file tokenised by the checkpoint's own tokenizer (--tokenizer auto; real
checkpoints). Sequence i of a group is tokens [i*T, (i+1)*T) of its source (non-overlapping
windows from the start), each run from position 0.

The model runs in float32 with eager attention and TF32 off, so the reference outputs are
float32-accurate (the C++ float64 forward is compared against them with rel. L2 <= 1e-4).

Example (tiny model, small capture):
  python3 datasets/capture_activations.py --model datasets/tiny-v3 --out /tmp/cap.h5 \
      --calib datasets/corpus/calib.bin --calib-seqs 4 --eval datasets/corpus/heldout.bin \
      --eval-seqs 2 --seq-len 128 --ref-seqs 2 --ref-len 64
Real checkpoint (DeepSeek-V2-Lite; needs memory for the model in float32):
  python3 datasets/capture_activations.py --model /path/DeepSeek-V2-Lite --tokenizer auto \
      --calib calib.txt --calib-seqs 64 --seq-len 1024 --out v2lite.h5 --device cuda
"""
import argparse
import hashlib
import os
import sys
import tempfile

import h5py
import numpy as np

SCHEMA = "mla-capture/1"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint_fingerprint(model_dir):
    """SHA-256 over "<name>\\n<sha256 hex>\\n" of every *.safetensors file, in sorted order."""
    names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    h = hashlib.sha256()
    for n in names:
        h.update(f"{n}\n{sha256_file(os.path.join(model_dir, n))}\n".encode())
    return h.hexdigest()


def load_tokens(path, mode, tokenizer):
    if mode == "bytes":
        with open(path, "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
    with open(path, "r", encoding="utf-8") as f:
        return np.asarray(tokenizer(f.read(), add_special_tokens=False)["input_ids"], dtype=np.int64)


def windows(tokens, count, length, source):
    need = count * length
    if need > tokens.size:
        raise SystemExit(f"capture: {source} has {tokens.size} tokens, {count} x {length} = {need} needed")
    return tokens[:need].reshape(count, length)


class LayerTaps:
    """Forward hooks on every decoder layer: input_layernorm output and self_attn output."""

    def __init__(self, layers, want_attn_out):
        self.hidden = [None] * len(layers)
        self.attn_out = [None] * len(layers)
        self.handles = []
        for i, layer in enumerate(layers):
            self.handles.append(layer.input_layernorm.register_forward_hook(self._store(self.hidden, i)))
            if want_attn_out:
                self.handles.append(layer.self_attn.register_forward_hook(self._store(self.attn_out, i)))

    @staticmethod
    def _store(slot, i):
        def hook(_module, _inputs, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            slot[i] = out.detach().float().cpu().numpy()
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def decoder_layers(model):
    base = getattr(model, "model", model)
    if not hasattr(base, "layers"):
        raise SystemExit("capture: model has no .model.layers (not a decoder-only transformers model)")
    return base.layers


def bf16_h5_type():
    """The self-describing HDF5 bfloat16 type of docs/formats/capture.md (sign 15, exponent 7..14
    with bias 127, mantissa 0..6, little-endian), as mla-calibrate writes it."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_offset(0)
    t.set_precision(16)
    t.set_size(2)
    t.set_ebias(127)
    return t


def to_bf16_bits(x):
    """float32 array -> bfloat16 bits (round to nearest even; values are finite)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


class Bf16Dataset:
    """[S, T, D] bfloat16 dataset chunked one sequence a chunk; `ds[s0:s1] = float32 array`."""

    def __init__(self, grp, name, shape):
        self.type = bf16_h5_type()
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((1,) + tuple(shape[1:]))
        parent, leaf = name.rsplit("/", 1)
        g = grp.require_group(parent)
        self.id = h5py.h5d.create(g.id, leaf.encode(), self.type, h5py.h5s.create_simple(tuple(shape)), dcpl=dcpl)
        self.shape = shape

    def __setitem__(self, sl, value):
        bits = to_bf16_bits(value)
        fs = self.id.get_space()
        fs.select_hyperslab((sl.start, 0, 0), bits.shape)
        self.id.write(h5py.h5s.create_simple(bits.shape), fs, bits, mtype=self.type)


def capture_group(torch, model, grp, toks, batch, device, reference, bf16=False):
    layers = decoder_layers(model)
    S, T = toks.shape
    D = model.config.hidden_size
    grp.create_dataset("tokens", data=toks.astype(np.int32))
    # BF16 storage (--capture-dtype bf16) for /calib and /eval; /reference stays float32.
    if bf16 and not reference:
        hid = [Bf16Dataset(grp, f"layer_{i:02d}/hidden", (S, T, D)) for i in range(len(layers))]
    else:
        hid = [grp.create_dataset(f"layer_{i:02d}/hidden", shape=(S, T, D), dtype="f4", chunks=(1, T, D))
               for i in range(len(layers))]
    att = [grp.create_dataset(f"layer_{i:02d}/attn_out", shape=(S, T, D), dtype="f4", chunks=(1, T, D))
           for i in range(len(layers))] if reference else []
    logits_ds = None
    if reference:
        V = model.config.vocab_size
        logits_ds = grp.create_dataset("logits", shape=(S, T, V), dtype="f4", chunks=(1, T, V))
    taps = LayerTaps(layers, reference)
    try:
        for s0 in range(0, S, batch):
            ids = torch.from_numpy(toks[s0:s0 + batch]).to(device)
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=False)
            n = ids.shape[0]
            for i in range(len(layers)):
                hid[i][s0:s0 + n] = taps.hidden[i]
                if reference:
                    att[i][s0:s0 + n] = taps.attn_out[i]
            if reference:
                logits_ds[s0:s0 + n] = out.logits.float().cpu().numpy()
    finally:
        taps.close()


def load_model(model_dir, device):
    import torch
    from transformers import AutoModelForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    return torch, model.to(device).eval()


def write_capture(model_dir, out_path, groups, device="cpu", batch=4, source=None, torch_model=None, bf16=False):
    """groups: list of (name, tokens [S, T] int64, source_path, reference: bool)."""
    torch, model = torch_model if torch_model else load_model(model_dir, device)
    cfg = model.config
    out_dir = os.path.dirname(os.path.abspath(out_path))
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".capture.", suffix=".h5.tmp")
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["schema"] = SCHEMA
            f.attrs["model_type"] = cfg.model_type
            f.attrs["num_layers"] = np.int64(len(decoder_layers(model)))
            f.attrs["hidden_size"] = np.int64(cfg.hidden_size)
            f.attrs["source"] = source or (
                f"datasets/capture_activations.py, transformers {__import__('transformers').__version__}, "
                f"torch {torch.__version__}, float32 eager on {device}")
            srcs = []
            for _, _, p, _ in groups:
                if p not in srcs:
                    srcs.append(p)
            # One digest for all token sources, in first-use order (each group also names its own).
            h = hashlib.sha256()
            for p in srcs:
                h.update(bytes.fromhex(sha256_file(p)))
            f.attrs["corpus_sha256"] = sha256_file(srcs[0]) if len(srcs) == 1 else h.hexdigest()
            # Not `checkpoint_fingerprint`: that one is the C++ io::fingerprint (attention config +
            # tensors), which the C++ capture writes; this is a plain digest of the weight files.
            f.attrs["checkpoint_files_sha256"] = checkpoint_fingerprint(model_dir)
            for name, toks, path, reference in groups:
                g = f.create_group(name)
                g.attrs["source_file"] = os.path.basename(path)
                g.attrs["source_sha256"] = sha256_file(path)
                capture_group(torch, model, g, toks, batch, device, reference, bf16=bf16)
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF checkpoint directory")
    ap.add_argument("--out", required=True, help="output .h5 (written to a temp file, then renamed)")
    ap.add_argument("--tokenizer", choices=["bytes", "auto"], default="bytes",
                    help="bytes: token = byte value (tiny models); auto: the checkpoint's tokenizer")
    ap.add_argument("--calib", help="token source of /calib")
    ap.add_argument("--calib-seqs", type=int, default=0)
    ap.add_argument("--eval", help="token source of /eval and /reference")
    ap.add_argument("--eval-seqs", type=int, default=0)
    ap.add_argument("--seq-len", type=int, default=256, help="T of /calib and /eval")
    ap.add_argument("--ref-seqs", type=int, default=0, help="R of /reference (taken from --eval)")
    ap.add_argument("--ref-len", type=int, default=64, help="T of /reference")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--capture-dtype", choices=["f32", "bf16"], default="f32",
                    help="storage of /calib and /eval hidden (bf16: the HDF5 bfloat16 type of "
                         "docs/formats/capture.md, half the bytes; /reference stays float32)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    tokenizer = None
    if args.tokenizer == "auto":
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(args.model)
    groups = []
    if args.calib_seqs > 0:
        if not args.calib:
            raise SystemExit("capture: --calib-seqs needs --calib")
        groups.append(("calib", windows(load_tokens(args.calib, args.tokenizer, tokenizer), args.calib_seqs,
                                        args.seq_len, args.calib), args.calib, False))
    if args.eval_seqs > 0 or args.ref_seqs > 0:
        if not args.eval:
            raise SystemExit("capture: --eval-seqs / --ref-seqs need --eval")
        ev = load_tokens(args.eval, args.tokenizer, tokenizer)
        if args.eval_seqs > 0:
            groups.append(("eval", windows(ev, args.eval_seqs, args.seq_len, args.eval), args.eval, False))
        if args.ref_seqs > 0:
            groups.append(("reference", windows(ev, args.ref_seqs, args.ref_len, args.eval), args.eval, True))
    if not groups:
        raise SystemExit("capture: nothing to capture (set --calib-seqs, --eval-seqs or --ref-seqs)")
    write_capture(args.model, args.out, groups, device=args.device, batch=args.batch,
                  bf16=args.capture_dtype == "bf16")
    print(f"capture: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
