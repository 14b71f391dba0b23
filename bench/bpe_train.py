#!/usr/bin/env python3
"""Byte-level BPE training time on Tiny Shakespeare: scaletrain's TrainBpe
(build/bench/bpe_train_bench) against the Hugging Face `tokenizers` trainer
(models.BPE + pre_tokenizers.ByteLevel(add_prefix_space=False), all 256
bytes as the initial alphabet, min_frequency 0: the same job), each the best
of N runs in this one invocation, and the ratio. `tokenizers` runs twice: on
all cores (its default, rayon threads) and on one thread (ours is single-
threaded). Also: how many tokens each trained vocabulary makes of the file.

  python3 bench/bpe_train.py [--bin build/bench/bpe_train_bench]
                             [--input data/tinyshakespeare.txt] [--repeats 5] [VOCAB ...]
Results: docs/benchmarks.md ("Byte-level BPE training").
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hf_child(path, vocab, repeats):
    """Runs in a subprocess so RAYON_NUM_THREADS applies: prints best, median, tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    times = []
    for _ in range(repeats):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=0, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=[])
        t0 = time.perf_counter()
        tok.train([path], trainer)
        times.append(time.perf_counter() - t0)
    with open(path, encoding="utf-8") as f:
        tokens = len(tok.encode(f.read()).ids)
    times.sort()
    print(f"{times[0]:.4f} {times[len(times) // 2]:.4f} {tokens}")


def run_hf(path, vocab, repeats, threads):
    env = dict(os.environ)
    if threads:
        env["RAYON_NUM_THREADS"] = str(threads)
    out = subprocess.run([sys.executable, __file__, "--hf-child", path, str(vocab), str(repeats)],
                         env=env, check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--hf-child":
        hf_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bench/bpe_train_bench"))
    ap.add_argument("--input", default=os.path.join(ROOT, "data/tinyshakespeare.txt"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("vocab", nargs="*", type=int, default=[4096, 16384])
    a = ap.parse_args()
    ours = subprocess.run([a.bin, a.input, str(a.repeats)] + [str(v) for v in a.vocab],
                          check=True, capture_output=True, text=True).stdout.splitlines()
    import tokenizers
    print(f"{os.path.basename(a.input)} ({os.path.getsize(a.input)} bytes), best of {a.repeats}, "
          f"tokenizers {tokenizers.__version__}, {os.cpu_count()} cores")
    print(f"{'vocab':>6} {'ours s':>8} {'hf s':>8} {'hf/ours':>8} {'hf 1-thr s':>10} "
          f"{'hf1/ours':>8} {'our tokens':>10} {'hf tokens':>10}")
    for line in ours:
        vocab, _merges, best, _median, tokens = line.split()
        hf_best, _, hf_tokens = run_hf(a.input, int(vocab), a.repeats, 0)
        hf1_best, _, _ = run_hf(a.input, int(vocab), a.repeats, 1)
        b = float(best)
        print(f"{vocab:>6} {b:8.3f} {hf_best:8.3f} {hf_best / b:8.2f} {hf1_best:10.3f} "
              f"{hf1_best / b:8.2f} {tokens:>10} {hf_tokens:>10}")


if __name__ == "__main__":
    main()
