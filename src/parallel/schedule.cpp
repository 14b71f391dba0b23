#include "parallel/schedule.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>

#include "model/param_layout.h"

namespace scaletrain {

namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// Appends a stage's compute actions together with the receive each needs
// just before it and the send of its result just after it, so that data
// flow is explicit in the list and the trainer does not re-derive it.
class StageListBuilder {
 public:
  StageListBuilder(const PipelineSchedule& s, int32_t stage, std::vector<PipeAction>* out)
      : s_(s), stage_(stage), out_(out) {}

  void Forward(int32_t mb, int32_t chunk) {
    const int32_t v = s_.VirtualStage(stage_, chunk);
    if (v > 0) Comm(PipeOp::kRecvActivation, mb, chunk, v - 1);
    out_->push_back({PipeOp::kForward, mb, chunk});
    if (v < s_.num_virtual_stages() - 1) Comm(PipeOp::kSendActivation, mb, chunk, v + 1);
  }

  // The fused backward, or a split backward's B (op kBackwardInput).
  void Backward(int32_t mb, int32_t chunk, PipeOp op = PipeOp::kBackward) {
    const int32_t v = s_.VirtualStage(stage_, chunk);
    if (v < s_.num_virtual_stages() - 1) Comm(PipeOp::kRecvGradient, mb, chunk, v + 1);
    out_->push_back({op, mb, chunk});
    if (v > 0) Comm(PipeOp::kSendGradient, mb, chunk, v - 1);
  }

  // A split backward's W: local, no message.
  void Weight(int32_t mb, int32_t chunk) { out_->push_back({PipeOp::kBackwardWeight, mb, chunk}); }

 private:
  void Comm(PipeOp op, int32_t mb, int32_t chunk, int32_t peer_virtual) {
    out_->push_back({op, mb, chunk, s_.StageOf(peer_virtual), s_.ChunkOf(peer_virtual)});
  }

  const PipelineSchedule& s_;
  int32_t stage_;
  std::vector<PipeAction>* out_;
};

// The k-th forward (backward) of a stage under Megatron-LM's interleaving:
// micro-batches go in groups of pp through chunk 0, then the same group
// through chunk 1, ...; backwards visit the chunks in reverse order
// (get_model_chunk_id / get_microbatch_id_in_model_chunk in Megatron-Core).
std::pair<int32_t, int32_t> InterleavedStep(int32_t k, int32_t pp, int32_t vpp, bool forward) {
  const int32_t group = pp * vpp;
  const int32_t mb = (k / group) * pp + k % pp;
  const int32_t chunk = (k % group) / pp;
  return {mb, forward ? chunk : vpp - 1 - chunk};
}

}  // namespace

const char* ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZbH1:
      return "zb-h1";
    case ScheduleKind::kZbV:
      return "zb-v";
  }
  return "?";
}

Result<ScheduleKind> ScheduleKindFromName(const std::string& name) {
  for (ScheduleKind k : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved,
                         ScheduleKind::kZbH1, ScheduleKind::kZbV}) {
    if (name == ScheduleKindName(k)) return k;
  }
  return InvalidArgument("unknown pipeline schedule '" + name +
                         "'; use gpipe, 1f1b, interleaved, zb-h1 or zb-v");
}

const char* PipeOpName(PipeOp op) {
  switch (op) {
    case PipeOp::kForward:
      return "F";
    case PipeOp::kBackward:
      return "B";
    case PipeOp::kSendActivation:
      return "send-act";
    case PipeOp::kRecvActivation:
      return "recv-act";
    case PipeOp::kSendGradient:
      return "send-grad";
    case PipeOp::kRecvGradient:
      return "recv-grad";
    case PipeOp::kBackwardInput:
      return "Bin";
    case PipeOp::kBackwardWeight:
      return "W";
  }
  return "?";
}

bool IsCompute(PipeOp op) {
  return op == PipeOp::kForward || op == PipeOp::kBackward || op == PipeOp::kBackwardInput ||
         op == PipeOp::kBackwardWeight;
}

bool SplitsBackward(ScheduleKind kind) {
  return kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbV;
}

bool PlacesChunksInV(ScheduleKind kind) { return kind == ScheduleKind::kZbV; }

