// The measurements of bench/gpu_calibrate (declared in gpu_calibrate.h).
// Written to run right the first time on a device nobody here has: every
// CUDA and cuBLASLt call is checked, every allocation is owned by an object
// that frees it (on error paths too), and buffer sizes are computed in
// 64-bit bytes before anything is allocated.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/gpu_calibrate.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops_cuda.h"

namespace scaletrain::gpucal {

namespace {

#define GPUCAL_CUDA(call)                                                                      \
  do {                                                                                         \
    const cudaError_t gpucal_err = (call);                                                     \
    if (gpucal_err != cudaSuccess) {                                                           \
      return Internal(std::string(#call) + " failed: " + cudaGetErrorString(gpucal_err));       \
    }                                                                                          \
  } while (0)

#define GPUCAL_LT(call)                                                                              \
  do {                                                                                               \
    const cublasStatus_t gpucal_st = (call);                                                         \
    if (gpucal_st != CUBLAS_STATUS_SUCCESS) {                                                        \
      return Internal(std::string(#call) + " failed: cuBLAS status " + std::to_string(int(gpucal_st)) + \
                      " (" + cublasLtGetStatusString(gpucal_st) + ")");                              \
    }                                                                                                \
  } while (0)

// ---- owners ------------------------------------------------------------------

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  Status Allocate(size_t bytes) {
    if (ptr_ != nullptr) return Internal("DeviceBuffer allocated twice");
    const cudaError_t err = cudaMalloc(&ptr_, std::max<size_t>(bytes, 256));
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      return Internal("cudaMalloc of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(err));
    }
    return Status::Ok();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  Status Create() {
    GPUCAL_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    return Status::Ok();
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// A pool of CUDA events, created up front so that timing loops only record.
class Events {
 public:
  Events() = default;
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  ~Events() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  Status Create(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      cudaEvent_t e = nullptr;
      GPUCAL_CUDA(cudaEventCreate(&e));
      events_.push_back(e);
    }
    return Status::Ok();
  }
  cudaEvent_t operator[](size_t i) const { return events_.at(i); }
  // Milliseconds between events a and b (both recorded and complete).
  Result<double> Seconds(size_t a, size_t b) const {
    float ms = 0;
    GPUCAL_CUDA(cudaEventElapsedTime(&ms, events_.at(a), events_.at(b)));
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  std::vector<cudaEvent_t> events_;
};

struct LtHandle {
  cublasLtHandle_t h = nullptr;
  LtHandle() = default;
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  ~LtHandle() {
    if (h != nullptr) cublasLtDestroy(h);
  }
};
struct OpDesc {
  cublasLtMatmulDesc_t d = nullptr;
  OpDesc() = default;
  OpDesc(const OpDesc&) = delete;
  OpDesc& operator=(const OpDesc&) = delete;
  ~OpDesc() {
    if (d != nullptr) cublasLtMatmulDescDestroy(d);
  }
};
struct LayoutDesc {
  cublasLtMatrixLayout_t d = nullptr;
  LayoutDesc() = default;
  LayoutDesc(const LayoutDesc&) = delete;
  LayoutDesc& operator=(const LayoutDesc&) = delete;
  ~LayoutDesc() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
  }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  Preference() = default;
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() {
    if (d != nullptr) cublasLtMatmulPreferenceDestroy(d);
  }
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Result<size_t> FreeBytes() {
  size_t free_bytes = 0, total_bytes = 0;
  GPUCAL_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

Result<int> SmCount() {
  int device = 0, sms = 0;
  GPUCAL_CUDA(cudaGetDevice(&device));
  GPUCAL_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::max(sms, 1);
}

// ---- kernels -----------------------------------------------------------------

// A hash of (i, seed) to [-1, 1): inputs that are neither zero nor
// repetitive (zeros would draw less power and flatter the clock).
__device__ __forceinline__ float Uniform(uint64_t i, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32) ^ seed;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

template <typename T>
__device__ __forceinline__ T FromUniform(float v);
template <>
__device__ __forceinline__ float FromUniform<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromUniform<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromUniform<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 FromUniform<__nv_fp8_e4m3>(float v) {
  return __nv_fp8_e4m3(v);
}

template <typename T>
__global__ void FillKernel(T* p, int64_t n, uint32_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = FromUniform<T>(Uniform(static_cast<uint64_t>(i), seed));
  }
}

__global__ void CopyKernel(const float4* __restrict__ in, float4* __restrict__ out, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    out[i] = in[i];
  }
}

__global__ void EmptyKernel() {}

template <typename T>
Status Fill(T* p, int64_t n, uint32_t seed, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 8192);
  FillKernel<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p, n, seed);
  GPUCAL_CUDA(cudaGetLastError());
  return Status::Ok();
}

// ---- GEMMs -------------------------------------------------------------------

struct GemmTypes {
  cudaDataType_t ab = CUDA_R_16BF, cd = CUDA_R_16BF;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  size_t ab_bytes = 2, cd_bytes = 2;
};

GemmTypes TypesOf(GemmType t) {
  switch (t) {
    case GemmType::kBF16:
      return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 2};
    case GemmType::kFP16:
      return {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 2};
    case GemmType::kFP8:  // E4M3 inputs, bf16 output (Transformer Engine's forward)
      return {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 1, 2};
    case GemmType::kTF32:
      return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 4};
    case GemmType::kFP32:
      return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 4, 4};
  }
  return {};
}

Status FillInputs(GemmType t, void* p, int64_t n, uint32_t seed, cudaStream_t stream) {
  switch (t) {
    case GemmType::kBF16:
      return Fill(static_cast<__nv_bfloat16*>(p), n, seed, stream);
    case GemmType::kFP16:
      return Fill(static_cast<__half*>(p), n, seed, stream);
    case GemmType::kFP8:
      return Fill(static_cast<__nv_fp8_e4m3*>(p), n, seed, stream);
    case GemmType::kTF32:
    case GemmType::kFP32:
      return Fill(static_cast<float*>(p), n, seed, stream);
  }
  return Internal("unknown GEMM type");
}

size_t ShapeBytes(const GemmShape& s, const GemmTypes& t) {
  const auto m = static_cast<size_t>(s.m), n = static_cast<size_t>(s.n), k = static_cast<size_t>(s.k);
  return t.ab_bytes * (m * k + n * k) + t.cd_bytes * m * n;
}

// Buffers for every shape that fits: the largest x, w and out among them.
struct GemmBuffers {
  DeviceBuffer x, w, out, workspace;
  int64_t x_elems = 0, w_elems = 0, out_elems = 0;
};

// Marks the shapes whose buffers cannot be had in `usable_bytes` (the
// largest first, until the remaining maxima fit together) and returns the
// element counts of the maxima.
void PlanGemmBuffers(const GemmTypes& t, size_t usable_bytes, std::vector<GemmTiming>* timings,
                     GemmBuffers* b) {
  for (;;) {
    int64_t mx = 0, mw = 0, mo = 0;
    size_t largest_bytes = 0;
    GemmTiming* largest = nullptr;
    for (GemmTiming& g : *timings) {
      if (!g.note.empty()) continue;
      mx = std::max(mx, g.shape.m * g.shape.k);
      mw = std::max(mw, g.shape.n * g.shape.k);
      mo = std::max(mo, g.shape.m * g.shape.n);
      if (ShapeBytes(g.shape, t) >= largest_bytes) largest_bytes = ShapeBytes(g.shape, t), largest = &g;
    }
    const size_t need = t.ab_bytes * static_cast<size_t>(mx + mw) + t.cd_bytes * static_cast<size_t>(mo);
    if (largest == nullptr || need <= usable_bytes) {
      b->x_elems = mx, b->w_elems = mw, b->out_elems = mo;
      return;
    }
    largest->note = "does not fit in 70% of free GPU memory";
  }
}

// One GEMM, described for cuBLASLt: column-major out^T[n, m] = w[k, n]^T x^T[k, m].
struct GemmPlan {
  OpDesc op;
  LayoutDesc a, b, c;
  cublasLtMatmulHeuristicResult_t heuristic{};
};

// Fills `p`; an empty note where cuBLASLt offers an algorithm, else why not.
Status DescribeGemm(cublasLtHandle_t lt, GemmType type, const GemmShape& s, size_t workspace_bytes, GemmPlan* p,
                    std::string* note) {
  const GemmTypes t = TypesOf(type);
  GPUCAL_LT(cublasLtMatmulDescCreate(&p->op.d, t.compute, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  GPUCAL_LT(cublasLtMatmulDescSetAttribute(p->op.d, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  GPUCAL_LT(cublasLtMatmulDescSetAttribute(p->op.d, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  if (type == GemmType::kFP8) {
    // Transformer Engine's forward GEMMs accumulate in the tensor cores'
    // fast mode; scale pointers unset: scales of 1.
    const int8_t fast = 1;
    GPUCAL_LT(cublasLtMatmulDescSetAttribute(p->op.d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  GPUCAL_LT(cublasLtMatrixLayoutCreate(&p->a.d, t.ab, u(s.k), u(s.n), s.k));  // w: [n, k] row-major
  GPUCAL_LT(cublasLtMatrixLayoutCreate(&p->b.d, t.ab, u(s.k), u(s.m), s.k));  // x: [m, k] row-major
  GPUCAL_LT(cublasLtMatrixLayoutCreate(&p->c.d, t.cd, u(s.n), u(s.m), s.n));  // out: [m, n] row-major
  Preference pref;
  GPUCAL_LT(cublasLtMatmulPreferenceCreate(&pref.d));
  const uint64_t ws = workspace_bytes;
  GPUCAL_LT(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt, p->op.d, p->a.d, p->b.d, p->c.d, p->c.d, pref.d, 1, &p->heuristic, &found);
  if (st != CUBLAS_STATUS_SUCCESS) {
    *note = std::string("no cuBLASLt algorithm (") + cublasLtGetStatusString(st) + ")";
  } else if (found < 1) {
    *note = "no cuBLASLt algorithm for this shape and type";
  }
  return Status::Ok();
}

struct GemmRun {
  cublasLtHandle_t lt;
  const GemmPlan* plan;
  const GemmBuffers* buf;
  size_t workspace_bytes;
  cudaStream_t stream;
  Status operator()() const {
    const float alpha = 1.0f, beta = 0.0f;
    GPUCAL_LT(cublasLtMatmul(lt, plan->op.d, &alpha, buf->w.get(), plan->a.d, buf->x.get(), plan->b.d, &beta,
                             buf->out.get(), plan->c.d, buf->out.get(), plan->c.d, &plan->heuristic.algo,
                             buf->workspace.get(), workspace_bytes, stream));
    return Status::Ok();
  }
};

// Runs `run` `reps` times between events (after `warmup` untimed runs) and
// returns the median seconds of one run.
template <typename Run>
Result<double> MedianSeconds(const Run& run, int warmup, int reps, const Events& ev, cudaStream_t stream) {
  for (int i = 0; i < warmup; ++i) ST_RETURN_IF_ERROR(run());
  for (int r = 0; r < reps; ++r) {
    GPUCAL_CUDA(cudaEventRecord(ev[2 * r], stream));
    ST_RETURN_IF_ERROR(run());
    GPUCAL_CUDA(cudaEventRecord(ev[2 * r + 1], stream));
  }
  GPUCAL_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    ST_ASSIGN_OR_RETURN(const double t, ev.Seconds(2 * r, 2 * r + 1));
    s.push_back(t);
  }
  return Median(s);
}

constexpr size_t kGemmWorkspaceBytes = cuda::kCublasLtWorkspaceBytes;

Status TimeOneGemm(cublasLtHandle_t lt, GemmType type, const GemmBuffers& buf, double peak_tflops, double target_s,
                   int max_reps, const Budget& budget, const Events& ev, cudaStream_t stream, GemmTiming* g) {
  const GemmShape& s = g->shape;
  const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  // At a quarter of the peak (slower than any GEMM the grid holds), plus
  // the launch; the heuristic query and descriptors are a few ms.
  const double estimate_s = flops / (std::max(peak_tflops, 1.0) * 1e12 * 0.25) + 20e-6;
  const int reps = static_cast<int>(std::clamp(target_s / estimate_s, 3.0, static_cast<double>(std::max(max_reps, 3))));
  if (!budget.Allows(estimate_s * (reps + 2) + 0.05)) {
    g->note = "skipped: time budget";
    return Status::Ok();
  }
  GemmPlan plan;
  ST_RETURN_IF_ERROR(DescribeGemm(lt, type, s, kGemmWorkspaceBytes, &plan, &g->note));
  if (!g->note.empty()) return Status::Ok();
  const GemmRun run{lt, &plan, &buf, kGemmWorkspaceBytes, stream};
  ST_ASSIGN_OR_RETURN(g->median_s, MedianSeconds(run, 2, reps, ev, stream));
  g->reps = reps;
  return Status::Ok();
}

}  // namespace

Result<DeviceInfo> OpenDevice() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    return NotFound(std::string("no CUDA device (cudaGetDeviceCount: ") +
                    (err == cudaSuccess ? "0 devices" : cudaGetErrorString(err)) + ")");
  }
  GPUCAL_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop{};
  GPUCAL_CUDA(cudaGetDeviceProperties(&prop, 0));
  DeviceInfo d;
  d.name = prop.name;
  d.cc_major = prop.major, d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.memory_gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  int runtime = 0, driver = 0;
  GPUCAL_CUDA(cudaRuntimeGetVersion(&runtime));
  GPUCAL_CUDA(cudaDriverGetVersion(&driver));
  d.software = "CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
               ", driver " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
               ", cuBLASLt " + std::to_string(cublasLtGetVersion());
  return d;
}

Result<std::vector<GemmTiming>> TimeGemms(GemmType type, const std::vector<GemmShape>& shapes, double peak_tflops,
                                          double target_s, int max_reps, const Budget& budget) {
  std::vector<GemmTiming> out;
  for (const GemmShape& s : shapes) out.push_back({s, 0, 0, ""});
  const GemmTypes t = TypesOf(type);
  ST_ASSIGN_OR_RETURN(const size_t free_bytes, FreeBytes());
  const size_t usable = free_bytes / 10 * 7 > kGemmWorkspaceBytes ? free_bytes / 10 * 7 - kGemmWorkspaceBytes : 0;
  GemmBuffers buf;
  PlanGemmBuffers(t, usable, &out, &buf);
  if (buf.x_elems == 0) return out;
  Stream stream;
  ST_RETURN_IF_ERROR(stream.Create());
  LtHandle lt;
  GPUCAL_LT(cublasLtCreate(&lt.h));
  Events ev;
  ST_RETURN_IF_ERROR(ev.Create(2 * static_cast<size_t>(std::max(max_reps, 3))));
  ST_RETURN_IF_ERROR(buf.x.Allocate(t.ab_bytes * static_cast<size_t>(buf.x_elems)));
  ST_RETURN_IF_ERROR(buf.w.Allocate(t.ab_bytes * static_cast<size_t>(buf.w_elems)));
  ST_RETURN_IF_ERROR(buf.out.Allocate(t.cd_bytes * static_cast<size_t>(buf.out_elems)));
  ST_RETURN_IF_ERROR(buf.workspace.Allocate(kGemmWorkspaceBytes));
  ST_RETURN_IF_ERROR(FillInputs(type, buf.x.get(), buf.x_elems, 1, stream.get()));
  ST_RETURN_IF_ERROR(FillInputs(type, buf.w.get(), buf.w_elems, 2, stream.get()));
  GPUCAL_CUDA(cudaMemsetAsync(buf.out.get(), 0, t.cd_bytes * static_cast<size_t>(buf.out_elems), stream.get()));
  GPUCAL_CUDA(cudaStreamSynchronize(stream.get()));
  for (GemmTiming& g : out) {
    if (!g.note.empty()) continue;
    // One shape's refusal (cuBLASLt's NOT_SUPPORTED, ...) is that shape's
    // note; a fault of the device fails the shapes after it the same way.
    const Status st = TimeOneGemm(lt.h, type, buf, peak_tflops, target_s, max_reps, budget, ev, stream.get(), &g);
    if (!st.ok()) g.median_s = 0, g.note = "failed: " + st.message();
  }
  return out;
}

Result<BandwidthTiming> TimeBandwidth(int64_t bytes, int reps, const Budget& budget) {
  BandwidthTiming r;
  reps = std::max(reps, 1);
  ST_ASSIGN_OR_RETURN(const size_t free_bytes, FreeBytes());
  // Three arrays (the residual add's a, b, out), 16-byte multiples.
  const auto cap = static_cast<int64_t>(free_bytes / 10 * 7 / 3);
  r.bytes = std::min(bytes, cap) / 16 * 16;
  if (r.bytes < (int64_t{1} << 20)) {
    r.note = "not measured: less than 3 MiB of free GPU memory";
    return r;
  }
  // Each run moves at most 3 x bytes; at 100 GB/s (far below any HBM).
  const double estimate_s = 3.0 * 3.0 * static_cast<double>(r.bytes) * (reps + 2) / 100e9;
  if (!budget.Allows(estimate_s)) {
    r.note = "skipped: time budget";
    return r;
  }
  const auto n = static_cast<size_t>(r.bytes);
  DeviceBuffer a, b, c;
  ST_RETURN_IF_ERROR(a.Allocate(n));
  ST_RETURN_IF_ERROR(b.Allocate(n));
  ST_RETURN_IF_ERROR(c.Allocate(n));
  Stream stream;
  ST_RETURN_IF_ERROR(stream.Create());
  Events ev;
  ST_RETURN_IF_ERROR(ev.Create(2 * static_cast<size_t>(reps)));
  ST_RETURN_IF_ERROR(Fill(a.as<float>(), r.bytes / 4, 3, stream.get()));
  ST_RETURN_IF_ERROR(Fill(b.as<float>(), r.bytes / 4, 4, stream.get()));
  ST_ASSIGN_OR_RETURN(const int sms, SmCount());
  const int64_t n4 = r.bytes / 16;
  const auto copy = [&]() -> Status {
    CopyKernel<<<static_cast<unsigned>(sms * 8), 256, 0, stream.get()>>>(a.as<const float4>(), b.as<float4>(), n4);
    GPUCAL_CUDA(cudaGetLastError());
    return Status::Ok();
  };
  const auto device_copy = [&]() -> Status {
    GPUCAL_CUDA(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice, stream.get()));
    return Status::Ok();
  };
  ST_ASSIGN_OR_RETURN(const double copy_s, MedianSeconds(copy, 2, reps, ev, stream.get()));
  ST_ASSIGN_OR_RETURN(const double memcpy_s, MedianSeconds(device_copy, 2, reps, ev, stream.get()));
  r.copy_gbps = 2.0 * static_cast<double>(r.bytes) / copy_s / 1e9;
  r.memcpy_gbps = 2.0 * static_cast<double>(r.bytes) / memcpy_s / 1e9;
  // The project's own element-wise kernel last: it has never run on a
  // device before, so a fault here leaves the figures above intact.
  cuda::Context ctx;
  ctx.stream = stream.get();
  const int64_t elems = r.bytes / 2;
  const auto residual = [&]() -> Status {
    return cuda::ResidualForward(ctx, c.as<cuda::bf16>(), a.as<const cuda::bf16>(), b.as<const cuda::bf16>(), elems);
  };
  auto residual_s = MedianSeconds(residual, 2, reps, ev, stream.get());
  if (residual_s.ok()) {
    r.residual_gbps = 3.0 * static_cast<double>(r.bytes) / *residual_s / 1e9;
  } else {
    r.note = "ResidualForward failed: " + residual_s.status().message();
  }
  return r;
}

Result<LaunchTiming> TimeLaunches(int launches, int rounds) {
  LaunchTiming r;
  launches = std::max(launches, 1), rounds = std::max(rounds, 1);
  r.launches = launches;
  Stream stream;
  ST_RETURN_IF_ERROR(stream.Create());
  Events ev;
  ST_RETURN_IF_ERROR(ev.Create(2));
  DeviceBuffer a, b;
  constexpr int64_t kSmallBytes = 64 * 1024;
  ST_RETURN_IF_ERROR(a.Allocate(kSmallBytes));
  ST_RETURN_IF_ERROR(b.Allocate(kSmallBytes));
  GPUCAL_CUDA(cudaMemsetAsync(a.get(), 0, kSmallBytes, stream.get()));
  for (int i = 0; i < 100; ++i) EmptyKernel<<<1, 32, 0, stream.get()>>>();  // module load, warm queue
  GPUCAL_CUDA(cudaGetLastError());
  GPUCAL_CUDA(cudaStreamSynchronize(stream.get()));
  std::vector<double> issue, empty, small;
  for (int round = 0; round < rounds; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; ++i) EmptyKernel<<<1, 32, 0, stream.get()>>>();
    const auto t1 = std::chrono::steady_clock::now();
    GPUCAL_CUDA(cudaGetLastError());
    GPUCAL_CUDA(cudaStreamSynchronize(stream.get()));
    issue.push_back(std::chrono::duration<double>(t1 - t0).count() / launches * 1e6);

    GPUCAL_CUDA(cudaEventRecord(ev[0], stream.get()));
    for (int i = 0; i < launches; ++i) EmptyKernel<<<1, 32, 0, stream.get()>>>();
    GPUCAL_CUDA(cudaEventRecord(ev[1], stream.get()));
    GPUCAL_CUDA(cudaGetLastError());
    GPUCAL_CUDA(cudaStreamSynchronize(stream.get()));
    ST_ASSIGN_OR_RETURN(const double empty_s, ev.Seconds(0, 1));
    empty.push_back(empty_s / launches * 1e6);

    GPUCAL_CUDA(cudaEventRecord(ev[0], stream.get()));
    for (int i = 0; i < launches; ++i) {
      CopyKernel<<<16, 256, 0, stream.get()>>>(a.as<const float4>(), b.as<float4>(), kSmallBytes / 16);
    }
    GPUCAL_CUDA(cudaEventRecord(ev[1], stream.get()));
    GPUCAL_CUDA(cudaGetLastError());
    GPUCAL_CUDA(cudaStreamSynchronize(stream.get()));
    ST_ASSIGN_OR_RETURN(const double small_s, ev.Seconds(0, 1));
    small.push_back(small_s / launches * 1e6);
  }
  r.issue_us = Median(issue);
  r.empty_gpu_us = Median(empty);
  r.small_gpu_us = Median(small);
  return r;
}

namespace {

struct AttentionBuffers {
  DeviceBuffer qkv, out, dout, dqkv, att, datt, workspace;
};

size_t AttentionBytes(const AttentionShape& s) {
  const auto n = static_cast<size_t>(s.batch * s.seq * s.hidden);
  const auto scores = static_cast<size_t>(s.batch * s.heads) * static_cast<size_t>(s.seq * s.seq);
  return 2 * (8 * n + 2 * scores) + cuda::AttentionWorkspaceBytes(s.batch, s.seq, s.hidden, cuda::DType::kBF16);
}

Status TimeOneAttention(const cuda::Context& ctx, int reps, double bf16_peak_tflops, double hbm_tbps,
                        const Budget& budget, const Events& ev, AttentionTiming* a) {
  const AttentionShape& s = a->shape;
  const double b = static_cast<double>(s.batch), t = static_cast<double>(s.seq), c = static_cast<double>(s.hidden);
  // The kernel computes all T x T scores: 12 b t^2 c FLOPs forward and
  // backward at a tenth of the peak, and its softmax passes over the
  // scores (about 8 bf16 reads or writes each) at a third of HBM.
  const double estimate_s = 12 * b * t * t * c / (std::max(bf16_peak_tflops, 1.0) * 1e12 * 0.1) +
                            8 * 2 * b * static_cast<double>(s.heads) * t * t / (std::max(hbm_tbps, 0.1) * 1e12 / 3);
  if (!budget.Allows(estimate_s * (reps + 1) + 0.1)) {
    a->note = "skipped: time budget";
    return Status::Ok();
  }
  ST_ASSIGN_OR_RETURN(const size_t free_bytes, FreeBytes());
  if (AttentionBytes(s) > free_bytes / 10 * 7) {
    a->note = "does not fit in 70% of free GPU memory";
    return Status::Ok();
  }
  const int64_t n = s.batch * s.seq * s.hidden, scores = s.batch * s.heads * s.seq * s.seq;
  AttentionBuffers buf;
  ST_RETURN_IF_ERROR(buf.qkv.Allocate(2 * static_cast<size_t>(3 * n)));
  ST_RETURN_IF_ERROR(buf.dqkv.Allocate(2 * static_cast<size_t>(3 * n)));
  ST_RETURN_IF_ERROR(buf.out.Allocate(2 * static_cast<size_t>(n)));
  ST_RETURN_IF_ERROR(buf.dout.Allocate(2 * static_cast<size_t>(n)));
  ST_RETURN_IF_ERROR(buf.att.Allocate(2 * static_cast<size_t>(scores)));
  ST_RETURN_IF_ERROR(buf.datt.Allocate(2 * static_cast<size_t>(scores)));
  ST_RETURN_IF_ERROR(
      buf.workspace.Allocate(cuda::AttentionWorkspaceBytes(s.batch, s.seq, s.hidden, cuda::DType::kBF16)));
  ST_RETURN_IF_ERROR(Fill(buf.qkv.as<cuda::bf16>(), 3 * n, 5, ctx.stream));
  ST_RETURN_IF_ERROR(Fill(buf.dout.as<cuda::bf16>(), n, 6, ctx.stream));
  GPUCAL_CUDA(cudaMemsetAsync(buf.dqkv.get(), 0, 2 * static_cast<size_t>(3 * n), ctx.stream));
  auto* ws = buf.workspace.as<cuda::bf16>();
  const auto fwd = [&]() -> Status {
    return cuda::AttentionForward(ctx, buf.out.as<cuda::bf16>(), buf.att.as<cuda::bf16>(),
                                  buf.qkv.as<const cuda::bf16>(), ws, s.batch, s.seq, s.hidden, s.heads);
  };
  const auto bwd = [&]() -> Status {
    return cuda::AttentionBackward(ctx, buf.dqkv.as<cuda::bf16>(), buf.datt.as<cuda::bf16>(),
                                   buf.dout.as<const cuda::bf16>(), buf.qkv.as<const cuda::bf16>(),
                                   buf.att.as<const cuda::bf16>(), ws, s.batch, s.seq, s.hidden, s.heads);
  };
  // The backward reads the forward's probabilities and its per-head copies
  // (workspace slots 0-2 are rewritten by both, slot 3 is the forward's).
  const auto both = [&]() -> Status {
    ST_RETURN_IF_ERROR(fwd());
    return bwd();
  };
  ST_RETURN_IF_ERROR(both());
  GPUCAL_CUDA(cudaStreamSynchronize(ctx.stream));
  std::vector<double> f, w;
  for (int r = 0; r < reps; ++r) {
    GPUCAL_CUDA(cudaEventRecord(ev[0], ctx.stream));
    ST_RETURN_IF_ERROR(fwd());
    GPUCAL_CUDA(cudaEventRecord(ev[1], ctx.stream));
    ST_RETURN_IF_ERROR(bwd());
    GPUCAL_CUDA(cudaEventRecord(ev[2], ctx.stream));
    GPUCAL_CUDA(cudaStreamSynchronize(ctx.stream));
    ST_ASSIGN_OR_RETURN(const double fs, ev.Seconds(0, 1));
    ST_ASSIGN_OR_RETURN(const double bs, ev.Seconds(1, 2));
    f.push_back(fs), w.push_back(bs);
  }
  a->fwd_s = Median(f), a->bwd_s = Median(w);
  return Status::Ok();
}

}  // namespace

Result<std::vector<AttentionTiming>> TimeProjectAttention(const std::vector<AttentionShape>& shapes, int reps,
                                                          double bf16_peak_tflops, double hbm_tbps,
                                                          const Budget& budget) {
  std::vector<AttentionTiming> out;
  for (const AttentionShape& s : shapes) out.push_back({s, 0, 0, ""});
  Stream stream;
  ST_RETURN_IF_ERROR(stream.Create());
  LtHandle lt;
  GPUCAL_LT(cublasLtCreate(&lt.h));
  DeviceBuffer lt_workspace;
  ST_RETURN_IF_ERROR(lt_workspace.Allocate(cuda::kCublasLtWorkspaceBytes));
  Events ev;
  ST_RETURN_IF_ERROR(ev.Create(3));
  cuda::Context ctx;
  ctx.lt = lt.h;
  ctx.lt_workspace = lt_workspace.get();
  ctx.lt_workspace_bytes = cuda::kCublasLtWorkspaceBytes;
  ctx.stream = stream.get();
  for (AttentionTiming& a : out) {
    if (a.shape.heads <= 0 || a.shape.hidden % a.shape.heads != 0) {
      a.note = "hidden must be a multiple of heads";
      continue;
    }
    const Status st = TimeOneAttention(ctx, std::max(reps, 1), bf16_peak_tflops, hbm_tbps, budget, ev, &a);
    if (!st.ok()) a.fwd_s = a.bwd_s = 0, a.note = "failed: " + st.message();
  }
  return out;
}

}  // namespace scaletrain::gpucal
