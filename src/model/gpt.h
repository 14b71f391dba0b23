// The GPT-2 model on one rank: parameters, gradients and activations each in
// one flat buffer allocated at creation, a forward and a backward written out
// op by op (DESIGN principle 3), reading the parameter-layout table for every
// offset (principle 1).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "model/param_layout.h"
#include "model/spec.h"

namespace scaletrain {

class GPT {
 public:
  // Allocates parameters and gradients (zeroed) and the activations for up to
  // max_batch sequences of spec.block_size tokens. The flat parameter and
  // gradient buffers are padded to a multiple of `flat_multiple` elements
  // (data parallelism splits them evenly); the padding stays zero.
  static Result<std::unique_ptr<GPT>> Create(const ModelSpec& spec, int64_t max_batch,
                                             int64_t flat_multiple = 1);
  ~GPT();

  const ModelSpec& spec() const { return spec_; }
  const ParamLayout& layout() const { return layout_; }
  int64_t num_params() const { return layout_.total_numel; }
  int64_t flat_numel() const { return flat_numel_; }  // num_params() + padding
  float* params() { return params_.f32(); }
  const float* params() const { return params_.f32(); }
  float* grads() { return grads_.f32(); }
  const float* grads() const { return grads_.f32(); }
  int64_t max_batch() const { return max_batch_; }
  size_t activation_bytes() const { return acts_.size_bytes(); }

  // GPT-2 initialisation (as nanoGPT): N(0, 0.02) for weights and embeddings,
  // residual projections N(0, 0.02/sqrt(2 n_layer)), biases 0, norms 1; the
  // padding rows of the embedding are 0. Deterministic in `seed`.
  void InitWeights(uint64_t seed);

  // tokens, targets: [B, T] with B <= max_batch, T <= block_size. targets
  // may be null (inference). Returns the mean cross-entropy (0 if no
  // targets). Logits of the last call stay readable through logits().
  // `on_layer_done(layer)`, if given, is called after the embeddings (-1),
  // each block, and the final norm, head and loss (n_layer): for traces.
  float Forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                const std::function<void(int64_t layer)>& on_layer_done = nullptr);
  // Back-propagates loss_scale x the mean loss of the last Forward (which
  // must have had targets) and ADDS to grads(): micro-batches accumulate.
  // `on_grads_ready(layer)`, if given, is called as soon as the gradients of
  // every parameter entry with that `layer` (see ParamEntry) are complete:
  // n_layer (final norm), then n_layer-1 ... 0, then -1 (embeddings, whose
  // tied weight also collects the head's gradient). Data parallelism starts
  // reducing a gradient bucket from there while backward goes on.
  void Backward(float loss_scale, const std::function<void(int64_t layer)>& on_grads_ready = nullptr);
  void ZeroGrad() { grads_.Zero(); }

  // Row (b, t) of the last forward's logits, padded_vocab_size wide.
  const float* logits(int64_t b, int64_t t) const;

 private:
  GPT(const ModelSpec& spec, int64_t max_batch);
  struct Acts;
  struct LayerOffsets {
    int64_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  // Points every activation slice into `base` (null: a dry run); returns
  // the floats used.
  size_t LayOutActivations(float* base);

  ModelSpec spec_;
  ParamLayout layout_;
  int64_t max_batch_;
  int64_t flat_numel_ = 0;
  int64_t wte_, wpe_, lnfw_, lnfb_;
  std::vector<LayerOffsets> layer_off_;
  Buffer params_, grads_, acts_;
  std::unique_ptr<Acts> a_;
  // Shape and inputs of the last forward, for backward.
  int64_t B_ = 0, T_ = 0;
  std::vector<int32_t> tokens_, targets_;
};

}  // namespace scaletrain
