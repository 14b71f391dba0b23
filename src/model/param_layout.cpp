#include "model/param_layout.h"

#include <algorithm>
#include <cstring>
#include <numeric>

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

std::string LayerName(int64_t layer, int64_t n_layer) {
  if (layer == kEmbeddingLayer) return "embedding";
  if (layer == HeadLayer(n_layer)) return "head+loss";
  return "layer " + std::to_string(layer);
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
  const std::vector<int64_t> stage_of = VirtualStageOfLayers(s, pp, 1);
  const int64_t last = std::max<int64_t>(pp, 1) - 1;
  b.Add("transformer.wte.weight", {s.padded_vocab_size, C}, TpSplit::kVocab, kEmbeddingLayer, 0,
        true);
  b.Add("transformer.wpe.weight", {s.block_size, C}, TpSplit::kReplicated, kEmbeddingLayer, 0,
        true);
  for (int64_t l = 0; l < L; ++l) {
    const int64_t st = stage_of[l];
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
  b.Add("transformer.ln_f.weight", {C}, TpSplit::kReplicated, HeadLayer(L), last, false);
  b.Add("transformer.ln_f.bias", {C}, TpSplit::kReplicated, HeadLayer(L), last, false);
  // A tied lm head is transformer.wte.weight: no entry of its own.
  if (!s.tied_embeddings()) {
    b.Add("lm_head.weight", {s.padded_vocab_size, C}, TpSplit::kVocab, HeadLayer(L), last, true);
  }
}

void BuildLlama(const ModelSpec& s, int64_t pp, Builder& b) {
  const int64_t C = s.n_embd, F = s.ffn_hidden, L = s.n_layer;
  const std::vector<int64_t> stage_of = VirtualStageOfLayers(s, pp, 1);
  const int64_t kv = s.n_kv_head * s.head_dim();
  const int64_t last = std::max<int64_t>(pp, 1) - 1;
  b.Add("tok_embeddings.weight", {s.padded_vocab_size, C}, TpSplit::kVocab, kEmbeddingLayer, 0,
        true);
  for (int64_t l = 0; l < L; ++l) {
    const int64_t st = stage_of[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    b.Add(p + "attention_norm.weight", {C}, TpSplit::kReplicated, l, st, false);
    b.Add(p + "attention.wq.weight", {C, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "attention.wk.weight", {kv, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "attention.wv.weight", {kv, C}, TpSplit::kColumn, l, st, true);
    b.Add(p + "attention.wo.weight", {C, C}, TpSplit::kRow, l, st, true);
    b.Add(p + "ffn_norm.weight", {C}, TpSplit::kReplicated, l, st, false);
    b.Add(p + "feed_forward.w1.weight", {F, C}, TpSplit::kColumn, l, st, true);
    if (s.activation() == Activation::kSwiGLU) {
      b.Add(p + "feed_forward.w3.weight", {F, C}, TpSplit::kColumn, l, st, true);
    }
    b.Add(p + "feed_forward.w2.weight", {C, F}, TpSplit::kRow, l, st, true);
  }
  b.Add("norm.weight", {C}, TpSplit::kReplicated, HeadLayer(L), last, false);
  // A tied head is tok_embeddings.weight: no entry of its own.
  if (!s.tied_embeddings()) {
    b.Add("output.weight", {s.padded_vocab_size, C}, TpSplit::kVocab, HeadLayer(L), last, true);
  }
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

namespace {

// Forward FLOPs per token of one block, and of the head, for the split.
double BlockFlops(const ModelSpec& s) {
  const double C = static_cast<double>(s.n_embd), F = static_cast<double>(s.ffn_hidden);
  const double kv = static_cast<double>(s.n_kv_head * s.head_dim());
  const double attn_proj = 2.0 * (C * C + 2.0 * C * kv + C * C);
  const double mlp = 2.0 * static_cast<double>(s.mlp_matrices()) * C * F;
  return attn_proj + mlp + 4.0 * static_cast<double>(s.block_size) * C;
}

}  // namespace

std::vector<int64_t> PipelineStageStarts(const ModelSpec& spec, int64_t stages) {
  const int64_t L = spec.n_layer;
  stages = std::clamp<int64_t>(stages, 1, std::max<int64_t>(L, 1));
  const double head = 2.0 * static_cast<double>(spec.n_embd * spec.padded_vocab_size) / BlockFlops(spec);
  std::vector<int64_t> starts;
  if (stages == 1 || L < stages) {  // L < stages: CheckModelShard refuses such layouts
    for (int64_t s = 0; s < stages; ++s) starts.push_back(std::min(s, L));
    starts.push_back(L);
    return starts;
  }
  // The last stage runs r blocks and the head; the other stages share the
  // rest evenly. Pick r for the cheapest costliest stage; on a tie, the
  // larger r (the more even split).
  int64_t best_r = 1;
  double best = 1e300;
  for (int64_t r = 1; r <= L - (stages - 1); ++r) {
    const int64_t rest = L - r;
    const double front = static_cast<double>((rest + stages - 2) / (stages - 1));
    const double worst = std::max(front, static_cast<double>(r) + head);
    if (worst <= best + 1e-9) {
      best = worst;
      best_r = r;
    }
  }
  const int64_t rest = L - best_r;
  for (int64_t s = 0; s < stages - 1; ++s) {
    int64_t first = 0;
    while (first < rest && StageOfLayer(first, rest, stages - 1) < s) ++first;
    starts.push_back(first);
  }
  starts.push_back(rest);
  starts.push_back(L);
  return starts;
}

int64_t ChunkVirtualStage(int64_t pp, bool v_shape, int64_t stage, int64_t chunk) {
  if (!v_shape) return chunk * pp + stage;
  return chunk == 0 ? stage : 2 * pp - 1 - stage;
}

int64_t StageOfVirtualStage(int64_t pp, bool v_shape, int64_t v) {
  if (!v_shape) return v % pp;
  return v < pp ? v : 2 * pp - 1 - v;
}

int64_t ChunkOfVirtualStage(int64_t pp, bool v_shape, int64_t v) {
  if (!v_shape) return v / pp;
  return v < pp ? 0 : 1;
}

int64_t HeadStage(const ModelShard& sh) {
  return StageOfVirtualStage(sh.pp, sh.v_shape, sh.pp * sh.vpp - 1);
}

std::vector<int64_t> VirtualStageOfLayers(const ModelSpec& spec, int64_t pp, int64_t vpp) {
  pp = std::max<int64_t>(pp, 1);
  vpp = std::max<int64_t>(vpp, 1);
  std::vector<int64_t> out(static_cast<size_t>(spec.n_layer), 0);
  if (vpp > 1) {
    for (int64_t l = 0; l < spec.n_layer; ++l) out[l] = StageOfLayer(l, spec.n_layer, pp * vpp);
    return out;
  }
  const std::vector<int64_t> starts = PipelineStageStarts(spec, pp);
  for (int64_t s = 0; s + 1 < static_cast<int64_t>(starts.size()); ++s) {
    for (int64_t l = starts[s]; l < starts[s + 1]; ++l) out[l] = s;
  }
  return out;
}

namespace {

std::string Divisors(int64_t n) {
  std::string out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  }
  return out;
}

}  // namespace

Status CheckModelShard(const ModelSpec& spec, const ModelShard& sh) {
  if (sh.tp < 1 || sh.pp < 1 || sh.vpp < 1) {
    return InvalidArgument("parallel.tp, pp and vpp must be >= 1");
  }
  if (spec.n_head % sh.tp != 0) {
    return InvalidArgument("parallel.tp = " + std::to_string(sh.tp) + " does not divide model.n_head = " +
                           std::to_string(spec.n_head) + " (tensor parallelism splits the heads); use tp in {" +
                           Divisors(spec.n_head) + "}");
  }
  if (spec.n_kv_head % sh.tp != 0 && sh.tp % spec.n_kv_head != 0) {
    return InvalidArgument("parallel.tp = " + std::to_string(sh.tp) + " and model.n_kv_head = " +
                           std::to_string(spec.n_kv_head) +
                           ": tensor parallelism splits the key/value heads when tp divides n_kv_head, and "
                           "replicates them when n_kv_head divides tp; neither holds. Use tp in {" +
                           Divisors(spec.n_kv_head) + "} or a multiple of n_kv_head dividing n_head");
  }
  if (spec.ffn_hidden % sh.tp != 0) {
    return InvalidArgument("parallel.tp = " + std::to_string(sh.tp) + " does not divide the MLP width " +
                           std::to_string(spec.ffn_hidden) +
                           " (model.ffn_hidden); pick ffn_hidden divisible by tp or another tp");
  }
  if (spec.padded_vocab_size % sh.tp != 0) {
    return InvalidArgument("the padded vocabulary (" + std::to_string(spec.padded_vocab_size) +
                           ") is not a multiple of parallel.tp = " + std::to_string(sh.tp) +
                           "; pad it to a multiple of tp");
  }
  const int64_t v = sh.pp * sh.vpp;
  if (v > spec.n_layer) {
    return InvalidArgument("parallel.pp x vpp = " + std::to_string(sh.pp) + " x " + std::to_string(sh.vpp) +
                           " = " + std::to_string(v) + " pipeline stages for model.n_layer = " +
                           std::to_string(spec.n_layer) + " layers: every stage needs a layer; use pp x vpp <= " +
                           std::to_string(spec.n_layer));
  }
  if (sh.v_shape && spec.n_layer % v != 0) {
    return InvalidArgument("parallel.schedule = \"zb-v\" cuts model.n_layer (" +
                           std::to_string(spec.n_layer) + ") into 2 x pp = " + std::to_string(v) +
                           " equal chunks, and it does not divide; change parallel.pp or use "
                           "\"zb-h1\" (stages then split by cost)");
  }
  if (sh.vpp > 1 && spec.n_layer % v != 0) {
    return InvalidArgument("the interleaved schedule needs model.n_layer (" + std::to_string(spec.n_layer) +
                           ") divisible by pp x vpp = " + std::to_string(v) +
                           " (equal chunks); change parallel.vpp or parallel.pp");
  }
  return Status::Ok();
}

bool KvHeadsReplicated(const ModelSpec& spec, int64_t tp) {
  return spec.arch == Arch::kLlama && tp > 1 && spec.n_kv_head % tp != 0;
}

int64_t LocalKvHeads(const ModelSpec& spec, int64_t tp) {
  return KvHeadsReplicated(spec, tp) ? spec.n_kv_head : spec.n_kv_head / std::max<int64_t>(tp, 1);
}

namespace {

bool IsKvWeight(const std::string& name) {
  return name.find("attention.wk.") != std::string::npos || name.find("attention.wv.") != std::string::npos;
}

// How a tensor is split over TP at this layout: as in the whole model's
// layout, except that Llama's key/value weights are held whole when tp does
// not divide n_kv_head.
TpSplit RankTpSplit(const ModelSpec& spec, int64_t tp, const ParamEntry& g) {
  return KvHeadsReplicated(spec, tp) && IsKvWeight(g.name) ? TpSplit::kReplicated : g.tp_split;
}

// e's shard geometry for its split: the dimension cut, the parts cut
// separately (the fused q, k, v), and the shard's shape. A replicated
// tensor's copies past tp rank 0 are not unique.
void ShapeAsTpShard(ParamEntry& e, const ModelShard& sh) {
  switch (e.tp_split) {
    case TpSplit::kReplicated:
      e.shard_dim = -1;
      e.unique = e.unique && sh.tp_rank == 0;
      break;
    case TpSplit::kColumn:
    case TpSplit::kVocab:
      e.shard_dim = 0;
      break;
    case TpSplit::kRow:
      e.shard_dim = 1;
      break;
  }
  if (e.name.find("c_attn") != std::string::npos) e.shard_parts = 3;  // q, k, v
  if (e.shard_dim >= 0) e.shape[static_cast<size_t>(e.shard_dim)] /= sh.tp;
}

// The entry of the whole model's tensor `g` as this rank holds it, appended
// to its flat buffer.
void AddRankEntry(ParamLayout& out, const ParamEntry& g, int64_t layer, bool tied_copy,
                  const ModelSpec& spec, const ModelShard& sh) {
  ParamEntry e = g;
  e.full_shape = g.shape;
  e.layer = layer;
  e.pp_stage = sh.stage;
  e.tp = sh.tp;
  e.tp_rank = sh.tp_rank;
  e.tied_copy = tied_copy;
  e.unique = !tied_copy;
  e.tp_split = RankTpSplit(spec, sh.tp, g);
  ShapeAsTpShard(e, sh);
  e.numel = NumElements(e.shape);
  e.offset = out.total_numel;
  out.total_numel += e.numel;
  out.entries.push_back(std::move(e));
}

// Whether this rank's stage runs the layer `g` belongs to: the embedding on
// the first stage, the head on the last, a block on the stage of its chunk.
bool StageRuns(const ParamEntry& g, const std::vector<int64_t>& stage_of, const ModelShard& sh,
               int64_t n_layer) {
  if (g.layer == kEmbeddingLayer) return sh.stage == 0;
  if (g.layer == HeadLayer(n_layer)) return sh.stage == HeadStage(sh);
  return StageOfVirtualStage(sh.pp, sh.v_shape, stage_of[g.layer]) == sh.stage;
}

}  // namespace

ParamLayout BuildRankLayout(const ModelSpec& spec, const ModelShard& sh) {
  const ParamLayout global = BuildParamLayout(spec, 1);
  const std::vector<int64_t> stage_of = VirtualStageOfLayers(spec, sh.pp, sh.vpp);
  ParamLayout out;
  // The last stage's copy of a tied embedding (its head's weight) leads its
  // buffer, as the embedding leads the first stage's (DpTiedFrontNumel).
  const bool head_apart = sh.stage == HeadStage(sh) && sh.stage != 0;
  if (head_apart && spec.tied_embeddings()) {
    AddRankEntry(out, global.entries[0], kEmbeddingLayer, true, spec, sh);
  }
  for (const ParamEntry& g : global.entries) {
    if (StageRuns(g, stage_of, sh, spec.n_layer)) AddRankEntry(out, g, g.layer, false, spec, sh);
  }
  // Chunk order: a stage's chunk c runs virtual stage ChunkVirtualStage(c),
  // which ascends with c (in a V too); entries above are in layer order,
  // which is chunk order as virtual stages ascend with layers.
  return out;
}

namespace {

// The whole tensor as [outer, D, inner] around the split dimension.
struct SplitGeometry {
  int64_t outer = 1, dim = 1, inner = 1;
};
SplitGeometry Geometry(const ParamEntry& e) {
  SplitGeometry g;
  for (size_t i = 0; i < e.full_shape.size(); ++i) {
    const int64_t d = e.full_shape[i];
    if (static_cast<int64_t>(i) < e.shard_dim) g.outer *= d;
    else if (static_cast<int64_t>(i) == e.shard_dim) g.dim = d;
    else g.inner *= d;
  }
  return g;
}

template <bool kExtract>
void CopyShard(const ParamEntry& e, float* full, float* shard) {
  if (e.shard_dim < 0) {
    if (kExtract) std::memcpy(shard, full, static_cast<size_t>(e.numel) * sizeof(float));
    else std::memcpy(full, shard, static_cast<size_t>(e.numel) * sizeof(float));
    return;
  }
  const SplitGeometry g = Geometry(e);
  const int64_t part = g.dim / e.shard_parts, piece = part / e.tp;
  const size_t run = static_cast<size_t>(piece * g.inner) * sizeof(float);
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t p = 0; p < e.shard_parts; ++p) {
      float* f = full + (o * g.dim + p * part + e.tp_rank * piece) * g.inner;
      float* s = shard + (o * e.shard_parts * piece + p * piece) * g.inner;
      if (kExtract) std::memcpy(s, f, run);
      else std::memcpy(f, s, run);
    }
  }
}

}  // namespace

void ExtractShard(const ParamEntry& e, const float* full, float* shard) {
  CopyShard<true>(e, const_cast<float*>(full), shard);
}

void InsertShard(const ParamEntry& e, const float* shard, float* full) {
  CopyShard<false>(e, full, const_cast<float*>(shard));
}

}  // namespace scaletrain
