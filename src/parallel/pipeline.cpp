#include "parallel/pipeline.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace scaletrain {

namespace {

constexpr int64_t kKinds = 3;       // activation, gradient, evaluation activation
constexpr int64_t kMaxTag = 32767;  // the least MPI_TAG_UB the standard allows

double Seconds(PipelineExecutor::Clock::time_point a, PipelineExecutor::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool IsActivation(PipeOp op) {
  return op == PipeOp::kSendActivation || op == PipeOp::kRecvActivation;
}

}  // namespace

PipelineExecutor::PipelineExecutor(GPT* model, Communicator* pp_comm, DataParallel* dp,
                                   const PipelineSchedule& schedule, int64_t micro_batch_size,
                                   int64_t seq_len)
    : model_(model),
      comm_(pp_comm),
      dp_(dp),
      schedule_(schedule),
      stage_(pp_comm->rank()),
      mb_(micro_batch_size),
      T_(seq_len),
      act_numel_(model->residual_rows(micro_batch_size, seq_len) * model->spec().n_embd),
      tokens_(static_cast<size_t>(micro_batch_size * seq_len)),
      targets_(static_cast<size_t>(micro_batch_size * seq_len)) {
  for (int64_t c = 0; c < schedule_.vpp; ++c) slot_busy_.emplace_back(model_->num_slots(c), false);
}

std::vector<int64_t> PipelineExecutor::SlotsPerChunk(const PipelineSchedule& s, int64_t stage) {
  std::vector<int64_t> live(s.vpp, 0), peak(s.vpp, 1);
  for (const PipeAction& a : s.stages[stage]) {
    if (a.op == PipeOp::kForward) peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
    if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) --live[a.chunk];
  }
  return peak;
}

Status PipelineExecutor::SetSchedule(const PipelineSchedule& schedule) {
  if (schedule.pp != schedule_.pp || schedule.vpp != schedule_.vpp) {
    return InvalidArgument("a new pipeline schedule must keep the stages and chunks of the old one");
  }
  const std::vector<int64_t> slots = SlotsPerChunk(schedule, stage_);
  for (int64_t c = 0; c < schedule.vpp; ++c) {
    if (slots[static_cast<size_t>(c)] > model_->num_slots(c)) {
      return InvalidArgument("the new schedule needs " + std::to_string(slots[static_cast<size_t>(c)]) +
                             " activation slots for chunk " + std::to_string(c) + "; the model holds " +
                             std::to_string(model_->num_slots(c)));
    }
  }
  schedule_ = schedule;
  return Status::Ok();
}

int64_t PipelineExecutor::Tag(PipeOp op, int64_t micro_batch, int64_t virtual_stage) const {
  return (micro_batch * schedule_.num_virtual_stages() + virtual_stage) * kKinds +
         (IsActivation(op) ? 0 : 1);
}

