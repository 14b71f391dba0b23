// Linear layers through cuBLASLt: bf16 or fp32 storage, fp32 accumulation,
// bias and GELU in the epilogue where cuBLASLt offers it.
#include <string>

#include "kernels/cuda/common.cuh"

namespace scaletrain::cuda {
namespace detail {
namespace {

cublasLtEpilogue_t ToLt(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGelu: return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::kGeluBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::kGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string("cuBLASLt ") + what + " failed: status " +
                  std::to_string(static_cast<int>(s)));
}

// Owns the descriptors of one call. Creating them per call costs a few
// microseconds of host time; a cache keyed by plan is a later optimisation.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

Status MakeLayout(cublasLtMatrixLayout_t* out, cudaDataType_t type, const LtMatrix& m) {
  ST_RETURN_IF_ERROR(LtStatus(
      cublasLtMatrixLayoutCreate(out, type, static_cast<uint64_t>(m.rows),
                                 static_cast<uint64_t>(m.cols), m.ld),
      "MatrixLayoutCreate"));
  if (m.batch > 1) {
    const int32_t count = static_cast<int32_t>(m.batch);
    const int64_t stride = m.stride;
    ST_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutSetAttribute(
                                    *out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                    sizeof(count)),
                                "layout batch count"));
    ST_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutSetAttribute(
                                    *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                    sizeof(stride)),
                                "layout batch stride"));
  }
  return Status::Ok();
}

}  // namespace

Status RunLtGemm(const Context& ctx, const LtGemmPlan& plan, cudaDataType_t type,
                 const GemmArgs& args) {
  if (plan.m == 0 || plan.n == 0) return Status::Ok();
  LtDescriptors d;
  ST_RETURN_IF_ERROR(
      LtStatus(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate"));
  const cublasOperation_t ta = plan.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = plan.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  ST_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa"));
  ST_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb"));
  const cublasLtEpilogue_t ep = ToLt(args.epilogue);
  if (ep != CUBLASLT_EPILOGUE_DEFAULT) {
    ST_RETURN_IF_ERROR(LtStatus(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)),
        "epilogue"));
  }
  if (args.bias != nullptr) {
    ST_RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute(
                                    d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias,
                                    sizeof(args.bias)),
                                "bias pointer"));
  }
  if (args.aux != nullptr) {
    ST_RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute(
                                    d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &args.aux,
                                    sizeof(args.aux)),
                                "aux pointer"));
    ST_RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute(
                                    d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &args.aux_ld,
                                    sizeof(args.aux_ld)),
                                "aux ld"));
  }
  ST_RETURN_IF_ERROR(MakeLayout(&d.a, type, plan.a));
  ST_RETURN_IF_ERROR(MakeLayout(&d.b, type, plan.b));
  ST_RETURN_IF_ERROR(MakeLayout(&d.c, type, plan.c));
  ST_RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceCreate(&d.pref), "PreferenceCreate"));
  const uint64_t ws = ctx.lt_workspace_bytes;
  ST_RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceSetAttribute(
                                  d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                  sizeof(ws)),
                              "workspace preference"));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx.lt, d.op, d.a, d.b, d.c, d.c,
                                                           d.pref, 1, &heuristic, &found);
  if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0)) {
    return FailedPrecondition("cuBLASLt offers no algorithm for this matmul (m=" +
                              std::to_string(plan.m) + " n=" + std::to_string(plan.n) +
                              " k=" + std::to_string(plan.k) + ")");
  }
  ST_RETURN_IF_ERROR(LtStatus(hs, "AlgoGetHeuristic"));
  return LtStatus(cublasLtMatmul(ctx.lt, d.op, &args.alpha, args.a, d.a, args.b, d.b, &args.beta,
                                 args.c, d.c, args.c, d.c, &heuristic.algo, ctx.lt_workspace,
                                 ctx.lt_workspace_bytes, ctx.stream),
                  "Matmul");
}

}  // namespace detail

namespace {
using detail::FromFloat;
using detail::Grid;
using detail::ToFloat;

// Unfused epilogue: x = out + bias; pre = x (optional); out = gelu ? gelu(x) : x.
template <typename T>
__global__ void BiasGeluKernel(T* out, T* pre, const T* bias, int64_t N, int64_t OC, bool gelu) {
  const int64_t n = N * OC;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x = ToFloat(out[i]);
    if (bias != nullptr) x += ToFloat(bias[i % OC]);
    if (pre != nullptr) pre[i] = FromFloat<T>(x);
    out[i] = FromFloat<T>(gelu ? GeluValue(x) : x);
  }
}

// Unfused DGELU: d *= gelu'(pre).
template <typename T>
__global__ void ScaleByGeluDerivativeKernel(T* d, const T* pre, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    d[i] = FromFloat<T>(ToFloat(d[i]) * GeluDerivative(ToFloat(pre[i])));
  }
}

