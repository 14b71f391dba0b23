// The description of a model, shared by the trainer (which allocates and runs
// it) and the planner (which predicts it). One struct covers GPT-2/GPT-3
// style blocks (LayerNorm, GELU MLP, learned positions, biases, tied head) and
// Llama style blocks (RMSNorm, SwiGLU, rotary positions, GQA, untied head).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "core/config.h"
#include "core/status.h"

namespace scaletrain {

enum class Arch { kGPT2, kLlama };

// The MLP's nonlinearity: GeLU (GPT: two matrices), SwiGLU (Llama: gate and
// up projections, three matrices), squared ReLU (Nemotron-4, Primer: two).
enum class Activation { kGelu, kSwiGLU, kSquaredReLU };
const char* ActivationName(Activation a);  // "gelu", "swiglu", "squared_relu"
Result<Activation> ActivationFromName(const std::string& name);

struct ModelSpec {
  std::string name = "gpt";
  Arch arch = Arch::kGPT2;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;    // == n_head unless grouped-query attention
  int64_t n_embd = 0;       // hidden size
  int64_t ffn_hidden = 0;   // MLP inner width (4 * n_embd for GPT)
  int64_t block_size = 0;   // sequence length
  int64_t vocab_size = 0;   // real vocabulary
  int64_t padded_vocab_size = 0;  // rows of the embedding (>= vocab_size)
  // Set where a model file or a validation row states them; otherwise the
  // arch's: GPT-2 GeLU with the head tied to the embedding, Llama SwiGLU
  // with an untied head. (The trainer runs GPT-2 with GeLU and a tied head, and Llama with SwiGLU.)
  std::optional<Activation> activation_given;
  std::optional<bool> tied_given;
  double rope_theta = 10000.0;  // llama: rotary base
  double norm_eps = 1e-5;       // llama: RMSNorm epsilon (GPT-2's LayerNorm: 1e-5)

  int64_t head_dim() const { return n_embd / n_head; }
  Activation activation() const {
    return activation_given.value_or(arch == Arch::kLlama ? Activation::kSwiGLU : Activation::kGelu);
  }
  int64_t mlp_matrices() const { return activation() == Activation::kSwiGLU ? 3 : 2; }
  bool tied_embeddings() const { return tied_given.value_or(arch == Arch::kGPT2); }
  bool learned_positions() const { return arch == Arch::kGPT2; }
  bool has_bias() const { return arch == Arch::kGPT2; }
};

const char* ArchName(Arch a);
Result<Arch> ArchFromName(const std::string& name);

// Rounds v up to a multiple of m.
inline int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The vocabulary padding rule, the one place it is written: the embedding
// has the vocabulary's rows rounded up to a multiple of `multiple` x `tp`,
// so that tensor parallelism splits them evenly (Megatron-LM's
// make-vocab-size-divisible-by x tp). Padding rows are never scored.
inline int64_t PaddedVocabSize(int64_t vocab_size, int64_t multiple, int64_t tp) {
  return RoundUp(vocab_size, std::max<int64_t>(1, multiple) * std::max<int64_t>(1, tp));
}

// The spec of the [model] config section (arch gpt2 or llama). `data_vocab_size` is
// the vocabulary of the data; the config's vocab_size (if non-zero) must be
// at least that. The embedding is padded to a multiple of `vocab_multiple`.
Result<ModelSpec> ModelSpecFromConfig(const ModelConfig& cfg, int64_t data_vocab_size,
                                      int64_t vocab_multiple = 1);
// Model FLOPs of one sequence, forward + backward (3x forward), attention
// counted over the full s x s scores as Narayanan et al. and MosaicML do:
// the numerator of MFU, in the planner and the trainer alike.
double ModelFlopsPerSequence(const ModelSpec& m);
// Forward FLOPs of the transformer blocks of one sequence (what full
// recomputation repeats).
double BlockForwardFlopsPerSequence(const ModelSpec& m);

// Checks the dimensions are positive and divide (heads, kv heads).
Status ValidateModelSpec(const ModelSpec& spec);

}  // namespace scaletrain