Result<double> PipelineExecutor::RunMicroBatches(const MicroBatchSource& data, float loss_scale,
                                                 PipelineObserver* observer) {
  const int64_t m = schedule_.micro_batches;
  if (kKinds * m * schedule_.num_virtual_stages() + 1 > kMaxTag) {
    return InvalidArgument(
        "micro-batches x virtual stages = " + std::to_string(m * schedule_.num_virtual_stages()) +
        " exceeds the message tags MPI guarantees; use fewer micro-batches per step");
  }
  times_ = {};
  slot_of_.assign(schedule_.vpp, std::vector<int64_t>(m, -1));
  for (auto& busy : slot_busy_) std::fill(busy.begin(), busy.end(), false);
  PostReceives();
  double loss_sum = 0.0;
  for (const PipeAction& a : schedule_.stages[stage_]) {
    const auto t0 = Clock::now();
    switch (a.op) {
      case PipeOp::kRecvActivation:
      case PipeOp::kRecvGradient:
        // From this stage's other chunk (zb-v): Send put it in the inbox.
        if (a.peer_stage == stage_) break;
        ST_RETURN_IF_ERROR(inbox_.posted.at({IsActivation(a.op), a.micro_batch, a.chunk}).Wait());
        times_.wait_s += Seconds(t0, Clock::now());
        break;
      case PipeOp::kForward: {
        ST_ASSIGN_OR_RETURN(float loss, Forward(a, data, observer));
        loss_sum += loss;
        break;
      }
      case PipeOp::kBackward:
        ST_RETURN_IF_ERROR(Backward(a, loss_scale, observer));
        break;
      case PipeOp::kBackwardInput:
        ST_RETURN_IF_ERROR(BackwardInput(a, loss_scale));
        break;
      case PipeOp::kBackwardWeight:
        ST_RETURN_IF_ERROR(BackwardWeight(a, observer));
        break;
      case PipeOp::kSendActivation:
        Send(model_->ChunkOutput(a.chunk, slot_of_[a.chunk][a.micro_batch]), a);
        break;
      case PipeOp::kSendGradient:
        Send(model_->InputGrad(), a);
        break;
    }
    if (observer != nullptr) observer->OnAction(a, t0, Clock::now());
  }
  const auto w0 = Clock::now();
  for (PendingSend& s : sends_) ST_RETURN_IF_ERROR(s.handle.Wait());
  sends_.clear();
  inbox_.posted.clear();
  times_.wait_s += Seconds(w0, Clock::now());
  return loss_sum;
}

void PipelineExecutor::PostReceives() {
  for (const PipeAction& a : schedule_.stages[stage_]) {
    if (a.op != PipeOp::kRecvActivation && a.op != PipeOp::kRecvGradient) continue;
    if (a.peer_stage == stage_) continue;  // delivered by Send
    const bool act = IsActivation(a.op);
    const int64_t v = schedule_.VirtualStage(static_cast<int32_t>(stage_), a.chunk);
    std::vector<float>& buf =
        (act ? inbox_.activations : inbox_.gradients)[{a.micro_batch, a.chunk}];
    buf.resize(static_cast<size_t>(act_numel_));
    inbox_.posted[{act, a.micro_batch, a.chunk}] =
        comm_->IRecv(buf.data(), act_numel_, a.peer_stage,
                     static_cast<int>(Tag(a.op, a.micro_batch, act ? v - 1 : v + 1)));
  }
}

Result<const float*> PipelineExecutor::Received(bool activation, const PipeAction& a) {
  auto& box = activation ? inbox_.activations : inbox_.gradients;
  auto it = box.find({a.micro_batch, a.chunk});
  if (it == box.end()) {
    return Internal(std::string("pipeline: ") +
                    (activation ? "forward before its input: " : "backward before its gradient: ") +
                    PipeActionToString(a));
  }
  return static_cast<const float*>(it->second.data());
}

Result<float> PipelineExecutor::Forward(const PipeAction& a, const MicroBatchSource& data,
                                        PipelineObserver* observer) {
  const auto t0 = Clock::now();
  auto& busy = slot_busy_[a.chunk];
  const auto free = std::find(busy.begin(), busy.end(), false);
  if (free == busy.end())
    return Internal("pipeline: no free activation slot for " + PipeActionToString(a));
  *free = true;
  const int64_t slot = free - busy.begin();
  slot_of_[a.chunk][a.micro_batch] = slot;
  const bool first = model_->chunk_has_embedding(a.chunk), last = model_->chunk_has_head(a.chunk);
  if (first || last) data(a.micro_batch, tokens_.data(), targets_.data());
  const auto t1 = Clock::now();
  const float* input = nullptr;
  if (!first) {
    ST_ASSIGN_OR_RETURN(input, Received(true, a));
  }
  Clock::time_point layer_start = t1;
  std::function<void(int64_t)> on_layer;
  if (observer != nullptr) {
    on_layer = [&](int64_t layer) {
      const auto now = Clock::now();
      observer->OnLayer(a, layer, layer_start, now);
      layer_start = now;
    };
  }
  ST_ASSIGN_OR_RETURN(
      float loss, model_->ForwardChunk(a.chunk, slot, tokens_.data(),
                                       last ? targets_.data() : nullptr, input, mb_, T_, on_layer));
  if (!first) inbox_.activations.erase({a.micro_batch, a.chunk});
  if (extra_forward_s_ > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(extra_forward_s_));
  times_.data_s += Seconds(t0, t1);
  times_.forward_s += Seconds(t1, Clock::now());
  return loss;
}

