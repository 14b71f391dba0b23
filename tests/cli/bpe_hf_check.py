#!/usr/bin/env python3
"""Checks scaletrain's byte-level BPE against the Hugging Face `tokenizers`
library (tests/cli/test_bpe_cli.sh).

  bpe_hf_check.py train CORPUS VOCAB_SIZE OUT_DIR
      trains a byte-level BPE with `tokenizers` (ByteLevelBPETokenizer, no
      prefix space) and writes OUT_DIR/vocab.json and OUT_DIR/merges.txt.
  bpe_hf_check.py compare VOCAB MERGES TEXT DATA_DIR
      encodes TEXT with `tokenizers` loading the pair VOCAB + MERGES, and
      compares the ids with DATA_DIR/train.bin + val.bin (llm.c shards).
Exit 0 when equal; else prints where the ids first differ and exits 1.
"""
import os
import struct
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.implementations import ByteLevelBPETokenizer


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, count = struct.unpack_from("<3i", data, 0)
    assert magic == 20240520, f"{path}: magic {magic}"
    width = {1: "H", 2: "I"}[version]
    return list(struct.unpack_from(f"<{count}{width}", data, 256 * 4))


def train(corpus, vocab_size, out_dir):
    tok = ByteLevelBPETokenizer(add_prefix_space=False)
    tok.train([corpus], vocab_size=int(vocab_size), min_frequency=2, show_progress=False,
              special_tokens=[])
    os.makedirs(out_dir, exist_ok=True)
    tok.save_model(out_dir)


def compare(vocab, merges, text_path, data_dir):
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    want = tok.encode(text).ids
    got = read_shard(f"{data_dir}/train.bin") + read_shard(f"{data_dir}/val.bin")
    if got == want:
        print(f"same {len(got)} ids")
        return 0
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    print(f"ids differ at token {i} of {len(want)} (tokenizers) / {len(got)} (scaletrain): "
          f"tokenizers {want[i:i + 8]} {[tok.id_to_token(t) for t in want[i:i + 8]]}, "
          f"scaletrain {got[i:i + 8]} {[tok.id_to_token(t) for t in got[i:i + 8]]}")
    return 1


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(*sys.argv[2:5])
        sys.exit(0)
    sys.exit(compare(*sys.argv[2:6]))
