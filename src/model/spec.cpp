#include "model/spec.h"

namespace scaletrain {

const char* ArchName(Arch a) { return a == Arch::kGPT2 ? "gpt2" : "llama"; }

Result<Arch> ArchFromName(const std::string& name) {
  if (name == "gpt2" || name == "gpt") return Arch::kGPT2;
  if (name == "llama") return Arch::kLlama;
  return InvalidArgument("unknown model arch '" + name + "'; use \"gpt2\" or \"llama\"");
}

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kGelu:
      return "gelu";
    case Activation::kSwiGLU:
      return "swiglu";
    case Activation::kSquaredReLU:
      return "squared_relu";
  }
  return "?";
}

Result<Activation> ActivationFromName(const std::string& name) {
  for (Activation a : {Activation::kGelu, Activation::kSwiGLU, Activation::kSquaredReLU}) {
    if (name == ActivationName(a)) return a;
  }
  return InvalidArgument("unknown activation '" + name + "'; use \"gelu\", \"swiglu\" or \"squared_relu\"");
}

Status ValidateModelSpec(const ModelSpec& s) {
  auto positive = [](const char* what, int64_t v) -> Status {
    if (v <= 0) return InvalidArgument(std::string("model ") + what + " must be positive, got " + std::to_string(v));
    return Status::Ok();
  };
  ST_RETURN_IF_ERROR(positive("n_layer", s.n_layer));
  ST_RETURN_IF_ERROR(positive("n_head", s.n_head));
  ST_RETURN_IF_ERROR(positive("n_kv_head", s.n_kv_head));
  ST_RETURN_IF_ERROR(positive("n_embd", s.n_embd));
  ST_RETURN_IF_ERROR(positive("ffn_hidden", s.ffn_hidden));
  ST_RETURN_IF_ERROR(positive("block_size", s.block_size));
  ST_RETURN_IF_ERROR(positive("vocab_size", s.vocab_size));
  if (s.n_embd % s.n_head != 0) {
    return InvalidArgument("model n_embd (" + std::to_string(s.n_embd) + ") is not divisible by n_head (" +
                           std::to_string(s.n_head) + "); pick n_head dividing n_embd");
  }
  if (s.n_head % s.n_kv_head != 0) {
    return InvalidArgument("model n_head (" + std::to_string(s.n_head) + ") is not divisible by n_kv_head (" +
                           std::to_string(s.n_kv_head) + "); pick n_kv_head dividing n_head");
  }
  if (s.arch == Arch::kGPT2 && s.n_kv_head != s.n_head) {
    return InvalidArgument("model n_kv_head (" + std::to_string(s.n_kv_head) + ") differs from n_head (" +
                           std::to_string(s.n_head) +
                           "): grouped-query attention is built in Llama-style blocks only; use arch = \"llama\" "
                           "(with activation and tied_embeddings as the model has them) or n_kv_head = n_head");
  }
  if (s.arch == Arch::kLlama && s.head_dim() % 2 != 0) {
    return InvalidArgument("model head dimension n_embd / n_head = " + std::to_string(s.head_dim()) +
                           " is odd; rotary embeddings (llama) rotate channel pairs: pick an even one");
  }
  if (!(s.rope_theta > 0.0) || !(s.norm_eps > 0.0)) {
    return InvalidArgument("model rope_theta and norm_eps must be > 0");
  }
  if (s.padded_vocab_size < s.vocab_size) {
    return InvalidArgument("padded_vocab_size must be >= vocab_size");
  }
  return Status::Ok();
}

Result<ModelSpec> ModelSpecFromConfig(const ModelConfig& cfg, int64_t data_vocab_size, int64_t vocab_multiple) {
  ModelSpec s;
  ST_ASSIGN_OR_RETURN(s.arch, ArchFromName(cfg.arch));
  const bool llama = s.arch == Arch::kLlama;
  s.name = llama ? "llama-custom" : "gpt2-custom";
  s.n_layer = cfg.n_layer;
  s.n_head = cfg.n_head;
  s.n_kv_head = cfg.n_kv_head > 0 ? cfg.n_kv_head : cfg.n_head;
  s.n_embd = cfg.n_embd;
  s.ffn_hidden = cfg.ffn_hidden > 0 ? cfg.ffn_hidden
                 : llama            ? RoundUp(8 * cfg.n_embd / 3, 8)
                                    : 4 * cfg.n_embd;
  s.tied_given = cfg.tied_embeddings;
  s.rope_theta = cfg.rope_theta;
  s.norm_eps = cfg.norm_eps;
  s.block_size = cfg.block_size;
  if (cfg.vocab_size != 0 && cfg.vocab_size < data_vocab_size) {
    return InvalidArgument("model.vocab_size (" + std::to_string(cfg.vocab_size) +
                           ") is smaller than the data's vocabulary (" + std::to_string(data_vocab_size) +
                           "); set model.vocab_size = 0 to take it from the data");
  }
  s.vocab_size = cfg.vocab_size != 0 ? cfg.vocab_size : data_vocab_size;
  s.padded_vocab_size = PaddedVocabSize(s.vocab_size, vocab_multiple, 1);
  ST_RETURN_IF_ERROR(ValidateModelSpec(s));
  return s;
}

double BlockForwardFlopsPerSequence(const ModelSpec& m) {
  const double s = m.block_size, h = m.n_embd, F = m.ffn_hidden;
  const double kvd = static_cast<double>(m.n_kv_head * m.head_dim());
  const double mlp_mats = static_cast<double>(m.mlp_matrices());
  const double per_token = 2.0 * h * (h + 2.0 * kvd)  // QKV
                           + 2.0 * h * h              // attention output projection
                           + 2.0 * mlp_mats * h * F   // MLP
                           + 4.0 * s * h;             // QK^T and AV over all s keys
  return per_token * s * static_cast<double>(m.n_layer);
}

double ModelFlopsPerSequence(const ModelSpec& m) {
  const double logits = 2.0 * m.n_embd * static_cast<double>(m.padded_vocab_size) * m.block_size;
  return 3.0 * (BlockForwardFlopsPerSequence(m) + logits);
}

}  // namespace scaletrain
