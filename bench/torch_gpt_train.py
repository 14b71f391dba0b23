#!/usr/bin/python3
"""PyTorch CPU training throughput for the GPT-2 model scaletrain trains.

The peer side of bench/cpu_vs_torch.sh: the same model (the nanoGPT-equivalent
module of tests/reference/torch_gpt.py, in float32), the same step
(forward, mean cross-entropy, backward, global-norm clip to 1.0, AdamW with
betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices and embeddings
only, the warmup + cosine learning rate), on random tokens. torch 1.13 has no
fused CPU AdamW; its default (foreach=None) implementation is used, as a
nanoGPT user on this PyTorch would get.

Prints one JSON line: shape, threads, steps timed, median tokens/s (after
--warmup untimed steps) and the median step time.

Usage: /usr/bin/python3 bench/torch_gpt_train.py --n-layer 4 --n-head 4 --n-embd 128 \
           --block-size 128 --batch 16 --threads 2 --steps 20 --warmup 3
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import torch_gpt  # noqa: E402


def init_gpt2(model, n_layer):
    """GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif ".ln_" in name or name.startswith("transformer.ln_f"):
                p.fill_(1.0)
            elif name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * n_layer))
            else:
                p.normal_(0.0, 0.02)


def lr_at(step, lr, min_lr, warmup, total):
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    ratio = (step - warmup) / max(1, total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def main():
    ap = argparse.ArgumentParser(description="PyTorch GPT-2 CPU training throughput")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=65, help="Tiny Shakespeare's 65 characters")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=2e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = torch_gpt.GPTConfig(args.n_layer, args.n_head, args.n_embd, args.block_size, args.vocab)
    model = torch_gpt.GPT(cfg)  # float32
    init_gpt2(model, args.n_layer)
    model.train()

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    B, T = args.batch, args.block_size
    total = args.warmup + args.steps
    gen = torch.Generator().manual_seed(args.seed)
    step_s = []
    loss_v = float("nan")
    for step in range(total):
        t0 = time.perf_counter()
        data = torch.randint(0, args.vocab, (B, T + 1), generator=gen)
        x, y = data[:, :-1], data[:, 1:]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.lr, args.min_lr, 20, 600)
        opt.zero_grad(set_to_none=True)
        loss = model.loss(model.logits(x), y)
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        loss_v = loss.item()  # also a sync point
        t1 = time.perf_counter()
        if step >= args.warmup:
            step_s.append(t1 - t0)

    med = statistics.median(step_s)
    print(json.dumps({
        "impl": "torch",
        "torch": torch.__version__,
        "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
        "block_size": T, "batch": B, "vocab": args.vocab,
        "threads": torch.get_num_threads(),
        "params": sum(p.numel() for p in model.parameters()),
        "timed_steps": len(step_s),
        "step_ms_median": med * 1e3,
        "tokens_per_s": B * T / med,
        "tokens_per_s_mean": B * T * len(step_s) / sum(step_s),
        "final_loss": loss_v,
    }))


if __name__ == "__main__":
    main()
