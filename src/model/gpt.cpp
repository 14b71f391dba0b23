#include "model/gpt.h"

#include <cmath>
#include <cstring>

#include "core/rng.h"
#include "kernels/cpu/ops.h"

namespace scaletrain {

// Activation slices, carved out of one buffer. Per-layer tensors are kept for
// backward; gradient scratch is shared by all layers (backward runs one
// layer at a time).
struct GPT::Acts {
  struct Layer {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *res2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
  };
  float* encoded;
  std::vector<Layer> layers;
  float *lnf, *lnf_mean, *lnf_rstd, *logits, *probs, *losses;
  // Gradient scratch.
  float *dres, *dln, *dqkv, *datty, *datt, *dfch, *dfch_gelu;
};

GPT::GPT(const ModelSpec& spec, int64_t max_batch)
    : spec_(spec), layout_(BuildParamLayout(spec)), max_batch_(max_batch) {}

GPT::~GPT() = default;

Result<std::unique_ptr<GPT>> GPT::Create(const ModelSpec& spec, int64_t max_batch,
                                         int64_t flat_multiple) {
  ST_RETURN_IF_ERROR(ValidateModelSpec(spec));
  if (spec.arch != Arch::kGPT2) {
    return InvalidArgument(std::string("the trainer runs GPT-2 style models only; arch '") +
                           ArchName(spec.arch) + "' is for the planner");
  }
  if (max_batch <= 0) return InvalidArgument("micro-batch size must be positive");
  std::unique_ptr<GPT> m(new GPT(spec, max_batch));
  auto off = [&](const std::string& name) { return m->layout_.Find(name)->offset; };
  m->wte_ = off("transformer.wte.weight");
  m->wpe_ = off("transformer.wpe.weight");
  m->lnfw_ = off("transformer.ln_f.weight");
  m->lnfb_ = off("transformer.ln_f.bias");
  for (int64_t l = 0; l < spec.n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    m->layer_off_.push_back({off(p + "ln_1.weight"), off(p + "ln_1.bias"),
                             off(p + "attn.c_attn.weight"), off(p + "attn.c_attn.bias"),
                             off(p + "attn.c_proj.weight"), off(p + "attn.c_proj.bias"),
                             off(p + "ln_2.weight"), off(p + "ln_2.bias"),
                             off(p + "mlp.c_fc.weight"), off(p + "mlp.c_fc.bias"),
                             off(p + "mlp.c_proj.weight"), off(p + "mlp.c_proj.bias")});
  }
  m->flat_numel_ = RoundUp(m->layout_.total_numel, std::max<int64_t>(1, flat_multiple));
  const size_t pbytes = static_cast<size_t>(m->flat_numel_) * sizeof(float);
  m->params_ = Buffer(pbytes);
  m->grads_ = Buffer(pbytes);
  m->a_ = std::make_unique<Acts>();
  // A dry run with no base counts the floats; then the real layout.
  m->acts_ = Buffer(m->LayOutActivations(nullptr) * sizeof(float));
  m->LayOutActivations(m->acts_.f32());
  return m;
}

size_t GPT::LayOutActivations(float* base) {
  const int64_t N = max_batch_ * spec_.block_size, C = spec_.n_embd, F = spec_.ffn_hidden;
  const int64_t att = max_batch_ * spec_.n_head * spec_.block_size * spec_.block_size;
  const int64_t Vp = spec_.padded_vocab_size;
  FloatArena arena(base);
  Acts& a = *a_;
  a.layers.resize(spec_.n_layer);
  for (auto& L : a.layers) {
    L.ln1 = arena.Take(N * C); L.ln1_mean = arena.Take(N); L.ln1_rstd = arena.Take(N);
    L.qkv = arena.Take(N * 3 * C); L.atty = arena.Take(N * C); L.att = arena.Take(att);
    L.attproj = arena.Take(N * C); L.res2 = arena.Take(N * C); L.ln2 = arena.Take(N * C);
    L.ln2_mean = arena.Take(N); L.ln2_rstd = arena.Take(N); L.fch = arena.Take(N * F);
    L.fch_gelu = arena.Take(N * F); L.fcproj = arena.Take(N * C); L.res3 = arena.Take(N * C);
  }
  a.encoded = arena.Take(N * C); a.lnf = arena.Take(N * C); a.lnf_mean = arena.Take(N);
  a.lnf_rstd = arena.Take(N); a.logits = arena.Take(N * Vp); a.probs = arena.Take(N * Vp);
  a.losses = arena.Take(N);
  a.dres = arena.Take(N * C); a.dln = arena.Take(N * C); a.dqkv = arena.Take(N * 3 * C);
  a.datty = arena.Take(N * C); a.datt = arena.Take(att); a.dfch = arena.Take(N * F);
  a.dfch_gelu = arena.Take(N * F);
  return arena.used_floats();
}

void GPT::InitWeights(uint64_t seed) {
  Rng rng(seed);
  float* p = params_.f32();
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(spec_.n_layer));
  for (const auto& e : layout_.entries) {
    float* w = p + e.offset;
    const bool is_norm = e.name.find("ln_") != std::string::npos;
    const bool is_bias = e.name.size() >= 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0;
    if (is_bias) {
      std::fill(w, w + e.numel, 0.0f);
    } else if (is_norm) {
      std::fill(w, w + e.numel, 1.0f);
    } else {
      const bool residual_proj = e.name.find("c_proj.weight") != std::string::npos;
      const float std = residual_proj ? proj_std : 0.02f;
      for (int64_t i = 0; i < e.numel; ++i) w[i] = std * rng.Normal();
    }
  }
  // Padding rows of the tied embedding are never looked up and never scored.
  const int64_t C = spec_.n_embd;
  std::fill(p + wte_ + spec_.vocab_size * C, p + wte_ + spec_.padded_vocab_size * C, 0.0f);
}

