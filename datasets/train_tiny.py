#!/usr/bin/env python3
"""Trains the two tiny byte-level MLA models with transformers' own DeepSeek classes.

  tiny-v2: DeepseekV2ForCausalLM, q_lora_rank null, plain RoPE, intermediate 448
  tiny-v3: DeepseekV3ForCausalLM, q_lora_rank 192, YaRN (factor 4, original 128 positions,
           mscale = mscale_all_dim = 1, beta 32/1), intermediate 512
Both: hidden 384, 6 layers, 8 heads, kv_lora_rank 128, qk_rope 32, qk_nope 64, v 64, dense
SwiGLU MLP in every layer (first_k_dense_replace = num layers: no MoE), vocab 260 (bytes
0..255; 256..259 reserved, unused), untied LM head. Both have ~7.4M parameters, so each BF16
model.safetensors is ~14.8 MB.

Training: random windows of 256 bytes from train.bin, batch 128, AdamW (lr 2e-3, betas
0.9/0.95, weight decay 0.1), 100 warm-up steps then cosine to 10% over a fixed WALL-TIME
budget (--seconds per model), bf16 autocast, grad clip 1. Seeded, but the step count depends
on the machine's speed, so re-runs are not bit-identical: the shipped weights are the record.

After training the weights are rounded to BF16 and saved with save_pretrained (safetensors);
held-out bits per byte are then measured WITH THE SAVED BF16 WEIGHTS in float32: the mean
next-byte NLL / ln 2 over non-overlapping 256-byte windows of heldout.bin, each window from
position 0, predicting positions 1..255 (the exact definition `mla-forward perplexity` uses).
Also writes reference.h5 (the /reference group of the capture schema, R=2, T=64) per model.
Prints one JSON summary line per model (and writes <out>/train_summary.json).

Usage: python3 datasets/train_tiny.py --corpus datasets/corpus --out datasets --seconds 150
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture_activations as cap  # noqa: E402

COMMON = dict(vocab_size=260, hidden_size=384, num_hidden_layers=6, num_attention_heads=8,
              num_key_value_heads=8, kv_lora_rank=128, qk_rope_head_dim=32, qk_nope_head_dim=64,
              v_head_dim=64, first_k_dense_replace=6, n_routed_experts=4, n_shared_experts=1,
              moe_intermediate_size=64, num_experts_per_tok=2, max_position_embeddings=512,
              rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=256, eos_token_id=257,
              pad_token_id=258, attention_bias=False, initializer_range=0.02)


def make_config(name):
    if name == "tiny-v2":
        from transformers import DeepseekV2Config
        return DeepseekV2Config(**COMMON, intermediate_size=448, q_lora_rank=None,
                                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    from transformers import DeepseekV3Config
    return DeepseekV3Config(**COMMON, intermediate_size=512, q_lora_rank=192, rope_interleave=True,
                            num_mtp_layers=0, n_group=1, topk_group=1,
                            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                             "original_max_position_embeddings": 128, "mscale": 1.0,
                                             "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0})


def model_class(name):
    import transformers
    return transformers.DeepseekV2ForCausalLM if name == "tiny-v2" else transformers.DeepseekV3ForCausalLM


def heldout_bpb(torch, model, heldout, T, device, max_windows=None, batch=64):
    n = heldout.numel() // T
    if max_windows:
        n = min(n, max_windows)
    w = heldout[: n * T].view(n, T)
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, n, batch):
            x = w[s:s + batch].to(device)
            logits = model(input_ids=x, use_cache=False).logits.float()
            nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                    x[:, 1:].reshape(-1), reduction="sum")
            total += nll.item()
            count += x[:, 1:].numel()
    return total / count / math.log(2), n


def train_one(name, args, torch, train, heldout, device):
    torch.manual_seed(1234 if name == "tiny-v2" else 4321)
    cfg = make_config(name)
    model = model_class(name)(cfg)
    model.to(device).train()
    nparams = sum(p.numel() for p in model.parameters())
    print(f"[{name}] params {nparams}", flush=True)
    B, T = args.batch, args.seq_len
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=device.startswith("cuda"))
    ar = torch.arange(T, device=device)
    t0 = time.time()
    step, last_log, loss_ema = 0, t0, None
    while True:
        frac = (time.time() - t0) / args.seconds
        if frac >= 1.0 or (args.max_steps and step >= args.max_steps):
            break
        lr = args.lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, train.numel() - T, (B,), device=device)
        x = train[idx[:, None] + ar[None, :]]
        with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x, use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0 or time.time() - last_log > 20:
            lv = loss.item()
            loss_ema = lv if loss_ema is None else 0.9 * loss_ema + 0.1 * lv
            if time.time() - last_log > 20:
                print(f"[{name}] step {step} t {time.time() - t0:.0f}s lr {lr:.2e} loss {lv:.4f} "
                      f"({lv / math.log(2):.3f} bits/byte)", flush=True)
                last_log = time.time()
    train_s = time.time() - t0
    out_dir = os.path.join(args.out, name)
    model.eval()
    model = model.to(torch.bfloat16)
    model.save_pretrained(out_dir)  # safetensors by default
    # Evaluate the saved BF16 weights in float32 (what the C++ forward loads).
    model = model.float()
    bpb_all, n_all = heldout_bpb(torch, model, heldout, args.seq_len, device)
    bpb_64, n_64 = heldout_bpb(torch, model, heldout, args.seq_len, device, max_windows=64)
    summary = dict(model=name, model_type=cfg.model_type, params=nparams, steps=step,
                   tokens_seen=step * B * T, train_seconds=round(train_s, 1), batch=B, seq_len=T,
                   heldout_bits_per_byte=round(bpb_all, 4), heldout_windows=n_all,
                   heldout_bits_per_byte_first64=round(bpb_64, 4),
                   device=torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
                   torch=torch.__version__, transformers=__import__("transformers").__version__)
    print(json.dumps(summary), flush=True)
    # The shipped CI fixture: /reference only, R=2 windows of 64 bytes from heldout.bin.
    ref_tokens = heldout[: 2 * 64].view(2, 64).cpu().numpy().astype(np.int64)
    cap.write_capture(out_dir, os.path.join(out_dir, "reference.h5"),
                      [("reference", ref_tokens, os.path.join(args.corpus, "heldout.bin"), True)],
                      device=device, batch=2, torch_model=cap.load_model(out_dir, device))
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=os.path.join(HERE, "corpus"))
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--models", default="tiny-v2,tiny-v3")
    ap.add_argument("--seconds", type=float, default=150.0, help="training wall time per model")
    ap.add_argument("--max-steps", type=int, default=0, help="cap on steps (0: time budget only)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True  # training only; fixtures turn it off
    def load(split):
        with open(os.path.join(args.corpus, f"{split}.bin"), "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    train = load("train").to(args.device)
    heldout = load("heldout")
    summaries = []
    for name in args.models.split(","):
        summaries.append(train_one(name, args, torch, train, heldout, args.device))
        torch.backends.cuda.matmul.allow_tf32 = True
    with open(os.path.join(args.out, "train_summary.json"), "w") as f:
        json.dump(summaries, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
