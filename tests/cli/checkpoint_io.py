"""Reads a scaletrain checkpoint directory as whole tensors, in Python, for
the tests that compare runs: the whole-tensor format (manifest version 1:
model.safetensors, optimizer.safetensors) and the sharded one (version 2:
one shard-<rank>.safetensors per rank, pieces listed in the manifest's
"tensors" table; see src/checkpoint/checkpoint_format.h). An independent reading
of the format, not a copy of the C++ reader."""
import json
import os
import struct

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"])
    return out


def _insert_shard(full, shard, dim, parts, tp, rank):
    """The inverse of taking TP shard `rank` of `full`: for each of `parts`
    equal parts along `dim`, the rank's 1/tp of it."""
    if dim < 0:
        full[...] = shard
        return
    size = full.shape[dim] // parts
    piece = size // tp
    for p in range(parts):
        dst = [slice(None)] * full.ndim
        src = [slice(None)] * full.ndim
        dst[dim] = slice(p * size + rank * piece, p * size + (rank + 1) * piece)
        src[dim] = slice(p * piece, (p + 1) * piece)
        full[tuple(dst)] = shard[tuple(src)]


def load_checkpoint(ckpt_dir, prefix=""):
    """{tensor name: array} of the parameters (prefix "") or of a moment
    ("exp_avg.", "exp_avg_sq."), in the shapes of the manifest's model."""
    manifest = json.load(open(os.path.join(ckpt_dir, "manifest.json")))
    if manifest.get("version", 1) == 1:
        name = "model.safetensors" if prefix == "" else "optimizer.safetensors"
        tensors = load_safetensors(os.path.join(ckpt_dir, name))
        return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    files = {}
    out = {}
    vocab_rows = manifest["model"]["padded_vocab_size"]
    for name, t in manifest["tensors"].items():
        shape = t["shape"]
        dim = {"replicated": -1, "row": 1}.get(t["split"], 0)
        full = np.zeros(shape, dtype=np.float32)
        shard_shape = list(shape)
        if dim >= 0:
            shard_shape[dim] //= t["tp"]
        for rank in range(t["tp"]):
            shard = np.zeros(int(np.prod(shard_shape)), dtype=np.float32)
            for p in t["pieces"]:
                if p["tp_rank"] != rank:
                    continue
                if p["file"] not in files:
                    files[p["file"]] = load_safetensors(os.path.join(ckpt_dir, p["file"]))
                shard[p["begin"]:p["end"]] = files[p["file"]][f"{prefix}{name}[{p['begin']}:{p['end']}]"]
            _insert_shard(full, shard.reshape(shard_shape), dim, t["parts"], t["tp"], rank)
        if t["split"] == "vocab":  # the writing run's extra padding rows for its tp
            full = full[:vocab_rows]
        out[name] = full
    return out