int32_t VirtualStageOf(int32_t pp, bool v_shape, int32_t stage, int32_t chunk) {
  return static_cast<int32_t>(ChunkVirtualStage(pp, v_shape, stage, chunk));
}

int32_t StageOfVirtual(int32_t pp, bool v_shape, int32_t v) {
  return static_cast<int32_t>(StageOfVirtualStage(pp, v_shape, v));
}

int32_t ChunkOfVirtual(int32_t pp, bool v_shape, int32_t v) {
  return static_cast<int32_t>(ChunkOfVirtualStage(pp, v_shape, v));
}

std::string PipeActionToString(const PipeAction& a) {
  std::string s = std::string(PipeOpName(a.op)) + " mb" + Str(a.micro_batch) + " c" + Str(a.chunk);
  if (IsCompute(a.op)) return s;
  const bool sends = a.op == PipeOp::kSendActivation || a.op == PipeOp::kSendGradient;
  return s + (sends ? " -> s" : " <- s") + Str(a.peer_stage) + " c" + Str(a.peer_chunk);
}

namespace {

Status CheckInterleavedShape(int32_t pp, int32_t vpp, int32_t m) {
  if (vpp < 2) {
    return InvalidArgument("the interleaved schedule needs vpp >= 2 model chunks per stage (got " +
                           Str(vpp) + "); with one chunk per stage use 1f1b");
  }
  // With one stage there is no bubble for interleaving to shrink, and its
  // chunks would only hand tensors to themselves.
  if (pp < 2) return InvalidArgument("the interleaved schedule needs pp >= 2; use 1f1b");
  if (m % pp != 0) {
    const int32_t lo = m / pp * pp;
    return InvalidArgument("the interleaved schedule needs micro-batches (" + Str(m) +
                           ") to be a multiple of pp (" + Str(pp) +
                           "), as Megatron-LM requires; use " + (lo > 0 ? Str(lo) + " or " : "") +
                           Str(lo + pp) + " micro-batches");
  }
  // Virtual stages and action counts are int32 (one step of a real run
  // has thousands, not billions).
  if (static_cast<int64_t>(m) * vpp * pp > std::numeric_limits<int32_t>::max() / 8) {
    return InvalidArgument("pipeline schedule too large: pp x vpp x micro-batches = " +
                           Str(static_cast<int64_t>(m) * vpp * pp));
  }
  return Status::Ok();
}

Status CheckScheduleShape(ScheduleKind kind, int32_t pp, int32_t vpp, int32_t m) {
  if (pp < 1 || vpp < 1 || m < 1) {
    return InvalidArgument("a pipeline schedule needs pp, vpp and micro-batches >= 1 (got pp=" +
                           Str(pp) + ", vpp=" + Str(vpp) + ", micro-batches=" + Str(m) + ")");
  }
  if (kind == ScheduleKind::kInterleaved) return CheckInterleavedShape(pp, vpp, m);
  if (kind == ScheduleKind::kZbV) {
    if (vpp != 2) {
      return InvalidArgument("the zb-v schedule runs two model chunks per stage in a V (vpp = 2, got " +
                             Str(vpp) + ")");
    }
    if (pp < 2) return InvalidArgument("the zb-v schedule needs pp >= 2; use zb-h1 or 1f1b");
    if (static_cast<int64_t>(m) * pp > std::numeric_limits<int32_t>::max() / 16) {
      return InvalidArgument("pipeline schedule too large: pp x micro-batches = " +
                             Str(static_cast<int64_t>(m) * pp));
    }
    return Status::Ok();
  }
  if (vpp != 1) {
    return InvalidArgument("the " + std::string(ScheduleKindName(kind)) +
                           " schedule runs one model chunk per stage (vpp = 1, got " + Str(vpp) +
                           "); use vpp = 1 or the interleaved schedule");
  }
  return Status::Ok();
}

// The forwards a stage runs before its first backward.
int32_t WarmUpForwards(ScheduleKind kind, int32_t pp, int32_t vpp, int32_t m, int32_t stage) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return m;
    case ScheduleKind::kZbV:  // (built by ZbVBuilder, which needs no count)
    case ScheduleKind::k1F1B:
    case ScheduleKind::kZbH1:
      // Enough forwards in flight that the first backward, coming back
      // from the last stage, arrives just as the warm-up ends.
      return std::min(pp - stage - 1, m);
    case ScheduleKind::kInterleaved:
      // Megatron-Core's warm-up count: two forwards per later stage (a
      // round trip through each) plus one group of pp for every chunk
      // before the last.
      return std::min((pp - stage - 1) * 2 + (vpp - 1) * pp, m * vpp);
  }
  return m;
}

