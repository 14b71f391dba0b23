#!/usr/bin/env python3
"""Compares two scaletrain run directories: per-step loss, and the final
parameters (the newest checkpoint, read by checkpoint_io.py), within a relative
tolerance. Optionally checks the per-step DP byte counts and memory.json of
the second run against the analytic figures for its layout.

Usage: compare_runs.py REF_RUN RUN [--rtol 1e-5] [--dp N --zero Z --accum A]
Exit 0 when everything agrees; prints what differs otherwise."""
import argparse
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_io import load_checkpoint  # noqa: E402


def metrics(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def newest_model(run):
    steps = sorted(glob.glob(os.path.join(run, "checkpoints", "step_*")))
    return load_checkpoint(steps[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("run")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--dp", type=int, default=0)
    ap.add_argument("--zero", type=int, default=0)
    ap.add_argument("--accum", type=int, default=1)
    a = ap.parse_args()
    bad = []
    ma, mb = metrics(a.ref), metrics(a.run)
    if len(ma) != len(mb):
        bad.append(f"{len(ma)} steps in {a.ref} but {len(mb)} in {a.run}")
    worst = 0.0
    for x, y in zip(ma, mb):
        rel = abs(x["loss"] - y["loss"]) / abs(x["loss"])
        worst = max(worst, rel)
        if rel > a.rtol:
            bad.append(f"step {x['step']}: loss {x['loss']!r} vs {y['loss']!r} (rel {rel:.2e})")
    # Final parameters, relative to the scale of the whole parameter vector.
    # Not per tensor: parameters whose true gradient is zero (the key bias:
    # softmax ignores a constant added to every score) receive rounding noise
    # as gradient, which AdamW's normalisation turns into updates of a size
    # set by eps, different for any other summation order. They stay tiny
    # next to the model's weights but dominate a per-tensor ratio.
    pa, pb = newest_model(a.ref), newest_model(a.run)
    va = np.concatenate([pa[k].ravel() for k in sorted(pa)]).astype(np.float64)
    vb = np.concatenate([pb[k].ravel() for k in sorted(pa)]).astype(np.float64)
    rel_inf = float(np.max(np.abs(va - vb)) / np.max(np.abs(va)))
    rel_l2 = float(np.linalg.norm(va - vb) / np.linalg.norm(va))
    worst_name = max(pa, key=lambda k: float(np.max(np.abs(pa[k] - pb[k]))))
    for what, rel in (("max-abs", rel_inf), ("L2", rel_l2)):
        if rel > a.rtol:
            bad.append(f"final parameters differ: {what} relative {rel:.2e} (largest in {worst_name})")
    print(f"loss: worst relative difference {worst:.2e} over {len(ma)} steps; final parameters: "
          f"max-abs relative {rel_inf:.2e}, L2 relative {rel_l2:.2e}")

    if a.dp > 0:
        numel = sum(t.size for t in pb.values())
        padded = (numel + a.dp - 1) // a.dp * a.dp
        f4 = 4 * padded
        # Payload bytes handed to the DP group's collectives per step (the
        # communicator's convention): gradient reduction, the loss average
        # (one double) and, under ZeRO, the gradient-norm sum (one double)
        # and the parameter all-gather.
        expect = {0: f4 + 8, 1: f4 + 8 + 8 + f4, 2: a.accum * f4 + 8 + 8 + f4}.get(a.zero)
        if a.zero == 3:
            # ZeRO-3: ZeRO-2's reduce-scatters, no all-gather after the step,
            # but every micro-batch's forward and backward gather every
            # parameter at least once (the seams between layers and the
            # embedding with the head more often: the exact count is
            # test_plan_vs_trainer.sh's). At least:
            expect = a.accum * f4 + 8 + 8 + 2 * a.accum * f4
        for y in mb:
            got = y.get("comm_bytes", {}).get("dp")
            if (got != expect) if a.zero < 3 else (got is None or got < expect):
                bad.append(f"step {y['step']}: dp bytes {got}, expected {expect}")
                break
        with open(os.path.join(a.run, "memory.json")) as f:
            mem = json.load(f)["per_rank"]
        shard = f4 // a.dp
        want = {"params_bytes": shard if a.zero >= 3 else f4,
                "grads_bytes": shard if a.zero >= 2 else f4,
                "optimizer_bytes": 2 * (shard if a.zero >= 1 else f4)}
        for k, v in want.items():
            if mem[k] != v:
                bad.append(f"memory.json {k} = {mem[k]}, expected {v}")
        print(f"dp bytes per step {expect} ({numel} parameters, padded {padded}); memory {want}")
    for b in bad:
        print("MISMATCH:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
