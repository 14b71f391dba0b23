#include "parallel/pipeline.h"

#include <algorithm>
#include <cstring>
#include <list>
#include <memory>
#include <tuple>

namespace scaletrain {

namespace {

constexpr int64_t kKinds = 3;  // activation, gradient, evaluation activation
constexpr int64_t kMaxTag = 32767;  // the least MPI_TAG_UB the standard allows

double Seconds(PipelineExecutor::Clock::time_point a, PipelineExecutor::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

PipelineExecutor::PipelineExecutor(GPT* model, Communicator* pp_comm, const PipelineSchedule& schedule,
                                   int64_t micro_batch_size, int64_t seq_len)
    : model_(model),
      comm_(pp_comm),
      schedule_(schedule),
      stage_(pp_comm->rank()),
      mb_(micro_batch_size),
      T_(seq_len),
      act_numel_(model->residual_rows(micro_batch_size, seq_len) * model->spec().n_embd) {}

std::vector<int64_t> PipelineExecutor::SlotsPerChunk(const PipelineSchedule& s, int64_t stage) {
  std::vector<int64_t> live(s.vpp, 0), peak(s.vpp, 1);
  for (const PipeAction& a : s.stages[stage]) {
    if (a.op == PipeOp::kForward) peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
    if (a.op == PipeOp::kBackward) --live[a.chunk];
  }
  return peak;
}

int64_t PipelineExecutor::Tag(PipeOp op, int64_t micro_batch, int64_t virtual_stage) const {
  const int64_t kind = (op == PipeOp::kSendActivation || op == PipeOp::kRecvActivation) ? 0 : 1;
  return (micro_batch * schedule_.num_virtual_stages() + virtual_stage) * kKinds + kind;
}

Result<double> PipelineExecutor::RunStep(
    const MicroBatchSource& data, float loss_scale, const std::function<void(int64_t)>& on_grads_ready,
    const std::function<void(const PipeAction&, Clock::time_point, Clock::time_point)>& on_action) {
  const int64_t m = schedule_.micro_batches, V = schedule_.num_virtual_stages(), pp = schedule_.pp;
  if (kKinds * m * V + 1 > kMaxTag) {
    return InvalidArgument("micro-batches x virtual stages = " + std::to_string(m * V) +
                           " exceeds the message tags MPI guarantees; use fewer micro-batches per step");
  }
  times_ = {};
  const int64_t vpp = schedule_.vpp;
  slot_of_.assign(vpp, std::vector<int64_t>(m, -1));
  std::vector<std::vector<bool>> busy(vpp);
  for (int64_t c = 0; c < vpp; ++c) busy[c].assign(model_->num_slots(c), false);
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> acts_in, grads_in;  // (mb, chunk)
  // Every receive of the step is posted at its start, so a message moves as
  // soon as its sender posts it (large messages need both sides posted);
  // the action in the list only waits for it. An error return leaves them
  // posted into these buffers: the trainer ends the job on any error here.
  std::map<std::tuple<int, int64_t, int64_t>, CommHandle> posted;  // (kind, mb, chunk)
  for (const PipeAction& a : schedule_.stages[stage_]) {
    if (a.op != PipeOp::kRecvActivation && a.op != PipeOp::kRecvGradient) continue;
    const bool act = a.op == PipeOp::kRecvActivation;
    const int64_t v = schedule_.VirtualStage(static_cast<int32_t>(stage_), a.chunk);
    std::vector<float>& buf = (act ? acts_in : grads_in)[{a.micro_batch, a.chunk}];
    buf.resize(act_numel_);
    posted[{act ? 0 : 1, a.micro_batch, a.chunk}] =
        comm_->IRecv(buf.data(), act_numel_, a.peer_stage,
                     static_cast<int>(Tag(a.op, a.micro_batch, act ? v - 1 : v + 1)));
  }
  struct PendingSend {
    std::vector<float> buf;
    CommHandle handle;
  };
  std::list<PendingSend> sends;
  std::vector<int32_t> tokens(mb_ * T_), targets(mb_ * T_);
  // The embedding's gradients are final only after the tied sum below.
  auto last_hook = [&](int64_t layer) {
    if (layer == -1 && pp > 1) return;
    if (on_grads_ready) on_grads_ready(layer);
  };
  auto send = [&](const float* src, int64_t peer, int64_t tag) {
    sends.push_back({std::vector<float>(src, src + act_numel_), CommHandle()});
    sends.back().handle = comm_->ISend(sends.back().buf.data(), act_numel_, static_cast<int>(peer),
                                       static_cast<int>(tag));
  };
  double loss_sum = 0.0;
  for (const PipeAction& a : schedule_.stages[stage_]) {
    const auto t0 = Clock::now();
    const int64_t v = schedule_.VirtualStage(static_cast<int32_t>(stage_), a.chunk);
    const std::pair<int64_t, int64_t> key{a.micro_batch, a.chunk};
    switch (a.op) {
      case PipeOp::kRecvActivation:
      case PipeOp::kRecvGradient: {
        const int kind = a.op == PipeOp::kRecvActivation ? 0 : 1;
        ST_RETURN_IF_ERROR(posted.at({kind, a.micro_batch, a.chunk}).Wait());
        times_.wait_s += Seconds(t0, Clock::now());
        break;
      }
      case PipeOp::kForward: {
        auto& slots = busy[a.chunk];
        const auto free = std::find(slots.begin(), slots.end(), false);
        if (free == slots.end()) return Internal("pipeline: no free activation slot for " + PipeActionToString(a));
        *free = true;
        const int64_t slot = free - slots.begin();
        slot_of_[a.chunk][a.micro_batch] = slot;
        const bool first = model_->chunk_has_embedding(a.chunk), last = model_->chunk_has_head(a.chunk);
        if (first || last) data(a.micro_batch, tokens.data(), targets.data());
        const float* input = nullptr;
        if (!first) {
          auto it = acts_in.find(key);
          if (it == acts_in.end()) return Internal("pipeline: forward before its input: " + PipeActionToString(a));
          input = it->second.data();
        }
        ST_ASSIGN_OR_RETURN(float loss, model_->ForwardChunk(a.chunk, slot, tokens.data(),
                                                             last ? targets.data() : nullptr, input,
                                                             mb_, T_));
        if (!first) acts_in.erase(key);
        loss_sum += loss;
        times_.forward_s += Seconds(t0, Clock::now());
        break;
      }
      case PipeOp::kSendActivation:
        send(model_->ChunkOutput(a.chunk, slot_of_[a.chunk][a.micro_batch]), a.peer_stage,
             Tag(a.op, a.micro_batch, v));
        break;
      case PipeOp::kBackward: {
        const int64_t slot = slot_of_[a.chunk][a.micro_batch];
        const float* dout = nullptr;
        if (!model_->chunk_has_head(a.chunk)) {
          auto it = grads_in.find(key);
          if (it == grads_in.end()) return Internal("pipeline: backward before its gradient: " + PipeActionToString(a));
          dout = it->second.data();
        }
        const bool last_mb = a.micro_batch == m - 1;
        ST_RETURN_IF_ERROR(model_->BackwardChunk(a.chunk, slot, dout, loss_scale,
                                                 last_mb ? std::function<void(int64_t)>(last_hook)
                                                         : std::function<void(int64_t)>()));
        grads_in.erase(key);
        busy[a.chunk][slot] = false;
        times_.backward_s += Seconds(t0, Clock::now());
        break;
      }
      case PipeOp::kSendGradient:
        // InputGrad() is scratch of the next backward: the send copies it now.
        send(model_->InputGrad(), a.peer_stage, Tag(a.op, a.micro_batch, v));
        break;
    }
    if (on_action) on_action(a, t0, Clock::now());
  }
  const auto w0 = Clock::now();
  for (PendingSend& s : sends) ST_RETURN_IF_ERROR(s.handle.Wait());
  times_.wait_s += Seconds(w0, Clock::now());
  const auto t0 = Clock::now();
  ST_RETURN_IF_ERROR(SyncTiedEmbedding());
  times_.tied_sync_s = Seconds(t0, Clock::now());
  // The first stage held back -1; the last has no embedding layer to report it.
  if (pp > 1 && (stage_ == 0 || stage_ == pp - 1) && on_grads_ready) on_grads_ready(-1);
  return loss_sum;
}

Status PipelineExecutor::SyncTiedEmbedding() {
  const int64_t pp = schedule_.pp;
  if (pp == 1 || (stage_ != 0 && stage_ != pp - 1)) return Status::Ok();
  const ParamEntry* e = model_->layout().Find("transformer.wte.weight");
  if (e == nullptr) return Internal("pipeline: the first or last stage has no embedding");
  const int peer = static_cast<int>(stage_ == 0 ? pp - 1 : 0);
  const int tag = static_cast<int>(kKinds * schedule_.micro_batches * schedule_.num_virtual_stages());
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
  const int64_t V = schedule_.num_virtual_stages(), pp = schedule_.pp;
  std::vector<float> input(static_cast<size_t>(act_numel_));
  double loss = 0.0;
  for (int64_t v = 0; v < V; ++v) {
    if (v % pp != stage_) continue;
    const int64_t chunk = v / pp;
    if (v > 0) {
      ST_RETURN_IF_ERROR(comm_->Recv(input.data(), act_numel_, static_cast<int>((v - 1) % pp),
                                     static_cast<int>((v - 1) * kKinds + 2)));
    }
    ST_ASSIGN_OR_RETURN(float l, model_->ForwardChunk(chunk, 0, tokens, targets,
                                                      v > 0 ? input.data() : nullptr, mb_, T_));
    if (v < V - 1) {
      ST_RETURN_IF_ERROR(comm_->Send(model_->ChunkOutput(chunk, 0), act_numel_,
                                     static_cast<int>((v + 1) % pp), static_cast<int>(v * kKinds + 2)));
    }
    if (model_->chunk_has_head(chunk)) loss = l;
  }
  return loss;
}

}  // namespace scaletrain