// A stage's list, every schedule's shape: the warm-up's forwards, then a
// forward and a backward in turn, then the backwards left (GPipe's warm-up
// is every forward, so it never alternates). The k-th forward
// or backward is of the (micro-batch, chunk) step(k, forward) names.
template <typename Step>
void AppendStageActions(StageListBuilder& b, int32_t warm, int32_t total, Step step) {
  const auto forward = [&](int32_t k) {
    const auto [mb, chunk] = step(k, true);
    b.Forward(mb, chunk);
  };
  const auto backward = [&](int32_t k) {
    const auto [mb, chunk] = step(k, false);
    b.Backward(mb, chunk);
  };
  int32_t f = 0, bw = 0;
  for (; f < warm; ++f) forward(f);
  for (; f < total; ++f, ++bw) {
    forward(f);
    backward(bw);
  }
  for (; bw < total; ++bw) backward(bw);
}

// ZB-H1 on one stage: 1f1b's order of forwards and B's, each B followed by
// the oldest W beyond `kept_back` (the W's a stage defers: its activations
// stay until then), the rest after the last B.
void AppendZbH1Actions(StageListBuilder& b, int32_t warm, int32_t m, int32_t kept_back) {
  int32_t f = 0, bi = 0, w = 0;
  const auto input = [&] {
    b.Backward(bi++, 0, PipeOp::kBackwardInput);
    if (bi - w > kept_back) b.Weight(w++, 0);
  };
  for (; f < warm; ++f) b.Forward(f, 0);
  for (; f < m; ++f) {
    b.Forward(f, 0);
    input();
  }
  while (bi < m) input();
  while (w < m) b.Weight(w++, 0);
}

// ZB-V's lists by list scheduling (see schedule.h), in unit steps: every F,
// B and W takes one, a message is there when its sender's action ends.
class ZbVBuilder {
 public:
  explicit ZbVBuilder(PipelineSchedule* s)
      : s_(*s), pp_(s->pp), m_(s->micro_batches), stages_(static_cast<size_t>(pp_)) {
    const size_t n = static_cast<size_t>(2) * static_cast<size_t>(pp_) * static_cast<size_t>(m_);
    f_end_.assign(n, kNever);
    b_end_.assign(n, kNever);
  }

  Status Build() {
    std::vector<StageListBuilder> out;
    for (int32_t st = 0; st < pp_; ++st) out.emplace_back(s_, st, &s_.stages[st]);
    int64_t done = 0;
    const int64_t total = static_cast<int64_t>(3) * 2 * pp_ * m_;  // F, B, W per chunk
    // A bound far past any list's length stops a bug from looping.
    for (int64_t t = 0; done < total; ++t) {
      if (t > 4 * total + 4 * pp_) return Internal("zb-v builder made no progress");
      for (int32_t st = 0; st < pp_; ++st) done += Step(st, t, out[static_cast<size_t>(st)]);
    }
    return Status::Ok();
  }

 private:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  struct Stage {
    int64_t busy_until = 0;
    int32_t occupied = 0;  // chunk slots held or promised (see schedule.h)
    int32_t next_f[2] = {0, 0}, next_b[2] = {0, 0};  // per chunk: its next micro-batch
    std::deque<std::pair<int32_t, int32_t>> pending_w;  // (mb, chunk), oldest first
  };
  size_t Key(int32_t v, int32_t mb) const { return static_cast<size_t>(v) * m_ + mb; }
  // When the input of (virtual stage v, micro-batch mb) is there: the
  // previous virtual stage's output for a forward; for a B, the next one's
  // input gradient (the last virtual stage: its own forward's end).
  int64_t InputAt(int32_t v, int32_t mb, bool backward) const {
    if (!backward) return v == 0 ? 0 : f_end_[Key(v - 1, mb)];
    if (f_end_[Key(v, mb)] == kNever) return kNever;
    return v == 2 * pp_ - 1 ? f_end_[Key(v, mb)] : b_end_[Key(v + 1, mb)];
  }

