#include "model/param_layout.h"

namespace scaletrain {

const char* TpSplitName(TpSplit s) {
  switch (s) {
    case TpSplit::kReplicated: return "replicated";
    case TpSplit::kColumn: return "column";
    case TpSplit::kRow: return "row";
    case TpSplit::kVocab: return "vocab";
  }
  return "?";
}

const ParamEntry* ParamLayout::Find(const std::string& name) const {
  for (const auto& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

int64_t ParamLayout::NumelOnStage(int64_t stage) const {
  int64_t n = 0;
  for (const auto& e : entries) {
    if (stage < 0 || e.pp_stage == stage) n += e.numel;
  }
  return n;
}

int64_t StageOfLayer(int64_t layer, int64_t n_layer, int64_t pp) {
  if (pp <= 1) return 0;
  const int64_t base = n_layer / pp, extra = n_layer % pp;
  // The first `extra` stages hold base+1 layers, the rest base.
  const int64_t big = extra * (base + 1);
  if (layer < big) return layer / (base + 1);
  return extra + (layer - big) / std::max<int64_t>(base, 1);
}

namespace {

struct Builder {
  ParamLayout layout;
  void Add(std::string name, Shape shape, TpSplit split, int64_t layer, int64_t stage, bool decay) {
    ParamEntry e;
    e.name = std::move(name);
    e.numel = NumElements(shape);
    e.shape = std::move(shape);
    e.offset = layout.total_numel;
    e.tp_split = split;
    e.layer = layer;
    e.pp_stage = stage;
    e.weight_decay = decay;
    layout.total_numel += e.numel;
    layout.entries.push_back(std::move(e));
  }
};

void BuildGpt2(const ModelSpec& s, int64_t pp, Builder& b) {
  const int64_t C = s.n_embd, F = s.ffn_hidden, L = s.n_layer;
  const int64_t last = std::max<int64_t>(pp, 1) - 1;
  b.Add("transformer.wte.weight", {s.padded_vocab_size, C}, TpSplit::kVocab, -1, 0, true);
  b.Add("transformer.wpe.weight", {s.block_size, C}, TpSplit::kReplicated, -1, 0, true);
  for (int64_t l = 0; l < L; ++l) {
    const int64_t st = StageOfLayer(l, L, pp);
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    b.Add(p + "ln_1.weight", {C}, TpSplit::kReplicated, l, st, false);
    b.Add(p + "ln_1.bias", {C}, TpSplit::kReplicated, l, st, false);
    b.Add(p + "attn.c_attn.weight", {3 * C, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "attn.c_attn.bias", {3 * C}, TpSplit::kColumn, l, st, false);
    b.Add(p + "attn.c_proj.weight", {C, C}, TpSplit::kRow, l, st, true);
    b.Add(p + "attn.c_proj.bias", {C}, TpSplit::kReplicated, l, st, false);
    b.Add(p + "ln_2.weight", {C}, TpSplit::kReplicated, l, st, false);
    b.Add(p + "ln_2.bias", {C}, TpSplit::kReplicated, l, st, false);
    b.Add(p + "mlp.c_fc.weight", {F, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "mlp.c_fc.bias", {F}, TpSplit::kColumn, l, st, false);
    b.Add(p + "mlp.c_proj.weight", {C, F}, TpSplit::kRow, l, st, true);
    b.Add(p + "mlp.c_proj.bias", {C}, TpSplit::kReplicated, l, st, false);
  }
  b.Add("transformer.ln_f.weight", {C}, TpSplit::kReplicated, L, last, false);
  b.Add("transformer.ln_f.bias", {C}, TpSplit::kReplicated, L, last, false);
  // The lm head is tied to transformer.wte.weight: no entry of its own.
}

void BuildLlama(const ModelSpec& s, int64_t pp, Builder& b) {
  const int64_t C = s.n_embd, F = s.ffn_hidden, L = s.n_layer;
  const int64_t kv = s.n_kv_head * s.head_dim();
  const int64_t last = std::max<int64_t>(pp, 1) - 1;
  b.Add("tok_embeddings.weight", {s.padded_vocab_size, C}, TpSplit::kVocab, -1, 0, true);
  for (int64_t l = 0; l < L; ++l) {
    const int64_t st = StageOfLayer(l, L, pp);
    const std::string p = "layers." + std::to_string(l) + ".";
    b.Add(p + "attention_norm.weight", {C}, TpSplit::kReplicated, l, st, false);
    b.Add(p + "attention.wq.weight", {C, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "attention.wk.weight", {kv, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "attention.wv.weight", {kv, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "attention.wo.weight", {C, C}, TpSplit::kRow, l, st, true);
    b.Add(p + "ffn_norm.weight", {C}, TpSplit::kReplicated, l, st, false);
    b.Add(p + "feed_forward.w1.weight", {F, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "feed_forward.w3.weight", {F, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "feed_forward.w2.weight", {C, F}, TpSplit::kRow, l, st, true);
  }
  b.Add("norm.weight", {C}, TpSplit::kReplicated, L, last, false);
  b.Add("output.weight", {s.padded_vocab_size, C}, TpSplit::kVocab, L, last, true);
}

}  // namespace

ParamLayout BuildParamLayout(const ModelSpec& spec, int64_t pp) {
  Builder b;
  if (spec.arch == Arch::kGPT2) {
    BuildGpt2(spec, pp, b);
  } else {
    BuildLlama(spec, pp, b);
  }
  return std::move(b.layout);
}

}  // namespace scaletrain
