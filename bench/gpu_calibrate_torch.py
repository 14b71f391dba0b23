#!/usr/bin/env python3
"""The torch side of bench/gpu_calibrate.sh: times torch.matmul at a few of
gpu_calibrate's GEMM shapes (the same layout: x[m, k] @ w[n, k]^T) and
torch's scaled_dot_product_attention (FlashAttention backend, causal, bf16,
head dim 128), and writes the medians to a TOML file that gpu_calibrate reads
(--torch FILE): it prints ours/torch per shape and takes FlashAttention's
share of the peak from the attention times.

Exit codes: 0 written; 77 skipped (torch not importable, or no CUDA device
for it: one line says which); 1 an error.
"""
import argparse
import statistics
import sys

NO_TORCH_EXIT = 77


def median_seconds(torch, fn, reps, warmup=2):
    """Median of `reps` timed calls of fn (CUDA events around each)."""
    for _ in range(warmup):
        fn()
    pairs = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        pairs.append((start, stop))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e-3 for s, e in pairs)


def gemm_shapes(quick):
    # (m tokens, n outputs, k inputs): shapes of gpu_calibrate's grid.
    if quick:
        return [(2048, 2048, 2048), (8192, 8192, 8192), (8192, 32768, 8192)]
    return [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (8192, 32768, 8192),
            (8192, 8192, 32768), (16384, 16384, 16384)]


def time_gemms(torch, dtype, shapes, reps):
    rows = []
    for m, n, k in shapes:
        x = torch.rand(m, k, device="cuda", dtype=dtype) * 2 - 1
        w = torch.rand(n, k, device="cuda", dtype=dtype) * 2 - 1
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        s = median_seconds(torch, lambda: torch.matmul(x, w.t(), out=out), reps)
        rows.append((m, n, k, s))
        print(f"  torch {str(dtype).replace('torch.', '')} {m} x {n} x {k}: {2 * m * n * k / s / 1e12:.1f} TFLOP/s")
        del x, w, out
    return rows


def flash_context(torch):
    """A context that allows only the FlashAttention backend, and its name."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION), "flash"
    except ImportError:  # torch < 2.3
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                              enable_mem_efficient=False), "flash"


def time_sdpa(torch, quick, reps):
    """[(batch, seq, hidden, heads, fwd_s, bwd_s)] with 16k tokens each."""
    import torch.nn.functional as F
    seqs = [4096] if quick else [1024, 2048, 4096, 8192]
    heads, head_dim = 16, 128
    rows = []
    ctx, backend = flash_context(torch)
    with ctx:
        for seq in seqs:
            batch = max(1, 16384 // seq)
            q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16,
                                   requires_grad=True) for _ in range(3))
            grad = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
            fwd = median_seconds(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def backward():
                q.grad = k.grad = v.grad = None  # no accumulation kernels in the timing
                out.backward(grad, retain_graph=True)

            bwd = median_seconds(torch, backward, reps)
            rows.append((batch, seq, heads * head_dim, heads, fwd, bwd))
            print(f"  torch SDPA ({backend}) batch {batch} seq {seq}: forward {fwd * 1e3:.3f} ms, "
                  f"backward {bwd * 1e3:.3f} ms")
            del q, k, v, grad, out
    return rows, backend


def toml_rows(key, rows):
    body = "".join("  [" + ", ".join(repr(float(x)) if isinstance(x, float) else str(x) for x in r) + "],\n"
                   for r in rows)
    return f"{key} = [\n{body}]\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="TOML file to write")
    ap.add_argument("--quick", action="store_true", help="fewer shapes and runs")
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch cross-check: skipped: torch is not importable ({e})")
        return NO_TORCH_EXIT
    if not torch.cuda.is_available():
        print(f"torch cross-check: skipped: torch {torch.__version__} sees no CUDA device "
              "(torch.cuda.is_available() is False: a CPU-only build, or no driver)")
        return NO_TORCH_EXIT
    reps = 5 if args.quick else 20
    device = torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__} on {device}")
    text = f'torch = "{torch.__version__}"\ndevice = "{device}"\n'
    shapes = gemm_shapes(args.quick)
    text += toml_rows("gemms_bf16", time_gemms(torch, torch.bfloat16, shapes, reps))
    text += toml_rows("gemms_fp16", time_gemms(torch, torch.float16, shapes, reps))
    try:
        rows, backend = time_sdpa(torch, args.quick, reps)
        text += f'sdpa_backend = "{backend}"\n' + toml_rows("sdpa", rows)
    except RuntimeError as e:  # no FlashAttention kernel for this device or build
        print(f"  torch SDPA with the FlashAttention backend failed: {e}")
    with open(args.out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