  // One step of stage st at time t: 1 if it started an action.
  int64_t Step(int32_t st, int64_t t, StageListBuilder& out) {
    Stage& g = stages_[static_cast<size_t>(st)];
    if (g.busy_until > t) return 0;
    g.busy_until = t + 1;
    if (RunBackward(st, t, g, out) || RunForward(st, t, g, out)) return 1;
    if (g.pending_w.empty()) {
      g.busy_until = t;
      return 0;
    }
    const auto [mb, c] = g.pending_w.front();
    g.pending_w.pop_front();
    --g.occupied;
    out.Weight(mb, c);
    return 1;
  }

  // A B whose gradient is there, the older micro-batch first (of one
  // micro-batch, chunk 1's comes back first). Each chunk runs its F's and
  // B's (so its W's too) in micro-batch order, as 1f1b does.
  bool RunBackward(int32_t st, int64_t t, Stage& g, StageListBuilder& out) {
    int32_t best = -1;
    for (int32_t c : {1, 0}) {
      const int32_t mb = g.next_b[c];
      if (mb >= m_ || InputAt(s_.VirtualStage(st, c), mb, true) > t) continue;
      if (best < 0 || mb < g.next_b[best]) best = c;
    }
    if (best < 0) return false;
    const int32_t mb = g.next_b[best]++;
    b_end_[Key(s_.VirtualStage(st, best), mb)] = t + 1;
    g.pending_w.emplace_back(mb, best);
    out.Backward(mb, best, PipeOp::kBackwardInput);
    return true;
  }

  // A forward whose input is there: chunk 1's (into a promised slot) before
  // chunk 0's (which promises two).
  bool RunForward(int32_t st, int64_t t, Stage& g, StageListBuilder& out) {
    for (int32_t c : {1, 0}) {
      const int32_t mb = g.next_f[c];
      if (mb >= m_ || (c == 0 && g.occupied + 2 > 2 * pp_)) continue;
      const int32_t v = s_.VirtualStage(st, c);
      if (InputAt(v, mb, false) > t) continue;
      ++g.next_f[c];
      f_end_[Key(v, mb)] = t + 1;
      if (c == 0) g.occupied += 2;
      out.Forward(mb, c);
      return true;
    }
    return false;
  }

  PipelineSchedule& s_;
  const int32_t pp_, m_;
  std::vector<int64_t> f_end_, b_end_;  // [v][mb]: when the F (B) ends, kNever before
  std::vector<Stage> stages_;
};

}  // namespace

Result<PipelineSchedule> BuildPipelineSchedule(ScheduleKind kind, int32_t pp, int32_t vpp,
                                               int32_t m) {
  ST_RETURN_IF_ERROR(CheckScheduleShape(kind, pp, vpp, m));
  PipelineSchedule s;
  s.kind = kind;
  s.pp = pp;
  s.vpp = vpp;
  s.micro_batches = m;
  s.v_shape = PlacesChunksInV(kind);
  s.stages.resize(pp);
  if (kind == ScheduleKind::kZbV) {
    ST_RETURN_IF_ERROR(ZbVBuilder(&s).Build());
    return s;
  }
  for (int32_t st = 0; st < pp; ++st) {
    // A forward and a backward per (micro-batch, chunk), each with at most
    // one receive and one send.
    s.stages[st].reserve(static_cast<size_t>(6) * m * vpp);
    StageListBuilder b(s, st, &s.stages[st]);
    const int32_t warm = WarmUpForwards(kind, pp, vpp, m, st);
    if (kind == ScheduleKind::kInterleaved) {
      AppendStageActions(b, warm, m * vpp, [&](int32_t k, bool forward) {
        return InterleavedStep(k, pp, vpp, forward);
      });
    } else if (kind == ScheduleKind::kZbH1) {
      // Stage s holds 1f1b's pp - s micro-batches plus s kept-back W's:
      // pp, as 1f1b's first stage. The later stages, which 1f1b leaves
      // idle longest at the end, defer the most.
      AppendZbH1Actions(b, warm, m, st);
    } else {
      AppendStageActions(b, warm, m, [](int32_t k, bool) {
        return std::pair<int32_t, int32_t>{k, 0};
      });
    }
  }
  return s;
}