template <typename T>
struct ReadColumn {
  const T* x;
  int64_t ld;
  __device__ float2 operator()(int64_t r, int64_t c) const {
    return make_float2(ToFloat(x[r * ld + c]), 0.0f);
  }
};

}  // namespace

template <typename T>
Status MatmulForward(const Context& ctx, T* out, T* pre_gelu, const T* inp, const T* weight,
                     const T* bias, int64_t N, int64_t C, int64_t OC, bool gelu) {
  const cudaDataType_t type = detail::CudaType<T>();
  const RowMajorGemm g = LinearForwardGemm(N, C, OC);
  const ForwardEpiloguePlan ep =
      PlanForwardEpilogue(bias != nullptr, gelu, gelu && pre_gelu != nullptr, OC);
  if (!ep.separate_gelu_kernel) {
    const bool aux = ep.epilogue == Epilogue::kGeluAux || ep.epilogue == Epilogue::kGeluAuxBias;
    const bool use_bias = bias != nullptr;
    const Status s = detail::RunRowMajorGemm(ctx, g, type, inp, weight, out, 1.0f, 0.0f,
                                             ep.epilogue, use_bias ? bias : nullptr,
                                             aux ? pre_gelu : nullptr, aux ? OC : 0);
    if (s.code() != StatusCode::kFailedPrecondition) return s;
    // No fused algorithm for this shape/epilogue: plain product, then bias/GELU.
  }
  ST_RETURN_IF_ERROR(detail::RunRowMajorGemm(ctx, g, type, inp, weight, out, 1.0f, 0.0f));
  if (bias == nullptr && !gelu) return Status::Ok();
  const Launch1D l = ElementwiseLaunch(N * OC);
  if (l.grid == 0) return Status::Ok();
  BiasGeluKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(out, gelu ? pre_gelu : nullptr,
                                                              bias, N, OC, gelu);
  return detail::LaunchStatus("BiasGeluKernel");
}

template <typename T>
Status MatmulBackward(const Context& ctx, T* dinp, T* dweight, T* dbias, const T* dout,
                      const T* inp, const T* weight, float* bias_workspace, int64_t N, int64_t C,
                      int64_t OC, const T* gelu_pre) {
  const cudaDataType_t type = detail::CudaType<T>();
  if (dinp != nullptr) {
    const RowMajorGemm g = LinearBackwardInputGemm(N, C, OC);
    if (gelu_pre == nullptr) {
      ST_RETURN_IF_ERROR(detail::RunRowMajorGemm(ctx, g, type, dout, weight, dinp, 1.0f, 1.0f));
    } else {
      const Status s =
          CanFuseDGelu(C)
              ? detail::RunRowMajorGemm(ctx, g, type, dout, weight, dinp, 1.0f, 0.0f,
                                        Epilogue::kDGelu, nullptr, const_cast<T*>(gelu_pre), C)
              : FailedPrecondition("DGELU needs C % 8 == 0");
      if (s.code() == StatusCode::kFailedPrecondition) {
        ST_RETURN_IF_ERROR(
            detail::RunRowMajorGemm(ctx, g, type, dout, weight, dinp, 1.0f, 0.0f));
        const Launch1D l = ElementwiseLaunch(N * C);
        if (l.grid > 0) {
          ScaleByGeluDerivativeKernel<T><<<Grid(l.grid), l.block, 0, ctx.stream>>>(
              dinp, gelu_pre, N * C);
          ST_RETURN_IF_ERROR(detail::LaunchStatus("ScaleByGeluDerivativeKernel"));
        }
      } else {
        ST_RETURN_IF_ERROR(s);
      }
    }
  }
  if (dweight != nullptr) {
    ST_RETURN_IF_ERROR(detail::RunRowMajorGemm(ctx, LinearBackwardWeightGemm(N, C, OC), type,
                                               dout, inp, dweight, 1.0f, 1.0f));
  }
  if (dbias != nullptr) {
    // Our own column sums rather than cuBLASLt's BGRADB epilogue: BGRADB
    // overwrites the bias gradient, and the contract accumulates.
    ST_RETURN_IF_ERROR(detail::ColumnReduce<T>(ctx, dbias, nullptr, bias_workspace, N, OC,
                                               ReadColumn<T>{dout, OC}, "bias gradient"));
  }
  return Status::Ok();
}

#define ST_INSTANTIATE(T)                                                                      \
  template Status MatmulForward<T>(const Context&, T*, T*, const T*, const T*, const T*,       \
                                   int64_t, int64_t, int64_t, bool);                           \
  template Status MatmulBackward<T>(const Context&, T*, T*, T*, const T*, const T*, const T*, \
                                    float*, int64_t, int64_t, int64_t, const T*);
ST_INSTANTIATE(float)
ST_INSTANTIATE(__nv_bfloat16)
#undef ST_INSTANTIATE

}  // namespace scaletrain::cuda
