// Token + position embedding. The backward is deterministic without float
// atomics: an integer counting sort buckets positions by token, then each
// token's row of dwte sums its bucket in position order.
#include "kernels/cuda/common.cuh"

namespace scaletrain::cuda {
namespace {
using detail::FromFloat;
using detail::Grid;
using detail::ToFloat;

template <typename T>
__global__ void EncoderForwardKernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                     int64_t N, int64_t T_, int64_t C) {
  const int64_t n = N * C;
  ST_GRID_STRIDE(i, n) {
    const int64_t pos = i / C, c = i % C;
    const int64_t t = pos % T_;
    const int64_t tok = tokens[pos];
    out[i] = FromFloat<T>(ToFloat(wte[tok * C + c]) + ToFloat(wpe[t * C + c]));
  }
}

__global__ void CountTokensKernel(int32_t* counts, const int32_t* tokens, int64_t N) {
  ST_GRID_STRIDE(i, N) {
    atomicAdd(&counts[tokens[i]], 1);  // integer: exact whatever the order
  }
}

// offsets[v] = sum of counts[0..v), offsets[V] = total. One block of
// kScanThreads threads; thread i scans a contiguous slice of counts.
constexpr int kScanThreads = 1024;
__global__ void ExclusiveScanKernel(int32_t* offsets, const int32_t* counts, int64_t V) {
  __shared__ int32_t sums[kScanThreads];
  const int64_t per = (V + kScanThreads - 1) / kScanThreads;
  const int64_t begin = min(V, threadIdx.x * per), end = min(V, begin + per);
  int32_t local = 0;
  for (int64_t v = begin; v < end; ++v) local += counts[v];
  sums[threadIdx.x] = local;
  __syncthreads();
  // Hillis-Steele inclusive scan over the per-thread sums.
  for (int o = 1; o < kScanThreads; o <<= 1) {
    const int32_t add = threadIdx.x >= static_cast<unsigned>(o) ? sums[threadIdx.x - o] : 0;
    __syncthreads();
    sums[threadIdx.x] += add;
    __syncthreads();
  }
  int32_t run = sums[threadIdx.x] - local;  // exclusive prefix of this slice
  for (int64_t v = begin; v < end; ++v) {
    offsets[v] = run;
    run += counts[v];
  }
  if (threadIdx.x == kScanThreads - 1) offsets[V] = sums[kScanThreads - 1];
}

__global__ void ScatterPositionsKernel(int32_t* positions, int32_t* fill, const int32_t* offsets,
                                       const int32_t* tokens, int64_t N) {
  ST_GRID_STRIDE(i, N) {
    const int32_t tok = tokens[i];
    positions[offsets[tok] + atomicAdd(&fill[tok], 1)] = static_cast<int32_t>(i);
  }
}

// The scatter's order within a bucket depends on scheduling; sorting each
// bucket restores position order. Insertion sort: buckets are short except
// for very frequent tokens (a known cost for later tuning).
__global__ void SortBucketsKernel(int32_t* positions, const int32_t* offsets, int64_t V) {
  ST_GRID_STRIDE(v, V) {
    int32_t* p = positions + offsets[v];
    const int32_t len = offsets[v + 1] - offsets[v];
    for (int32_t i = 1; i < len; ++i) {
      const int32_t key = p[i];
      int32_t j = i - 1;
      while (j >= 0 && p[j] > key) {
        p[j + 1] = p[j];
        --j;
      }
      p[j + 1] = key;
    }
  }
}

// Block j looks at sorted slot j; the block holding the first slot of a
// token's bucket adds that bucket into the token's row of dwte.
template <typename T>
__global__ void AccumulateTokenRowsKernel(T* dwte, const T* dout, const int32_t* tokens,
                                          const int32_t* positions, const int32_t* offsets,
                                          int64_t C) {
  const int64_t slot = blockIdx.x;
  const int32_t tok = tokens[positions[slot]];
  const int32_t begin = offsets[tok];
  if (begin != slot) return;
  const int32_t end = offsets[tok + 1];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.0f;
    for (int32_t j = begin; j < end; ++j) s += ToFloat(dout[static_cast<int64_t>(positions[j]) * C + c]);
    dwte[static_cast<int64_t>(tok) * C + c] = FromFloat<T>(ToFloat(dwte[static_cast<int64_t>(tok) * C + c]) + s);
  }
}