float GPT::Forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                   const std::function<void(int64_t)>& on_layer_done) {
  auto done = [&](int64_t layer) {
    if (on_layer_done) on_layer_done(layer);
  };
  const int64_t C = spec_.n_embd, F = spec_.ffn_hidden, NH = spec_.n_head;
  const int64_t V = spec_.vocab_size, Vp = spec_.padded_vocab_size, N = B * T;
  B_ = B;
  T_ = T;
  tokens_.assign(tokens, tokens + N);
  if (targets) {
    targets_.assign(targets, targets + N);
  } else {
    targets_.clear();
  }
  const float* p = params_.f32();
  Acts& a = *a_;
  cpu::EncoderForward(a.encoded, tokens, p + wte_, p + wpe_, B, T, C);
  done(-1);
  const float* residual = a.encoded;
  for (int64_t l = 0; l < spec_.n_layer; ++l) {
    const LayerOffsets& o = layer_off_[l];
    Acts::Layer& L = a.layers[l];
    cpu::LayerNormForward(L.ln1, L.ln1_mean, L.ln1_rstd, residual, p + o.ln1w, p + o.ln1b, N, C);
    cpu::MatmulForward(L.qkv, L.ln1, p + o.qkvw, p + o.qkvb, N, C, 3 * C);
    cpu::AttentionForward(L.atty, L.att, L.qkv, B, T, C, NH);
    cpu::MatmulForward(L.attproj, L.atty, p + o.attprojw, p + o.attprojb, N, C, C);
    cpu::ResidualForward(L.res2, residual, L.attproj, N * C);
    cpu::LayerNormForward(L.ln2, L.ln2_mean, L.ln2_rstd, L.res2, p + o.ln2w, p + o.ln2b, N, C);
    cpu::MatmulForward(L.fch, L.ln2, p + o.fcw, p + o.fcb, N, C, F);
    cpu::GeluForward(L.fch_gelu, L.fch, N * F);
    cpu::MatmulForward(L.fcproj, L.fch_gelu, p + o.fcprojw, p + o.fcprojb, N, F, C);
    cpu::ResidualForward(L.res3, L.res2, L.fcproj, N * C);
    residual = L.res3;
    done(l);
  }
  cpu::LayerNormForward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, p + lnfw_, p + lnfb_, N, C);
  cpu::MatmulForward(a.logits, a.lnf, p + wte_, nullptr, N, C, Vp);
  if (!targets) {
    done(spec_.n_layer);
    return 0.0f;
  }
  cpu::CrossEntropyForward(a.losses, a.probs, a.logits, targets, N, V, Vp);
  double sum = 0.0;
  for (int64_t i = 0; i < N; ++i) sum += a.losses[i];
  done(spec_.n_layer);
  return static_cast<float>(sum / static_cast<double>(N));
}

