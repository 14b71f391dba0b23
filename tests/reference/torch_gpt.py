"""An independent PyTorch GPT-2 (nanoGPT-equivalent) used to check scaletrain.

The model is written here from the GPT-2 description, not from scaletrain's
kernels: token + learned position embeddings, pre-LayerNorm blocks, causal
multi-head self-attention scaled by 1/sqrt(head size), GELU (tanh
approximation), a 4x MLP, a final LayerNorm and an lm head tied to the token
embedding. Every Linear and LayerNorm has a bias; LayerNorm eps is 1e-5.

Parameter names are nanoGPT's (transformer.h.0.attn.c_attn.weight, ...) and
Linear weights are [out, in], which is what scaletrain's parameter layout
writes to model.safetensors, so weights load by name.

The token embedding may have more rows (padded_vocab_size) than the
vocabulary (vocab_size): the lm head then yields padded_vocab_size logits per
position, and the loss is taken over the first vocab_size columns only.

Only json + numpy + torch are used (the `safetensors` package is not needed).
"""

import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# safetensors I/O (https://huggingface.co/docs/safetensors): 8-byte
# little-endian header length, a JSON header, then raw little-endian data.

_ST_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
}


def read_safetensors(path):
    """Returns ({name: numpy array}, {metadata key: str})."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise ValueError(f"{path}: header length {header_len} runs past the end of the file")
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        dtype = info["dtype"]
        if dtype not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {dtype} this reader does not know")
        np_dtype = np.dtype(_ST_DTYPES[dtype]).newbyteorder("<")
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * np_dtype.itemsize or end > len(data):
            raise ValueError(f"{path}: tensor {name} has data_offsets {begin}..{end} "
                             f"inconsistent with {dtype} {list(shape)}")
        arr = np.frombuffer(data[begin:end], dtype=np_dtype, count=count).reshape(shape)
        tensors[name] = arr.astype(np_dtype.newbyteorder("="), copy=True)
    return tensors, metadata


# ---------------------------------------------------------------------------
# The model.

class GPTConfig:
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size, padded_vocab_size=None):
        self.n_layer = int(n_layer)
        self.n_head = int(n_head)
        self.n_embd = int(n_embd)
        self.block_size = int(block_size)
        self.vocab_size = int(vocab_size)
        self.padded_vocab_size = int(padded_vocab_size or vocab_size)
        if self.n_embd % self.n_head:
            raise ValueError("n_embd must be divisible by n_head")
        if self.padded_vocab_size < self.vocab_size:
            raise ValueError("padded_vocab_size must be >= vocab_size")

    @staticmethod
    def from_metadata(meta):
        keys = ["n_layer", "n_head", "n_embd", "block_size", "vocab_size", "padded_vocab_size"]
        missing = [k for k in keys if k not in meta]
        if missing:
            raise ValueError(f"metadata lacks {missing}")
        return GPTConfig(*(int(meta[k]) for k in keys))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=True)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=True)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        # [B, T, C] -> [B, nh, T, hs]: head h is columns h*hs..(h+1)*hs of q, k, v.
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        y = torch.matmul(probs, v)                       # [B, nh, T, hs]
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=True)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=True)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.padded_vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd, eps=1e-5),
        ))
        # The lm head is the token embedding itself (weight tying): no
        # parameter of its own, see logits().

    def logits(self, tokens):
        B, T = tokens.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        pos = torch.arange(T, device=tokens.device)
        x = self.transformer.wte(tokens) + self.transformer.wpe(pos)[None, :, :]
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return torch.matmul(x, self.transformer.wte.weight.t())  # [B, T, padded_vocab_size]

    def loss(self, logits, targets):
        """Mean cross-entropy over the real vocabulary (padding columns excluded)."""
        V = self.cfg.vocab_size
        real = logits[..., :V]
        return F.cross_entropy(real.reshape(-1, V), targets.reshape(-1).long(), reduction="mean")

    def load_weights(self, weights, strict=True):
        """Copies numpy arrays into the parameters by name (cast to the model's dtype)."""
        params = dict(self.named_parameters())
        missing = sorted(set(params) - set(weights))
        unexpected = sorted(set(weights) - set(params))
        if strict and (missing or unexpected):
            raise KeyError(f"weights do not match the model: missing {missing}, unexpected {unexpected}")
        with torch.no_grad():
            for name, p in params.items():
                w = weights[name]
                if tuple(w.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: file shape {list(w.shape)} != model shape {list(p.shape)}")
                p.copy_(torch.from_numpy(np.asarray(w)).to(p.dtype))


def reference_forward_backward(model_path, tokens, targets, cfg, dtype=torch.float64):
    """Loads model.safetensors, runs forward and backward on (tokens, targets).

    Returns (logits [B,T,Vp] ndarray, loss float, {param name: grad ndarray}),
    all computed in `dtype` (float64 by default, so the reference is far more
    exact than the float32 it checks).
    """
    weights, _ = read_safetensors(model_path)
    model = GPT(cfg).to(dtype)
    model.load_weights(weights)
    model.zero_grad(set_to_none=True)
    tok = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    tgt = torch.from_numpy(np.asarray(targets, dtype=np.int64))
    logits = model.logits(tok)
    loss = model.loss(logits, tgt)
    loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        grads[name] = (p.grad if p.grad is not None else torch.zeros_like(p)).detach().numpy()
    return logits.detach().numpy(), float(loss.item()), grads
