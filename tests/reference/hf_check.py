#!/usr/bin/python3
"""scaletrain's Hugging Face export/import against the `transformers` library.

Usage:
  /usr/bin/python3 tests/reference/hf_check.py check DIR [--tol 1e-4]
      DIR/hf is a model directory `scaletrain export --format hf` wrote and
      DIR/outputs.safetensors holds `tokens` (I32 [B,T]) and scaletrain's
      `logits` (F32 [B,T,V], V = the real vocabulary) on them; metadata
      (optional) `text` and `text_ids` (a JSON list): a text and the ids our
      vocabulary encodes it to. Loads the model with
      AutoModelForCausalLM.from_pretrained, runs it on the tokens, and
      compares the logits (max abs difference); with `text`, also loads the
      tokenizer with AutoTokenizer and checks it encodes the text to
      text_ids and decodes them back to the text.
  /usr/bin/python3 tests/reference/hf_check.py make DIR
      Creates a GPT-2 with transformers (GPT2LMHeadModel(GPT2Config(small)),
      random weights with non-zero biases and LayerNorm weights away from 1),
      saves it as DIR/hf with save_pretrained(safe_serialization=True), and
      writes DIR/expected.safetensors: `tokens` (I32 [B,T]) and its `logits`
      (F32 [B,T,V]) on them.
  /usr/bin/python3 tests/reference/hf_check.py make-llama DIR
      The same with a small LlamaForCausalLM (grouped-query attention,
      rotary base 500, RMSNorm weights away from 1, an untied head).

Exit status: 0 within tolerance (check) or written (make); 1 a difference
over the tolerance or a tokenizer mismatch; 2 inputs missing or malformed;
3 transformers or torch cannot be imported (the test skips).
"""

import argparse
import json
import os
import sys

try:
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open
except ImportError as e:  # the caller skips
    print(f"cannot import: {e}")
    sys.exit(3)


def check(d, tol):
    outputs = os.path.join(d, "outputs.safetensors")
    if not os.path.exists(outputs):
        print(f"missing {outputs}")
        return 2
    ours = load_file(outputs)
    with safe_open(outputs, "np") as f:
        meta = f.metadata() or {}
    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(d, "hf"))
    model.eval()
    tokens = torch.from_numpy(ours["tokens"].astype(np.int64))
    with torch.no_grad():
        ref = model(tokens).logits.numpy()
    if ref.shape != ours["logits"].shape:
        print(f"FAIL logits shape: transformers {ref.shape}, scaletrain {ours['logits'].shape}")
        return 1
    diff = float(np.max(np.abs(ref.astype(np.float64) - ours["logits"].astype(np.float64))))
    scale = float(np.max(np.abs(ref)))
    status = 0 if diff <= tol else 1
    print(f"{'ok  ' if status == 0 else 'FAIL'} logits {list(ref.shape)}: max abs difference "
          f"{diff:.3g} (tolerance {tol:g}; largest logit {scale:.3g})")
    text = meta.get("text")
    if text is not None:
        tok = transformers.AutoTokenizer.from_pretrained(os.path.join(d, "hf"))
        ids = tok(text)["input_ids"]
        back = tok.decode(ids)
        good = ids == json.loads(meta["text_ids"]) and back == text
        print(f"{'ok  ' if good else 'FAIL'} tokenizer: {len(ids)} ids, decoded back "
              f"{'identical' if back == text else repr(back)}")
        status = status or (0 if good else 1)
    return status


def save_and_run(model, d, seed):
    """Saves `model` as DIR/hf and writes DIR/expected.safetensors: random
    tokens (3 x 16) and the model's logits on them."""
    model.eval()
    model.save_pretrained(os.path.join(d, "hf"), safe_serialization=True)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, model.config.vocab_size, (3, 16), generator=gen)
    with torch.no_grad():
        logits = model(tokens).logits.numpy().astype(np.float32)
    save_file({"tokens": tokens.numpy().astype(np.int32), "logits": logits},
              os.path.join(d, "expected.safetensors"))
    return 0


def make(d):
    torch.manual_seed(1234)
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=16, vocab_size=50,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)
            elif ".ln_" in name:
                p.normal_(1.0, 0.2)
            elif "c_fc.weight" in name:
                p.mul_(25.0)  # GELU inputs of order 1-3, where its forms differ
    return save_and_run(model, d, seed=99)


def make_llama(d):
    """A small LlamaForCausalLM (GQA, rotary base 500, untied head), saved and run."""
    torch.manual_seed(4321)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=16,
                                   rope_theta=500.0, rms_norm_eps=1e-5,
                                   tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)
            else:
                p.normal_(0.0, 0.3)  # attention away from uniform, SiLU away from linear
    return save_and_run(model, d, seed=98)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["check", "make", "make-llama"])
    ap.add_argument("dir")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    if a.mode == "check":
        return check(a.dir, a.tol)
    return make(a.dir) if a.mode == "make" else make_llama(a.dir)


if __name__ == "__main__":
    sys.exit(main())
