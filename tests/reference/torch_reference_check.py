#!/usr/bin/python3
"""Checks scaletrain's GPT-2 or Llama forward/backward against an independent PyTorch model.

Usage: /usr/bin/python3 tests/reference/torch_reference_check.py DIR [--tol 1e-4]

DIR holds two safetensors files written by tests/unit/test_model_reference.cpp:
  model.safetensors    the parameters, by their nanoGPT names (float32)
  outputs.safetensors  tokens [B,T] I32, targets [B,T] I32, what scaletrain
                       computed from them: logits [B,T,Vp] F32, loss [1] F32,
                       and grad.<name> for every parameter <name> (F32); the
                       metadata holds the model config (n_layer, n_head,
                       n_embd, block_size, vocab_size, padded_vocab_size).

The reference loads the same weights, cast to float64, and computes logits,
the mean cross-entropy over the first vocab_size logit columns, and every
parameter's gradient (torch autograd, float64).

Error measure, per tensor: max_i |ours_i - ref_i| / max_i |ref_i|, i.e. the
largest absolute difference relative to the tensor's own scale (for the
scalar loss this is the ordinary relative error). An elementwise relative
error is not used because float32 results carry an absolute error set by the
magnitude of the values summed, so elements that happen to be near zero (a
gradient entry of a rarely seen token, a bias whose contributions cancel)
would show huge "relative" errors while being as exact as the rest. A tensor
whose reference is exactly zero everywhere must be zero to within 1e-30.

Exit status: 0 if every tensor is within --tol, 1 if any is not (each such
tensor is marked FAIL), 2 if the inputs are missing or malformed.
"""

import argparse
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402


def rel_error(ours, ref):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return float("inf"), 0.0, float("inf")
    if not np.all(np.isfinite(ours)):
        return float("inf"), float(np.max(np.abs(ref))) if ref.size else 0.0, float("inf")
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    diff = float(np.max(np.abs(ours - ref))) if ref.size else 0.0
    if scale == 0.0:
        return (0.0 if diff <= 1e-30 else float("inf")), scale, diff
    return diff / scale, scale, diff


def group_of(name):
    """A short group name: layer index dropped, so one line covers all layers."""
    if name in ("logits", "loss"):
        return name
    return re.sub(r"(\.h|^layers)\.\d+\.", r"\1.*.", name)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="directory with model.safetensors and outputs.safetensors")
    ap.add_argument("--tol", type=float, default=1e-4, help="max relative error (default 1e-4)")
    args = ap.parse_args(argv)

    model_path = os.path.join(args.dir, "model.safetensors")
    out_path = os.path.join(args.dir, "outputs.safetensors")
    try:
        outputs, meta = torch_gpt.read_safetensors(out_path)
        cfg = torch_gpt.GPTConfig.from_metadata(meta)
        tokens, targets = outputs["tokens"], outputs["targets"]
        ours_logits, ours_loss = outputs["logits"], outputs["loss"]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot read {out_path}: {e}", file=sys.stderr)
        return 2
    try:
        ref_logits, ref_loss, ref_grads = torch_gpt.reference_forward_backward(
            model_path, tokens, targets, cfg)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot run the reference on {model_path}: {e}", file=sys.stderr)
        return 2

    B, T = tokens.shape
    print(f"config: arch={cfg.arch} n_kv_head={cfg.n_kv_head} ffn_hidden={cfg.ffn_hidden} "
          f"tied={cfg.tied_embeddings} n_layer={cfg.n_layer} n_head={cfg.n_head} n_embd={cfg.n_embd} "
          f"block_size={cfg.block_size} vocab={cfg.vocab_size} padded={cfg.padded_vocab_size} "
          f"B={B} T={T}; reference float64, tolerance {args.tol:g} "
          f"(max|diff| / max|ref| per tensor)")
    print(f"loss: ours {float(ours_loss.reshape(-1)[0]):.9f}  reference {ref_loss:.9f}")

    rows = []  # (name, shape, scale, diff, err)

    def check(name, ours, ref):
        err, scale, diff = rel_error(ours, ref)
        if np.asarray(ours).shape != np.asarray(ref).shape:
            print(f"FAIL {name}: shape {list(np.asarray(ours).shape)} != reference "
                  f"{list(np.asarray(ref).shape)}")
        rows.append((name, list(np.asarray(ref).shape), scale, diff, err))

    check("logits", ours_logits, ref_logits)
    check("loss", ours_loss.reshape(-1)[:1], np.array([ref_loss]))

    missing = [n for n in ref_grads if "grad." + n not in outputs]
    extra = [k[5:] for k in outputs if k.startswith("grad.") and k[5:] not in ref_grads]
    for n in missing:
        print(f"FAIL grad.{n}: absent from {out_path}")
    for n in extra:
        print(f"FAIL grad.{n}: not a parameter of the reference model")
    for name, g in ref_grads.items():
        if "grad." + name in outputs:
            check(name, outputs["grad." + name], g)
    # The padding rows of the tied embedding get no gradient (never looked
    # up, their logit columns excluded from the loss): shown on their own.
    wte = "tok_embeddings.weight" if cfg.arch == "llama" else "transformer.wte.weight"
    if cfg.padded_vocab_size > cfg.vocab_size and "grad." + wte in outputs:
        ours_pad = outputs["grad." + wte][cfg.vocab_size:]
        scale = float(np.max(np.abs(ref_grads[wte])))
        diff = float(np.max(np.abs(ours_pad - ref_grads[wte][cfg.vocab_size:])))
        rows.append((wte + "[padding rows]", list(ours_pad.shape), scale, diff,
                     diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))))

    failed = len(missing) + len(extra)
    width = max(len(r[0]) for r in rows)
    print(f"{'tensor':<{width}}  {'shape':<14} {'max|ref|':>10} {'max|diff|':>10} {'rel err':>10}")
    for name, shape, scale, diff, err in rows:
        bad = not (err <= args.tol)
        failed += bad
        shape_s = "x".join(str(d) for d in shape) or "scalar"
        print(f"{name:<{width}}  {shape_s:<14} {scale:10.3e} {diff:10.3e} {err:10.3e}"
              f"{'  FAIL' if bad else ''}")

    groups = {}
    for name, _, _, _, err in rows:
        g = group_of(name)
        groups[g] = max(groups.get(g, 0.0), err)
    print("max rel err by group (all layers):")
    for g, err in groups.items():
        print(f"  {g:<{width}} {err:10.3e}")

    worst = max(r[4] for r in rows)
    if failed:
        print(f"FAILED: {failed} check(s) over tolerance {args.tol:g} (worst {worst:.3e})")
        return 1
    print(f"PASSED: {len(rows)} tensors within {args.tol:g} (worst {worst:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