// dwpe[t, c] += sum over b (in order) of dout[b, t, c].
template <typename T>
__global__ void PositionGradKernel(T* dwpe, const T* dout, int64_t B, int64_t T_, int64_t C) {
  const int64_t n = T_ * C;
  ST_GRID_STRIDE(i, n) {
    float s = 0.0f;
    for (int64_t b = 0; b < B; ++b) s += ToFloat(dout[b * n + i]);
    dwpe[i] = FromFloat<T>(ToFloat(dwpe[i]) + s);
  }
}

}  // namespace

template <typename T>
Status EncoderForward(const Context& ctx, T* out, const int32_t* tokens, const T* wte,
                      const T* wpe, int64_t B, int64_t T_, int64_t C) {
  const Launch1D l = ElementwiseLaunch(B * T_ * C);
  if (l.grid == 0) return Status::Ok();
  EncoderForwardKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(out, tokens, wte, wpe,
                                                                    B * T_, T_, C);
  return detail::LaunchStatus("EncoderForwardKernel");
}

template <typename T>
Status EncoderBackward(const Context& ctx, T* dwte, T* dwpe, const T* dout,
                       const int32_t* tokens, void* workspace, int64_t B, int64_t T_, int64_t C,
                       int64_t V) {
  const int64_t N = B * T_;
  if (N == 0) return Status::Ok();
  if (dwpe != nullptr) {
    const Launch1D l = ElementwiseLaunch(T_ * C);
    PositionGradKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(dwpe, dout, B, T_, C);
    ST_RETURN_IF_ERROR(detail::LaunchStatus("PositionGradKernel"));
  }
  if (dwte == nullptr) return Status::Ok();
  const EncoderWorkspaceLayout w = EncoderBackwardWorkspace(N, V);
  char* base = static_cast<char*>(workspace);
  auto* counts = reinterpret_cast<int32_t*>(base + w.counts_offset);
  auto* offsets = reinterpret_cast<int32_t*>(base + w.offsets_offset);
  auto* positions = reinterpret_cast<int32_t*>(base + w.positions_offset);
  const size_t count_bytes = static_cast<size_t>(V) * sizeof(int32_t);
  const Launch1D ln = ElementwiseLaunch(N);
  const Launch1D lv = ElementwiseLaunch(V);

  ST_RETURN_IF_ERROR(detail::CudaStatus(cudaMemsetAsync(counts, 0, count_bytes, ctx.stream),
                                        "cudaMemsetAsync(token counts)"));
  CountTokensKernel<<<Grid(ln.grid), ln.block, 0, ctx.stream>>>(counts, tokens, N);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("CountTokensKernel"));
  ExclusiveScanKernel<<<1, kScanThreads, 0, ctx.stream>>>(offsets, counts, V);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("ExclusiveScanKernel"));
  // counts is reused as each bucket's fill cursor.
  ST_RETURN_IF_ERROR(detail::CudaStatus(cudaMemsetAsync(counts, 0, count_bytes, ctx.stream),
                                        "cudaMemsetAsync(bucket cursors)"));
  ScatterPositionsKernel<<<Grid(ln.grid), ln.block, 0, ctx.stream>>>(positions, counts, offsets,
                                                                     tokens, N);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("ScatterPositionsKernel"));
  SortBucketsKernel<<<Grid(lv.grid), lv.block, 0, ctx.stream>>>(positions, offsets, V);
  ST_RETURN_IF_ERROR(detail::LaunchStatus("SortBucketsKernel"));
  const int block = C >= 256 ? 256 : 32 * static_cast<int>((C + 31) / 32);
  AccumulateTokenRowsKernel<T><<<Grid(N), block, 0, ctx.stream>>>(dwte, dout, tokens, positions,
                                                                   offsets, C);
  return detail::LaunchStatus("AccumulateTokenRowsKernel");
}

#define ST_INSTANTIATE(T)                                                                     \
  template Status EncoderForward<T>(const Context&, T*, const int32_t*, const T*, const T*,   \
                                    int64_t, int64_t, int64_t);                               \
  template Status EncoderBackward<T>(const Context&, T*, T*, const T*, const int32_t*, void*, \
                                     int64_t, int64_t, int64_t, int64_t);
ST_INSTANTIATE(float)
ST_INSTANTIATE(__nv_bfloat16)
#undef ST_INSTANTIATE

}  // namespace scaletrain::cuda