Result<PipelineSchedule> PipelineScheduleFromConfig(const ParallelConfig& parallel,
                                                    int64_t micro_batches) {
  ST_ASSIGN_OR_RETURN(ScheduleKind kind, ScheduleKindFromName(parallel.schedule));
  if (kind == ScheduleKind::kInterleaved && parallel.vpp < 2) {
    return InvalidArgument("parallel.schedule = \"interleaved\" needs parallel.vpp >= 2 (got " +
                           Str(parallel.vpp) + "); raise vpp or use schedule \"1f1b\"");
  }
  if (kind == ScheduleKind::kZbV && (parallel.vpp != 2 || parallel.pp < 2)) {
    return InvalidArgument("parallel.schedule = \"zb-v\" runs two chunks per stage in a V: it "
                           "needs parallel.vpp = 2 and parallel.pp >= 2 (got vpp " +
                           Str(parallel.vpp) + ", pp " + Str(parallel.pp) + ")");
  }
  if (kind != ScheduleKind::kInterleaved && kind != ScheduleKind::kZbV && parallel.vpp != 1) {
    return InvalidArgument("parallel.vpp = " + Str(parallel.vpp) + " needs parallel.schedule = " +
                           "\"interleaved\" (got \"" + parallel.schedule + "\"); or set vpp = 1");
  }
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (parallel.pp > kMax || parallel.vpp > kMax || micro_batches > kMax) {
    return InvalidArgument("pipeline layout out of range: pp=" + Str(parallel.pp) +
                           ", vpp=" + Str(parallel.vpp) + ", micro-batches=" + Str(micro_batches));
  }
  // One stage is a pipeline too (the trainer runs every layout through the
  // same executor), where all-forwards-first would only hold more
  // activations: forward and backward of each micro-batch in turn.
  if (parallel.pp == 1 && kind == ScheduleKind::kGPipe) kind = ScheduleKind::k1F1B;
  return BuildPipelineSchedule(kind, static_cast<int32_t>(parallel.pp),
                               static_cast<int32_t>(parallel.vpp),
                               static_cast<int32_t>(micro_batches));
}

std::vector<int32_t> PeakActivations(const PipelineSchedule& s, int32_t chunk) {
  std::vector<int32_t> peak(s.stages.size(), 0);
  for (size_t st = 0; st < s.stages.size(); ++st) {
    int32_t live = 0;
    for (const PipeAction& a : s.stages[st]) {
      if (chunk >= 0 && a.chunk != chunk) continue;
      if (a.op == PipeOp::kForward) peak[st] = std::max(peak[st], ++live);
      if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) --live;
    }
  }
  return peak;
}

namespace {

// One step's execution state, for SimulatePipelineSchedule.
class Simulator {
 public:
  Simulator(const PipelineSchedule& s, const PipeTimes& t)
      : s_(s),
        t_(t),
        m_(s.micro_batches),
        nv_(s.num_virtual_stages()),
        next_(s.pp, 0),
        clock_(s.pp, 0.0),
        busy_(s.pp, 0.0),
        live_(s.pp, 0),
        peak_(s.pp, 0),
        msg_state_(static_cast<size_t>(2) * nv_ * m_, kNotSent),
        msg_time_(msg_state_.size(), 0.0),
        link_free_(s.pp, 0.0),
        waiter_(msg_state_.size(), -1),
        flags_(static_cast<size_t>(nv_) * m_, 0) {}

  Result<ScheduleSimulation> Run() {
    // Event-driven: a stage runs until it needs a message not yet sent; the
    // send of that message makes it runnable again.
    std::vector<int32_t> runnable(s_.pp);
    for (int32_t st = 0; st < s_.pp; ++st) runnable[st] = s_.pp - 1 - st;
    while (!runnable.empty()) {
      const int32_t st = runnable.back();
      runnable.pop_back();
      ST_RETURN_IF_ERROR(RunStage(st, &runnable));
    }
    ST_RETURN_IF_ERROR(CheckComplete());
    ScheduleSimulation r;
    r.makespan_s = *std::max_element(clock_.begin(), clock_.end());
    r.busy_s = busy_;
    r.idle_s.resize(s_.pp);
    for (int32_t st = 0; st < s_.pp; ++st) r.idle_s[st] = r.makespan_s - busy_[st];
    r.peak_activations = peak_;  // as PeakActivations, without another pass
    return r;
  }

