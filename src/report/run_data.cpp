#include "report/run_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/jsonl.h"

namespace fs = std::filesystem;

namespace scaletrain::report {

namespace {

using nlohmann::json;

double Num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// The step records of a .jsonl file (core/jsonl.h: a line a run is still
// writing is skipped).
std::vector<json> ReadJsonLines(const fs::path& path) {
  std::vector<json> out;
  ForEachStepRecord(path.string(), [&out](const std::string&, const json& j) { out.push_back(j); });
  return out;
}

std::vector<std::string> Strings(const json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.contains(key) || !j[key].is_array()) return out;
  for (const json& v : j[key]) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

LaunchEvent ParseLaunchEvent(const json& j) {
  LaunchEvent e;
  e.time = j.value("time", std::string()), e.event = j.value("event", std::string());
  e.hosts = Strings(j, "hosts"), e.failed_hosts = Strings(j, "failed_hosts");
  e.dp = j.value("dp", int64_t{0}), e.resume_step = j.value("resume_step", int64_t{-1});
  e.exit_code = j.value("exit_code", int64_t{0}), e.last_step = j.value("last_step", int64_t{-1});
  e.checkpoint_step = j.value("checkpoint_step", int64_t{-1}), e.steps_lost = j.value("steps_lost", int64_t{0});
  return e;
}

// events.jsonl's records (no "step" in them); a line cut short is skipped.
std::vector<LaunchEvent> ReadLaunchEvents(const fs::path& path) {
  std::vector<LaunchEvent> events;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("event")) events.push_back(ParseLaunchEvent(j));
  }
  return events;
}

StepPoint ParseStep(const json& j) {
  StepPoint p;
  p.step = j["step"].get<int64_t>();
  p.loss = Num(j, "loss"), p.lr = Num(j, "lr"), p.grad_norm = Num(j, "grad_norm");
  p.step_time_s = Num(j, "step_time_s"), p.tokens_per_s = Num(j, "tokens_per_s");
  p.data_s = Num(j, "data_s"), p.forward_s = Num(j, "forward_s"), p.backward_s = Num(j, "backward_s");
  p.grad_sync_wait_s = Num(j, "grad_sync_wait_s"), p.optimizer_s = Num(j, "optimizer_s");
  // Both wait inside forward and backward: the split's "TP + CP comm".
  p.tp_wait_s = Num(j, "tp_comm_wait_s") + Num(j, "cp_comm_wait_s"), p.pp_wait_s = Num(j, "pipeline_wait_s");
  if (j.contains("val_loss") && j["val_loss"].is_number()) p.val_loss = j["val_loss"].get<double>();
  if (j.contains("stragglers") && j["stragglers"].is_array()) {
    for (const json& s : j["stragglers"]) {
      StragglerNote n;
      n.rank = s.value("rank", int64_t{-1}),
      n.ranks_compared = s.value("ranks_compared", int64_t{0});
      n.host = s.value("host", std::string("?")), n.phase = s.value("phase", std::string("?"));
      n.compute_s = Num(s, "compute_s"), n.fastest_compute_s = Num(s, "fastest_compute_s");
      n.median_compute_s = Num(s, "median_compute_s"), n.compute_ratio = Num(s, "compute_ratio");
      p.stragglers.push_back(std::move(n));
    }
  }
  return p;
}

Result<FlightFile> ReadFlightFile(const fs::path& path) {
  std::ifstream in(path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("records") || !j["records"].is_array()) {
    return InvalidArgument(path.string() + " is not a flight record (damaged or cut short)");
  }
  FlightFile f;
  f.rank = j.value("rank", int64_t{-1});
  f.host = j.value("host", std::string());
  f.reason = j.value("reason", std::string());
  if (j.contains("groups") && j["groups"].is_object()) {
    for (const auto& [name, members] : j["groups"].items()) {
      if (members.is_array()) f.groups[name] = members.get<std::vector<int64_t>>();
    }
  }
  for (const json& r : j["records"]) {
    FlightOp op;
    op.id = r.value("id", int64_t{0}), op.seq = r.value("seq", int64_t{0});
    op.bytes = r.value("bytes", int64_t{0}), op.step = r.value("step", int64_t{0});
    op.issued_ns = r.value("issued_ns", int64_t{0});
    op.group = r.value("group", std::string()), op.op = r.value("op", std::string());
    op.state = r.value("state", std::string());
    f.ops.push_back(std::move(op));
  }
  return f;
}

Status ReadMemory(const fs::path& path, RunData* run) {
  std::ifstream in(path);
  if (!in) return Status::Ok();  // optional
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument(path.string() + " is not valid JSON (damaged?)");
  if (j.contains("per_stage") && j["per_stage"].is_array()) {
    for (const json& m : j["per_stage"]) {
      run->memory_by_stage.push_back(
          {Num(m, "params_bytes"), Num(m, "grads_bytes"), Num(m, "optimizer_bytes"), Num(m, "activations_bytes")});
    }
  }
  return Status::Ok();
}

}  // namespace

double RankWindowPoint::Compute() const {
  double sum = 0;
  for (const char* k : {"data_s", "forward_s", "backward_s", "optimizer_s"}) {
    auto it = phases.find(k);
    if (it != phases.end()) sum += it->second;
  }
  return sum;
}

int64_t RunData::world_size() const {
  return config.parallel.dp * config.parallel.tp * config.parallel.pp * config.parallel.cp;
}

bool RunData::finished() const { return !steps.empty() && steps.back().step >= config.training.steps; }

Result<RunData> ReadRunDir(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) return InvalidArgument("no run directory at '" + dir + "'");
  if (!fs::exists(d / "config.resolved.toml") || !fs::exists(d / "metrics.jsonl")) {
    return InvalidArgument("'" + dir +
                           "' is not a run directory: it has no config.resolved.toml and metrics.jsonl; "
                           "pass the --run-dir of a `scaletrain train`");
  }
  RunData run;
  run.dir = dir;
  auto cfg = LoadRunConfig((d / "config.resolved.toml").string(), {});
  if (!cfg.ok()) return cfg.status();
  run.config = std::move(cfg).value();
  // A resumed run appends: a step seen again replaces the earlier record.
  std::map<int64_t, StepPoint> steps;
  for (const json& j : ReadJsonLines(d / "metrics.jsonl")) steps[j["step"].get<int64_t>()] = ParseStep(j);
  for (auto& [step, p] : steps) run.steps.push_back(std::move(p));
  for (const json& j : ReadJsonLines(d / "ranks.jsonl")) {
    RankWindowPoint w;
    w.step = j["step"].get<int64_t>();
    w.rank = j.value("rank", int64_t{0}), w.stage = j.value("stage", int64_t{0});
    w.host = j.value("host", std::string());
    if (j.contains("phases") && j["phases"].is_object()) {
      for (const auto& [k, v] : j["phases"].items()) {
        if (v.is_number()) w.phases[k] = v.get<double>();
      }
    }
    run.windows.push_back(std::move(w));
  }
  run.events = ReadLaunchEvents(d / "events.jsonl");
  ST_RETURN_IF_ERROR(ReadMemory(d / "memory.json", &run));
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(d / "flight", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || e.path().extension() != ".json") continue;
    ST_ASSIGN_OR_RETURN(FlightFile f, ReadFlightFile(e.path()));
    run.flight.push_back(std::move(f));
  }
  std::sort(run.flight.begin(), run.flight.end(),
            [](const FlightFile& a, const FlightFile& b) { return a.rank < b.rank; });
  return run;
}

}  // namespace scaletrain::report