Status PipelineExecutor::Backward(const PipeAction& a, float loss_scale,
                                  PipelineObserver* observer) {
  const auto t0 = Clock::now();
  const int64_t slot = slot_of_[a.chunk][a.micro_batch];
  const float* dout = nullptr;
  if (!model_->chunk_has_head(a.chunk)) {
    ST_ASSIGN_OR_RETURN(dout, Received(false, a));
  }
  dp_->BeginBackward(a.micro_batch, schedule_.micro_batches, model_->ChunkLayers(a.chunk));
  Clock::time_point layer_start = t0;
  ST_RETURN_IF_ERROR(model_->BackwardChunk(a.chunk, slot, dout, loss_scale,
                                           GradsReadyHook(a, observer, &layer_start)));
  inbox_.gradients.erase({a.micro_batch, a.chunk});
  slot_busy_[a.chunk][slot] = false;
  const auto t1 = Clock::now();
  ST_RETURN_IF_ERROR(dp_->EndBackward());
  times_.backward_s += Seconds(t0, t1);
  times_.grad_sync_wait_s += Seconds(t1, Clock::now());
  return Status::Ok();
}

std::function<void(int64_t)> PipelineExecutor::GradsReadyHook(const PipeAction& a,
                                                              PipelineObserver* observer,
                                                              Clock::time_point* layer_start) {
  return [this, a, observer, layer_start](int64_t layer) {
    if (observer != nullptr) {
      const auto now = Clock::now();
      observer->OnLayer(a, layer, *layer_start, now);
      *layer_start = now;
    }
    dp_->OnGradsReady(layer);
  };
}

Status PipelineExecutor::BackwardInput(const PipeAction& a, float loss_scale) {
  const auto t0 = Clock::now();
  const int64_t slot = slot_of_[a.chunk][a.micro_batch];
  const float* dout = nullptr;
  if (!model_->chunk_has_head(a.chunk)) {
    ST_ASSIGN_OR_RETURN(dout, Received(false, a));
  }
  ST_RETURN_IF_ERROR(model_->BackwardChunkInput(a.chunk, slot, dout, loss_scale));
  inbox_.gradients.erase({a.micro_batch, a.chunk});
  times_.backward_s += Seconds(t0, Clock::now());
  return Status::Ok();
}

Status PipelineExecutor::BackwardWeight(const PipeAction& a, PipelineObserver* observer) {
  // The gradients are complete layer by layer here, not in B: data
  // parallelism hears about this pass (a layer's buckets go when its last
  // micro-batch's W has finished them).
  const auto t0 = Clock::now();
  const int64_t slot = slot_of_[a.chunk][a.micro_batch];
  dp_->BeginBackward(a.micro_batch, schedule_.micro_batches, model_->ChunkLayers(a.chunk));
  Clock::time_point layer_start = t0;
  ST_RETURN_IF_ERROR(
      model_->BackwardChunkWeights(a.chunk, slot, GradsReadyHook(a, observer, &layer_start)));
  slot_busy_[a.chunk][slot] = false;
  const auto t1 = Clock::now();
  ST_RETURN_IF_ERROR(dp_->EndBackward());
  times_.backward_s += Seconds(t0, t1);
  times_.weight_s += Seconds(t0, t1);
  times_.grad_sync_wait_s += Seconds(t1, Clock::now());
  return Status::Ok();
}