 private:
  enum MsgState : uint8_t { kNotSent, kSent, kReceived };
  // Per (virtual stage, micro-batch): what has happened there.
  enum Flag : uint8_t {
    kForwardDone = 1,
    kBackwardDone = 2,
    kHaveActivation = 4,
    kHaveGradient = 8,
    kWeightDone = 16  // split backward: W has run (kBackwardDone: B has)
  };

  size_t MsgKey(bool gradient, int32_t from_virtual, int32_t mb) const {
    return (static_cast<size_t>(gradient) * nv_ + from_virtual) * m_ + mb;
  }
  uint8_t& FlagsOf(int32_t virtual_stage, int32_t mb) {
    return flags_[static_cast<size_t>(virtual_stage) * m_ + mb];
  }

  Status Fail(int32_t st, size_t i, const char* why) const {
    return InvalidArgument(std::string(ScheduleKindName(s_.kind)) + " schedule (pp=" + Str(s_.pp) +
                           ", vpp=" + Str(s_.vpp) + ", micro-batches=" + Str(m_) + "): stage " +
                           Str(st) + " action " + Str(static_cast<int64_t>(i)) + " (" +
                           PipeActionToString(s_.stages[st][i]) + ") " + why);
  }

  // A stage's running figures. RunStage keeps them in a local while the stage
  // runs: the planner simulates thousands of schedules per search.
  struct StageProgress {
    double clock_s = 0, busy_s = 0;
    int32_t live = 0, peak = 0;  // activations held
  };

  // Runs stage `st` until its list ends or it waits for a message.
  Status RunStage(int32_t st, std::vector<int32_t>* runnable) {
    const std::vector<PipeAction>& list = s_.stages[st];
    size_t i = next_[st];
    StageProgress p{clock_[st], busy_[st], live_[st], peak_[st]};
    Status status;
    for (; i < list.size(); ++i) {
      const PipeAction& a = list[i];
      if (a.micro_batch < 0 || a.micro_batch >= m_ || a.chunk < 0 || a.chunk >= s_.vpp) {
        status = Fail(st, i, "names a micro-batch or chunk outside the schedule");
        break;
      }
      bool blocked = false;
      const char* error = RunAction(a, st, &p, runnable, &blocked);
      if (blocked) break;
      if (error != nullptr) {
        status = Fail(st, i, error);
        break;
      }
    }
    next_[st] = i;
    clock_[st] = p.clock_s;
    busy_[st] = p.busy_s;
    live_[st] = p.live;
    peak_[st] = p.peak;
    return status;
  }

  // Runs one action of stage `st` (its micro-batch and chunk in range).
  // Returns why the schedule may not take it, or nullptr; sets *blocked
  // when it is a receive whose message is not sent yet.
  const char* RunAction(const PipeAction& a, int32_t st, StageProgress* p,
                        std::vector<int32_t>* runnable, bool* blocked) {
    const int32_t v = s_.VirtualStage(st, a.chunk);
    uint8_t& flags = FlagsOf(v, a.micro_batch);
    if (IsCompute(a.op) && a.op != PipeOp::kForward && (a.op == PipeOp::kBackward) == split_) {
      return split_ ? "is a fused backward in a schedule that splits it into B and W"
                    : "is a split backward in a schedule that runs it whole";
    }
    switch (a.op) {
      case PipeOp::kForward:
        return RunForward(v, &flags, p);
      case PipeOp::kBackward:
        return RunBackward(v, &flags, p, t_.backward_s, true);
      case PipeOp::kBackwardInput:
        return RunBackward(v, &flags, p, t_.backward_s - t_.weight_s, false);
      case PipeOp::kBackwardWeight:
        return RunWeight(&flags, p);
      case PipeOp::kSendActivation:
      case PipeOp::kSendGradient:
        return PostSend(a, st, v, flags, p->clock_s, runnable);
      case PipeOp::kRecvActivation:
      case PipeOp::kRecvGradient:
        return TakeReceive(a, st, v, &flags, p, blocked);
    }
    return nullptr;
  }

