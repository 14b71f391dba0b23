#!/usr/bin/python3
"""PyTorch DDP (gloo) CPU training throughput: the peer of bench/dp_vs_ddp.sh.

The model is the nanoGPT-equivalent GPT-2 of tests/reference/torch_gpt.py
(float32), initialised and optimised as bench/torch_gpt_train.py does (GPT-2
init; AdamW betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices and
embeddings only; warmup + cosine learning rate; global-norm clip to 1.0),
both imported from there rather than copied. It is wrapped in
torch.nn.parallel.DistributedDataParallel on the gloo backend (bucket_cap_mb
25, DDP's default and scaletrain's; gradients all-reduced bucket by bucket
while backward runs), one process per rank on 127.0.0.1.

One step, as scaletrain's: every rank takes global_batch / world sequences of
random tokens (as micro-batches of --micro-batch, gradient accumulation under
no_sync() for all but the last), forward, mean cross-entropy, backward (DDP
averages the gradients), clip, AdamW step, and the loss averaged over the
ranks (scaletrain logs the DP-averaged loss; one 8-byte all-reduce).

Launch: by default this process spawns --nproc workers itself
(torch.multiprocessing, MASTER_ADDR 127.0.0.1, a free port). Started by
torchrun instead (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment), it is one worker.

Threads: torch.set_num_threads(--threads) in every worker, and
OPENBLAS_NUM_THREADS=--threads unless set (Debian's torch calls the pthread
OpenBLAS, which otherwise starts a pool sized to all cores per process).
Placement, for a like-for-like comparison with mpirun's ranks: --bind pins
worker r to core r (mpirun binds 2 ranks to a core each by default), and
--setsid starts every worker in its own session (see bench/dp_vs_ddp.sh).

Prints one JSON line (rank 0): shape, world size, threads, steps timed, the
median step time and tokens/s over the steps after --warmup (rank 0's
clock; DDP synchronises the ranks every step), the median forward, backward
(including DDP's exposed communication) and optimizer times.

Usage: /usr/bin/python3 bench/torch_ddp_train.py --nproc 2 --threads 1 \\
           --n-layer 4 --n-head 4 --n-embd 128 --block-size 128 \\
           --global-batch 32 --micro-batch 16 --steps 10 --warmup 2
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch DDP (gloo) GPT-2 CPU training throughput")
    ap.add_argument("--nproc", type=int, default=2, help="ranks to spawn (ignored under torchrun)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=65, help="Tiny Shakespeare's 65 characters")
    ap.add_argument("--global-batch", type=int, default=32, help="sequences per step, all ranks")
    ap.add_argument("--micro-batch", type=int, default=0,
                    help="sequences per forward/backward (default: global batch / ranks)")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=2e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--bind", action="store_true",
                    help="pin worker r to core r (of those this process may use), as mpirun "
                         "binds 2 ranks by default")
    ap.add_argument("--setsid", action="store_true",
                    help="each worker in its own session (its own autogroup CPU share)")
    return ap.parse_args()


def worker(rank, world, args):
    if args.setsid and os.getsid(0) != os.getpid():
        os.setsid()
    if args.bind:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_gpt_train  # noqa: E402  (puts tests/reference on the path)
    import torch_gpt  # noqa: E402

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)  # same weights everywhere (DDP also broadcasts rank 0's)
    cfg = torch_gpt.GPTConfig(args.n_layer, args.n_head, args.n_embd, args.block_size, args.vocab)
    model = torch_gpt.GPT(cfg)
    torch_gpt_train.init_gpt2(model, args.n_layer)
    model.train()

    class Logits(torch.nn.Module):  # DDP calls forward(); torch_gpt.GPT names it logits()
        def __init__(self, gpt):
            super().__init__()
            self.gpt = gpt

        def forward(self, tokens):
            return self.gpt.logits(tokens)

    ddp = DDP(Logits(model), bucket_cap_mb=args.bucket_mb)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    per_rank = args.global_batch // world
    mb = args.micro_batch or per_rank
    accum = per_rank // mb
    T = args.block_size
    gen = torch.Generator().manual_seed(args.seed + 1000 * rank)
    total = args.warmup + args.steps
    step_s, fwd_s, bwd_s, opt_s = [], [], [], []
    loss_v = float("nan")
    for step in range(total):
        if step == args.warmup:
            dist.barrier()  # the timed steps start together
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = torch_gpt_train.lr_at(step, args.lr, args.min_lr, 50, 600)
        opt.zero_grad(set_to_none=True)
        f = b = 0.0
        loss_sum = 0.0
        for micro in range(accum):
            data = torch.randint(0, args.vocab, (mb, T + 1), generator=gen)
            x, y = data[:, :-1], data[:, 1:]
            last = micro == accum - 1
            a = time.perf_counter()
            if last:
                loss = model.loss(ddp(x), y) / accum
                c = time.perf_counter()
                loss.backward()
            else:
                with ddp.no_sync():
                    loss = model.loss(ddp(x), y) / accum
                    c = time.perf_counter()
                    loss.backward()
            d = time.perf_counter()
            f += c - a
            b += d - c
            loss_sum += loss.detach()
        o = time.perf_counter()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        avg = loss_sum.clone().reshape(1)
        dist.all_reduce(avg)
        loss_v = avg.item() / world
        t1 = time.perf_counter()
        if step >= args.warmup:
            step_s.append(t1 - t0)
            fwd_s.append(f)
            bwd_s.append(b)
            opt_s.append(t1 - o)

    if rank == 0:
        med = statistics.median(step_s)
        print(json.dumps({
            "impl": "torch_ddp",
            "torch": torch.__version__,
            "backend": dist.get_backend(),
            "world": world,
            "threads": torch.get_num_threads(),
            "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
            "block_size": T, "vocab": args.vocab,
            "global_batch": args.global_batch, "micro_batch": mb, "accum": accum,
            "bucket_cap_mb": args.bucket_mb,
            "params": sum(p.numel() for p in model.parameters()),
            "timed_steps": len(step_s),
            "step_ms_median": med * 1e3,
            "tokens_per_s": args.global_batch * T / med,
            "tokens_per_s_mean": args.global_batch * T * len(step_s) / sum(step_s),
            "forward_ms_median": statistics.median(fwd_s) * 1e3,
            "backward_ms_median": statistics.median(bwd_s) * 1e3,
            "optimizer_ms_median": statistics.median(opt_s) * 1e3,
            "final_loss": loss_v,
        }), flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        world = int(os.environ["WORLD_SIZE"])
    else:
        world = args.nproc
    if world < 1 or args.global_batch % world:
        sys.exit(f"error: the global batch {args.global_batch} must divide over {world} ranks")
    per_rank = args.global_batch // world
    if args.micro_batch and per_rank % args.micro_batch:
        sys.exit(f"error: the micro-batch {args.micro_batch} must divide the {per_rank} "
                 f"sequences per rank")
    if args.steps < 1:
        sys.exit("error: --steps must be at least 1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        worker(int(os.environ["RANK"]), world, args)
        return
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(world, args), nprocs=world, join=True)


if __name__ == "__main__":
    main()