void GPT::Backward(float loss_scale, const std::function<void(int64_t)>& on_grads_ready) {
  auto ready = [&](int64_t layer) {
    if (on_grads_ready) on_grads_ready(layer);
  };
  const int64_t B = B_, T = T_, N = B * T;
  const int64_t C = spec_.n_embd, F = spec_.ffn_hidden, NH = spec_.n_head;
  const int64_t V = spec_.vocab_size, Vp = spec_.padded_vocab_size;
  const float* p = params_.f32();
  float* g = grads_.f32();
  Acts& a = *a_;
  auto zero = [](float* x, int64_t n) { std::memset(x, 0, static_cast<size_t>(n) * sizeof(float)); };

  // Loss -> logits (in place over probs) -> final norm.
  float* dlogits = a.probs;
  cpu::CrossEntropyBackward(dlogits, a.probs, targets_.data(),
                            loss_scale / static_cast<float>(N), N, V, Vp);
  zero(a.dln, N * C);
  cpu::MatmulBackward(a.dln, g + wte_, nullptr, dlogits, a.lnf, p + wte_, N, C, Vp);
  const float* last_residual = spec_.n_layer > 0 ? a.layers.back().res3 : a.encoded;
  zero(a.dres, N * C);
  cpu::LayerNormBackward(a.dres, g + lnfw_, g + lnfb_, a.dln, last_residual, p + lnfw_, a.lnf_mean,
                         a.lnf_rstd, N, C);
  ready(spec_.n_layer);

  // a.dres is the gradient of the residual stream; each residual add passes
  // it through unchanged, so one buffer serves all layers.
  for (int64_t l = spec_.n_layer - 1; l >= 0; --l) {
    const LayerOffsets& o = layer_off_[l];
    Acts::Layer& L = a.layers[l];
    const float* residual_in = l == 0 ? a.encoded : a.layers[l - 1].res3;
    // MLP half: res3 = res2 + fcproj(gelu(fc(ln2(res2)))).
    zero(a.dfch_gelu, N * F);
    cpu::MatmulBackward(a.dfch_gelu, g + o.fcprojw, g + o.fcprojb, a.dres, L.fch_gelu,
                        p + o.fcprojw, N, F, C);
    zero(a.dfch, N * F);
    cpu::GeluBackward(a.dfch, L.fch, a.dfch_gelu, N * F);
    zero(a.dln, N * C);
    cpu::MatmulBackward(a.dln, g + o.fcw, g + o.fcb, a.dfch, L.ln2, p + o.fcw, N, C, F);
    cpu::LayerNormBackward(a.dres, g + o.ln2w, g + o.ln2b, a.dln, L.res2, p + o.ln2w, L.ln2_mean,
                           L.ln2_rstd, N, C);
    // Attention half: res2 = res_in + attproj(attn(qkv(ln1(res_in)))).
    zero(a.datty, N * C);
    cpu::MatmulBackward(a.datty, g + o.attprojw, g + o.attprojb, a.dres, L.atty, p + o.attprojw,
                        N, C, C);
    zero(a.dqkv, N * 3 * C);
    cpu::AttentionBackward(a.dqkv, a.datt, a.datty, L.qkv, L.att, B, T, C, NH);
    zero(a.dln, N * C);
    cpu::MatmulBackward(a.dln, g + o.qkvw, g + o.qkvb, a.dqkv, L.ln1, p + o.qkvw, N, C, 3 * C);
    cpu::LayerNormBackward(a.dres, g + o.ln1w, g + o.ln1b, a.dln, residual_in, p + o.ln1w,
                           L.ln1_mean, L.ln1_rstd, N, C);
    ready(l);
  }
  cpu::EncoderBackward(g + wte_, g + wpe_, a.dres, tokens_.data(), B, T, C);
  ready(-1);
}

const float* GPT::logits(int64_t b, int64_t t) const {
  return a_->logits + (b * T_ + t) * spec_.padded_vocab_size;
}

}  // namespace scaletrain