  const char* RunForward(int32_t v, uint8_t* flags, StageProgress* p) const {
    if (*flags & kForwardDone) return "runs a forward twice";
    if (v > 0 && !(*flags & kHaveActivation)) {
      return "runs before its input activation was received";
    }
    *flags |= kForwardDone;
    p->clock_s += t_.forward_s;
    p->busy_s += t_.forward_s;
    p->peak = std::max(p->peak, ++p->live);
    return nullptr;
  }

  // A fused backward, or a split one's B (which keeps the activations).
  const char* RunBackward(int32_t v, uint8_t* flags, StageProgress* p, double seconds,
                          bool frees) const {
    if (*flags & kBackwardDone) return "runs a backward twice";
    if (!(*flags & kForwardDone)) return "runs before its forward";
    if (v < nv_ - 1 && !(*flags & kHaveGradient)) {
      return "runs before its output gradient was received";
    }
    *flags |= kBackwardDone;
    p->clock_s += seconds;
    p->busy_s += seconds;
    if (frees) --p->live;
    return nullptr;
  }

  const char* RunWeight(uint8_t* flags, StageProgress* p) const {
    if (*flags & kWeightDone) return "runs a W twice";
    if (!(*flags & kBackwardDone)) return "runs a W before its B";
    *flags |= kWeightDone;
    p->clock_s += t_.weight_s;
    p->busy_s += t_.weight_s;
    --p->live;
    return nullptr;
  }

  // Marks the message sent at `clock_s` and wakes the stage waiting for it.
  const char* PostSend(const PipeAction& a, int32_t st, int32_t v, uint8_t flags, double clock_s,
                       std::vector<int32_t>* runnable) {
    const bool grad = a.op == PipeOp::kSendGradient;
    const int32_t to = grad ? v - 1 : v + 1;
    if (to < 0 || to >= nv_) return "sends past the end of the pipeline";
    if (!PeerIs(a, st, to, v)) return "is addressed to the wrong stage or chunk";
    if (!(flags & (grad ? kBackwardDone : kForwardDone))) return "sends a result not yet computed";
    const size_t key = MsgKey(grad, v, a.micro_batch);
    if (msg_state_[key] != kNotSent) return "sends a message twice";
    msg_state_[key] = kSent;
    if (a.peer_stage == st) {
      msg_time_[key] = clock_s;  // to its own other chunk (zb-v): no link
    } else if (t_.sends_share_link) {
      // Leaves when the stage's link is free; msg_time_ is then the arrival.
      double& free = link_free_[st];
      free = std::max(free, clock_s) + t_.p2p_s;
      msg_time_[key] = free;
    } else {
      msg_time_[key] = clock_s + t_.p2p_s;
    }
    if (waiter_[key] >= 0) {
      runnable->push_back(waiter_[key]);
      waiter_[key] = -1;
    }
    return nullptr;
  }

  // Takes a sent message, the stage's clock moving to its arrival; a message
  // not yet sent blocks the stage until its send.
  const char* TakeReceive(const PipeAction& a, int32_t st, int32_t v, uint8_t* flags,
                          StageProgress* p, bool* blocked) {
    const bool grad = a.op == PipeOp::kRecvGradient;
    const int32_t from = grad ? v + 1 : v - 1;
    if (from < 0 || from >= nv_) return "receives from past the end of the pipeline";
    if (!PeerIs(a, st, from, v)) return "names the wrong sender";
    const size_t key = MsgKey(grad, from, a.micro_batch);
    if (msg_state_[key] == kReceived) return "receives a message twice";
    if (msg_state_[key] == kNotSent) {
      waiter_[key] = st;  // resumed by the send
      *blocked = true;
      return nullptr;
    }
    msg_state_[key] = kReceived;
    *flags |= grad ? kHaveGradient : kHaveActivation;
    p->clock_s = std::max(p->clock_s, msg_time_[key]);
    return nullptr;
  }

