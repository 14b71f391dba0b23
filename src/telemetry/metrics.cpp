#include "telemetry/metrics.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file_io.h"

namespace scaletrain {

namespace fs = std::filesystem;

const char* CommGroupName(CommGroup g) {
  switch (g) {
    case CommGroup::kDp:
      return "dp";
    case CommGroup::kTp:
      return "tp";
    case CommGroup::kPp:
      return "pp";
    case CommGroup::kCp:
      return "cp";
  }
  return "?";
}

namespace {

void AddTraffic(const StepRecord& r, nlohmann::json& line) {
  bool any = false;
  for (bool used : r.groups_used) any = any || used;
  if (any) {
    line["comm_bytes"] = nlohmann::json::object();
    line["comm_calls"] = nlohmann::json::object();
    for (int g = 0; g < kNumCommGroups; ++g) {
      if (!r.groups_used[g]) continue;
      const char* name = CommGroupName(static_cast<CommGroup>(g));
      line["comm_bytes"][name] = r.traffic[g].payload_bytes;
      line["comm_calls"][name] = r.traffic[g].calls;
    }
  }
  if (r.traffic_by_stage.empty()) return;
  nlohmann::json bytes = nlohmann::json::object(), calls = nlohmann::json::object();
  for (int g = 0; g < kNumCommGroups; ++g) {
    const char* name = CommGroupName(static_cast<CommGroup>(g));
    bytes[name] = nlohmann::json::array();
    calls[name] = nlohmann::json::array();
    for (const StepTraffic& stage : r.traffic_by_stage) {
      bytes[name].push_back(stage[g].payload_bytes);
      calls[name].push_back(stage[g].calls);
    }
  }
  line["comm_bytes_by_stage"] = std::move(bytes);
  line["comm_calls_by_stage"] = std::move(calls);
}

}  // namespace

void StepClock::Add(int64_t step, double seconds) {
  if (step - 1 > start_step_ || steps_ - start_step_ == 1) {
    sum_s_ += seconds;
    ++timed_steps_;
  }
  last_s_ = seconds;
}

double StepClock::MeanSeconds() const {
  return timed_steps_ ? sum_s_ / static_cast<double>(timed_steps_) : last_s_;
}

std::string StepRecordJson(const StepRecord& r) {
  nlohmann::json line = {{"step", r.step},
                         {"loss", r.loss},
                         {"lr", r.lr},
                         {"grad_norm", r.grad_norm},
                         {"step_time_s", r.step_time_s},
                         {"tokens_per_s", r.tokens_per_s},
                         {"data_s", r.data_s},
                         {"forward_s", r.forward_s},
                         {"backward_s", r.backward_s},
                         {"grad_sync_wait_s", r.grad_sync_wait_s},
                         {"exposed_comm_s", r.exposed_comm_s},
                         {"optimizer_s", r.optimizer_s}};
  if (r.tp_comm_wait_s) line["tp_comm_wait_s"] = *r.tp_comm_wait_s;
  if (r.cp_comm_wait_s) line["cp_comm_wait_s"] = *r.cp_comm_wait_s;
  if (r.pipeline_wait_s) line["pipeline_wait_s"] = *r.pipeline_wait_s;
  if (r.weight_grad_s) line["weight_grad_s"] = *r.weight_grad_s;
  if (r.val_loss) line["val_loss"] = *r.val_loss;
  AddTraffic(r, line);
  if (!r.stragglers.empty()) {
    line["stragglers"] = nlohmann::json::array();
    for (const Straggler& s : r.stragglers) {
      line["stragglers"].push_back({{"rank", s.rank},
                                    {"host", s.host},
                                    {"phase", RankPhaseName(s.phase)},
                                    {"seconds", s.seconds},
                                    {"median_s", s.median_seconds},
                                    {"compute_ratio", s.compute_ratio},
                                    {"compute_s", s.compute_s},
                                    {"fastest_compute_s", s.fastest_compute_s},
                                    {"median_compute_s", s.stage_median_compute_s},
                                    {"ranks_compared", s.ranks_compared},
                                    {"windows", s.windows}});
    }
  }
  return line.dump();
}

Result<MetricsLog> MetricsLog::Open(const std::string& run_dir, std::optional<int64_t> resume_step) {
  ST_ASSIGN_OR_RETURN(JsonlLog log, JsonlLog::Open((fs::path(run_dir) / "metrics.jsonl").string(), resume_step));
  return MetricsLog(std::move(log));
}

Status MetricsLog::Append(const StepRecord& record) { return log_.Append(StepRecordJson(record) + "\n"); }

namespace {
nlohmann::json MemoryJson(const MemoryRecord& m) {
  return {{"params_bytes", m.params_bytes},
          {"grads_bytes", m.grads_bytes},
          {"optimizer_bytes", m.optimizer_bytes},
          {"activations_bytes", m.activations_bytes}};
}
}  // namespace

Status WriteMemoryReport(const std::string& run_dir, const MemoryRecord& per_rank,
                         const std::vector<MemoryRecord>& per_stage, int64_t dp, int64_t tp,
                         int64_t pp, int64_t zero) {
  nlohmann::json stages = nlohmann::json::array();
  for (const MemoryRecord& m : per_stage) stages.push_back(MemoryJson(m));
  const nlohmann::json report = {{"per_rank", MemoryJson(per_rank)},
                                 {"per_stage", stages},
                                 {"dp", dp},
                                 {"tp", tp},
                                 {"pp", pp},
                                 {"zero", zero}};
  const std::string path = (fs::path(run_dir) / "memory.json").string();
  std::ofstream out(path);
  out << report.dump(1) << "\n";
  if (!out) return IoError("cannot write " + path + " (disk full? permissions?)");
  return Status::Ok();
}

std::string FormatDuration(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  }
  return buf;
}

std::string StepLine(const StepRecord& r, int64_t total_steps, double eta_s) {
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | ETA %s",
      static_cast<long long>(r.step), static_cast<long long>(total_steps), r.loss, r.lr,
      r.grad_norm, r.step_time_s * 1e3, r.tokens_per_s, FormatDuration(eta_s).c_str());
  return buf;
}

std::string ValidationLine(const StepRecord& r) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "step %5lld | val loss %.4f", static_cast<long long>(r.step),
                r.val_loss.value_or(0));
  return buf;
}

}  // namespace scaletrain