void PipelineExecutor::Send(const float* src, const PipeAction& a) {
  if (a.peer_stage == stage_) {  // to this stage's other chunk (zb-v)
    std::vector<float>& box = (IsActivation(a.op) ? inbox_.activations
                                                  : inbox_.gradients)[{a.micro_batch, a.peer_chunk}];
    box.assign(src, src + act_numel_);
    return;
  }
  const int64_t v = schedule_.VirtualStage(static_cast<int32_t>(stage_), a.chunk);
  sends_.push_back({std::vector<float>(src, src + act_numel_), CommHandle()});
  sends_.back().handle = comm_->ISend(sends_.back().buf.data(), act_numel_, a.peer_stage,
                                      static_cast<int>(Tag(a.op, a.micro_batch, v)));
}

Status PipelineExecutor::SumTiedEmbeddingGrads() {
  const int64_t pp = schedule_.pp;
  const ModelSpec& spec = model_->spec();
  // Under zb-v the first stage runs the head too: one copy, nothing to sum.
  if (pp == 1 || model_->shard().v_shape || (stage_ != 0 && stage_ != pp - 1) ||
      !spec.tied_embeddings()) {
    return Status::Ok();
  }
  const ParamEntry* e = model_->layout().Find(spec.arch == Arch::kLlama ? "tok_embeddings.weight"
                                                                         : "transformer.wte.weight");
  if (e == nullptr) return Internal("pipeline: the first or last stage has no embedding");
  const int peer = static_cast<int>(stage_ == 0 ? pp - 1 : 0);
  const int tag =
      static_cast<int>(kKinds * schedule_.micro_batches * schedule_.num_virtual_stages());
  float* g = model_->grads() + e->offset;
  std::vector<float> mine(g, g + e->numel), theirs(static_cast<size_t>(e->numel));
  CommHandle out = comm_->ISend(mine.data(), e->numel, peer, tag);
  CommHandle in = comm_->IRecv(theirs.data(), e->numel, peer, tag);
  ST_RETURN_IF_ERROR(in.Wait());
  ST_RETURN_IF_ERROR(out.Wait());
  // a + b on one stage and b + a on the other: the same bits.
  for (int64_t i = 0; i < e->numel; ++i) g[i] += theirs[i];
  return Status::Ok();
}

Result<double> PipelineExecutor::Evaluate(const int32_t* tokens, const int32_t* targets) {
  const int32_t V = schedule_.num_virtual_stages();
  const auto stage = static_cast<int32_t>(stage_);
  std::vector<float> input(static_cast<size_t>(act_numel_));
  double loss = 0.0;
  for (int32_t v = 0; v < V; ++v) {
    if (schedule_.StageOf(v) != stage) continue;
    const int64_t chunk = schedule_.ChunkOf(v);
    if (v > 0 && schedule_.StageOf(v - 1) == stage) {  // this stage's other chunk (zb-v)
      const float* out = model_->ChunkOutput(schedule_.ChunkOf(v - 1), 0);
      std::copy(out, out + act_numel_, input.begin());
    } else if (v > 0) {
      ST_RETURN_IF_ERROR(comm_->Recv(input.data(), act_numel_, schedule_.StageOf(v - 1),
                                     static_cast<int>((v - 1) * kKinds + 2)));
    }
    ST_ASSIGN_OR_RETURN(float l, model_->ForwardChunk(chunk, 0, tokens, targets,
                                                      v > 0 ? input.data() : nullptr, mb_, T_));
    if (v < V - 1 && schedule_.StageOf(v + 1) != stage) {
      ST_RETURN_IF_ERROR(comm_->Send(model_->ChunkOutput(chunk, 0), act_numel_,
                                     schedule_.StageOf(v + 1), static_cast<int>(v * kKinds + 2)));
    }
    if (model_->chunk_has_head(chunk)) loss = l;
  }
  return loss;
}

}  // namespace scaletrain