  // Whether the action's peer is virtual stage `to`, a neighbour of the
  // action's own; spelled out without division, which the search's many
  // simulations would feel.
  bool PeerIs(const PipeAction& a, int32_t st, int32_t to, int32_t v) const {
    if (s_.v_shape) return a.peer_stage == s_.StageOf(to) && a.peer_chunk == s_.ChunkOf(to);
    if (to == v + 1) {
      return st + 1 < s_.pp ? a.peer_stage == st + 1 && a.peer_chunk == a.chunk
                            : a.peer_stage == 0 && a.peer_chunk == a.chunk + 1;
    }
    return st > 0 ? a.peer_stage == st - 1 && a.peer_chunk == a.chunk
                  : a.peer_stage == s_.pp - 1 && a.peer_chunk == a.chunk - 1;
  }

  Status CheckComplete() const {
    std::string stuck;
    int32_t n_stuck = 0;
    for (int32_t st = 0; st < s_.pp; ++st) {
      if (next_[st] == s_.stages[st].size()) continue;
      if (n_stuck++ < 4) {
        stuck += (stuck.empty() ? "" : "; ") + std::string("stage ") + Str(st) + " waits at " +
                 PipeActionToString(s_.stages[st][next_[st]]);
      }
    }
    if (n_stuck > 0) {
      return InvalidArgument(std::string(ScheduleKindName(s_.kind)) + " schedule (pp=" +
                             Str(s_.pp) + ", vpp=" + Str(s_.vpp) + ", micro-batches=" + Str(m_) +
                             ") deadlocks: " + stuck + (n_stuck > 4 ? "; ..." : ""));
    }
    for (size_t key = 0; key < msg_state_.size(); ++key) {
      if (msg_state_[key] == kSent) {
        const bool grad = key / m_ >= static_cast<size_t>(nv_);
        const int64_t from = (key / m_) % nv_, mb = key % m_;
        return InvalidArgument(std::string(grad ? "the gradient" : "the activation") +
                               " of micro-batch " + Str(mb) + " sent by stage " +
                               Str(s_.StageOf(static_cast<int32_t>(from))) + " chunk " +
                               Str(s_.ChunkOf(static_cast<int32_t>(from))) +
                               " is never received");
      }
    }
    for (int32_t v = 0; v < nv_; ++v) {
      for (int32_t mb = 0; mb < m_; ++mb) {
        const uint8_t f = flags_[static_cast<size_t>(v) * m_ + mb];
        if (!(f & kBackwardDone) || (split_ && !(f & kWeightDone))) {
          return InvalidArgument("stage " + Str(s_.StageOf(v)) + " never runs the " +
                                 (f & kBackwardDone ? "W" : "backward") + " of micro-batch " +
                                 Str(mb) + " on chunk " + Str(s_.ChunkOf(v)));
        }
      }
    }
    return Status::Ok();
  }

  const PipelineSchedule& s_;
  const PipeTimes t_;
  const int32_t m_, nv_;
  const bool split_ = SplitsBackward(s_.kind);
  std::vector<size_t> next_;   // per stage: index of its next action
  std::vector<double> clock_;  // per stage: when its next action may start
  std::vector<double> busy_;
  std::vector<int32_t> live_, peak_;  // per stage: chunks held now, and at most
  std::vector<MsgState> msg_state_;   // per message key
  std::vector<double> msg_time_;      // per message key: when it arrives
  std::vector<double> link_free_;     // per stage: when its link has sent all it was given
  std::vector<int32_t> waiter_;       // per message key: the stage waiting for it, -1 if none
  std::vector<uint8_t> flags_;        // per (virtual stage, micro-batch)
};

}  // namespace

Result<ScheduleSimulation> SimulatePipelineSchedule(const PipelineSchedule& s,
                                                    const PipeTimes& times) {
  if (s.pp < 1 || s.vpp < 1 || s.micro_batches < 1 ||
      s.stages.size() != static_cast<size_t>(s.pp)) {
    return InvalidArgument("malformed pipeline schedule: pp=" + Str(s.pp) + ", vpp=" + Str(s.vpp) +
                           ", micro-batches=" + Str(s.micro_batches) + ", " +
                           Str(static_cast<int64_t>(s.stages.size())) + " action lists");
  }
  return Simulator(s, times).Run();
}

}  // namespace scaletrain
