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

Llama blocks (arch "llama", class Llama below) are written from Meta's Llama
description the same way: RMSNorm (weight only, eps norm_eps), rotary position
embeddings on q and k in the Hugging Face arrangement (rotate_half over the
two halves of each head, inv_freq = theta^(-2i/head_dim)), grouped-query
attention (n_kv_head key/value heads, each serving n_head / n_kv_head query
heads), a SwiGLU MLP of width ffn_hidden (w2(silu(w1 x) * w3 x)), no biases,
no position table, and an output head tied to tok_embeddings.weight or its own
output.weight. Parameter names are Meta's (layers.0.attention.wq.weight, ...).

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
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size, padded_vocab_size=None,
                 arch="gpt2", n_kv_head=None, ffn_hidden=None, rope_theta=10000.0,
                 norm_eps=1e-5, tied_embeddings=True):
        self.arch = arch
        self.n_kv_head = int(n_kv_head or n_head)
        self.ffn_hidden = int(ffn_hidden or 4 * int(n_embd))
        self.rope_theta = float(rope_theta)
        self.norm_eps = float(norm_eps)
        self.tied_embeddings = bool(tied_embeddings)
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
        cfg = GPTConfig(*(int(meta[k]) for k in keys))
        if meta.get("arch", "gpt2") == "llama":
            cfg = GPTConfig(*(int(meta[k]) for k in keys), arch="llama",
                            n_kv_head=int(meta["n_kv_head"]), ffn_hidden=int(meta["ffn_hidden"]),
                            rope_theta=float(meta["rope_theta"]), norm_eps=float(meta["norm_eps"]),
                            tied_embeddings=meta["tied_embeddings"] == "true")
        return cfg


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


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, theta):
    """x: [B, heads, T, hs]; position t turns pair i by t * theta^(-2i/hs)."""
    T, hs = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=x.dtype) / hs))
    angles = torch.outer(torch.arange(T, dtype=x.dtype), inv_freq)  # [T, hs/2]
    emb = torch.cat((angles, angles), dim=-1)                       # [T, hs]
    return x * emb.cos() + rotate_half(x) * emb.sin()


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hs = cfg.n_embd // cfg.n_head
        self.wq = nn.Linear(cfg.n_embd, cfg.n_head * hs, bias=False)
        self.wk = nn.Linear(cfg.n_embd, cfg.n_kv_head * hs, bias=False)
        self.wv = nn.Linear(cfg.n_embd, cfg.n_kv_head * hs, bias=False)
        self.wo = nn.Linear(cfg.n_head * hs, cfg.n_embd, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        nh, nkv = self.cfg.n_head, self.cfg.n_kv_head
        hs = C // nh
        q = self.wq(x).view(B, T, nh, hs).transpose(1, 2)
        k = self.wk(x).view(B, T, nkv, hs).transpose(1, 2)
        v = self.wv(x).view(B, T, nkv, hs).transpose(1, 2)
        q, k = apply_rope(q, self.cfg.rope_theta), apply_rope(k, self.cfg.rope_theta)
        # Query head h reads key/value head h // (nh / nkv).
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        y = torch.matmul(probs, v).transpose(1, 2).contiguous().view(B, T, C)
        return self.wo(y)


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)  # gate
        self.w3 = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)  # up
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attention = LlamaAttention(cfg)
        self.ffn_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.padded_vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList([LlamaBlock(cfg) for _ in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        if not cfg.tied_embeddings:
            self.output = nn.Linear(cfg.n_embd, cfg.padded_vocab_size, bias=False)

    def logits(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        head = self.tok_embeddings.weight if self.cfg.tied_embeddings else self.output.weight
        return torch.matmul(x, head.t())

    loss = GPT.loss
    load_weights = GPT.load_weights


def reference_forward_backward(model_path, tokens, targets, cfg, dtype=torch.float64):
    """Loads model.safetensors, runs forward and backward on (tokens, targets).

    Returns (logits [B,T,Vp] ndarray, loss float, {param name: grad ndarray}),
    all computed in `dtype` (float64 by default, so the reference is far more
    exact than the float32 it checks).
    """
    weights, _ = read_safetensors(model_path)
    model = (Llama(cfg) if cfg.arch == "llama" else GPT(cfg)).to(dtype)
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
