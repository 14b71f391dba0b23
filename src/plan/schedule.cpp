#include "plan/schedule.h"

#include <algorithm>
#include <string>

namespace scaletrain::plan {

const char* ScheduleKindName(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
  }
  return "?";
}

Result<ScheduleKind> ScheduleKindFromName(const std::string& name) {
  for (ScheduleKind k : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved}) {
    if (name == ScheduleKindName(k)) return k;
  }
  return InvalidArgument("unknown pipeline schedule '" + name + "'; use gpipe, 1f1b or interleaved");
}

Result<PipelineSchedule> BuildSchedule(ScheduleKind kind, int32_t pp, int32_t vpp, int32_t m) {
  if (pp < 1 || vpp < 1 || m < 1) return InvalidArgument("pipeline schedule needs pp, vpp and micro-batches >= 1");
  if (kind != ScheduleKind::kInterleaved && vpp != 1) {
    return InvalidArgument(std::string(ScheduleKindName(kind)) + " schedule runs one chunk per stage; use vpp = 1 "
                           "or the interleaved schedule");
  }
  if (kind == ScheduleKind::kInterleaved && m % pp != 0) {
    return InvalidArgument("the interleaved schedule needs micro-batches (" + std::to_string(m) +
                           ") to be a multiple of pp (" + std::to_string(pp) + ")");
  }
  PipelineSchedule s;
  s.kind = kind;
  s.pp = pp;
  s.vpp = vpp;
  s.micro_batches = m;
  s.stages.resize(pp);
  for (int32_t st = 0; st < pp; ++st) {
    auto& a = s.stages[st];
    if (kind == ScheduleKind::kGPipe) {
      for (int32_t i = 0; i < m; ++i) a.push_back({PipeOp::kForward, i, 0});
      for (int32_t i = 0; i < m; ++i) a.push_back({PipeOp::kBackward, i, 0});
    } else if (kind == ScheduleKind::k1F1B) {
      const int32_t warm = std::min(pp - st - 1, m);
      int32_t f = 0, b = 0;
      for (; f < warm; ++f) a.push_back({PipeOp::kForward, f, 0});
      for (; f < m; ++f, ++b) {
        a.push_back({PipeOp::kForward, f, 0});
        a.push_back({PipeOp::kBackward, b, 0});
      }
      for (; b < m; ++b) a.push_back({PipeOp::kBackward, b, 0});
    } else {
      // k-th forward of a stage: micro-batches go in groups of pp through
      // chunk 0, then the same group through chunk 1, ...; backwards visit
      // the chunks in reverse.
      const int32_t total = m * vpp, group = pp * vpp;
      auto fwd = [&](int32_t k) {
        return PipeAction{PipeOp::kForward, (k / group) * pp + k % pp, (k % group) / pp};
      };
      auto bwd = [&](int32_t k) {
        return PipeAction{PipeOp::kBackward, (k / group) * pp + k % pp, vpp - 1 - (k % group) / pp};
      };
      const int32_t warm = std::min((pp - st - 1) * 2 + (vpp - 1) * pp, total);
      int32_t f = 0, b = 0;
      for (; f < warm; ++f) a.push_back(fwd(f));
      for (; f < total; ++f, ++b) {
        a.push_back(fwd(f));
        a.push_back(bwd(b));
      }
      for (; b < total; ++b) a.push_back(bwd(b));
    }
  }
  return s;
}

Result<ScheduleTiming> SimulateSchedule(const PipelineSchedule& s, double t_fwd, double t_bwd) {
  const int32_t p = s.pp, v = s.vpp, m = s.micro_batches;
  // done[((op * p + stage) * v + chunk) * m + mb]: finish time, < 0 if not yet run.
  std::vector<double> done(static_cast<size_t>(2) * p * v * m, -1.0);
  auto idx = [&](PipeOp op, int32_t st, int32_t c, int32_t mb) {
    return ((static_cast<size_t>(op) * p + st) * v + c) * m + mb;
  };
  // The action that must finish before `a` can start on stage `st`; false if none.
  auto dependency = [&](int32_t st, const PipeAction& a, size_t* dep) {
    if (a.op == PipeOp::kForward) {
      if (st > 0) return *dep = idx(PipeOp::kForward, st - 1, a.chunk, a.micro_batch), true;
      if (a.chunk > 0) return *dep = idx(PipeOp::kForward, p - 1, a.chunk - 1, a.micro_batch), true;
      return false;
    }
    if (st < p - 1) return *dep = idx(PipeOp::kBackward, st + 1, a.chunk, a.micro_batch), true;
    if (a.chunk < v - 1) return *dep = idx(PipeOp::kBackward, 0, a.chunk + 1, a.micro_batch), true;
    return *dep = idx(PipeOp::kForward, st, a.chunk, a.micro_batch), true;
  };
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  ScheduleTiming t;
  t.busy.assign(p, 0.0);
  size_t remaining = 0;
  for (const auto& a : s.stages) remaining += a.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int32_t st = 0; st < p; ++st) {
      const auto& list = s.stages[st];
      while (next[st] < list.size()) {
        const PipeAction& a = list[next[st]];
        size_t dep = 0;
        double ready = 0;
        if (dependency(st, a, &dep)) {
          if (done[dep] < 0) break;
          ready = done[dep];
        }
        const double dur = a.op == PipeOp::kForward ? t_fwd : t_bwd;
        const double start = std::max(free_at[st], ready);
        free_at[st] = start + dur;
        done[idx(a.op, st, a.chunk, a.micro_batch)] = free_at[st];
        t.busy[st] += dur;
        ++next[st];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      return Internal(std::string("pipeline schedule ") + ScheduleKindName(s.kind) + " deadlocks (pp=" +
                      std::to_string(p) + ", vpp=" + std::to_string(v) + ", micro-batches=" + std::to_string(m) + ")");
    }
  }
  t.makespan = *std::max_element(free_at.begin(), free_at.end());
  t.idle.resize(p);
  for (int32_t st = 0; st < p; ++st) t.idle[st] = t.makespan - t.busy[st];
  return t;
}

std::vector<int32_t> PeakInFlight(const PipelineSchedule& s) {
  std::vector<int32_t> peak(s.pp, 0);
  for (int32_t st = 0; st < s.pp; ++st) {
    int32_t live = 0;
    for (const auto& a : s.stages[st]) {
      live += a.op == PipeOp::kForward ? 1 : -1;
      peak[st] = std::max(peak[st], live);
    }
  }
  return peak;
}

}  // namespace scaletrain::plan
