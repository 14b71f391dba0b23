// The run's records: what the trainer measured, as numbers, and the files
// and console lines they become. The trainer fills a StepRecord each step and
// hands it here; this layer owns the formats:
//   metrics.jsonl  one JSON object per step (keys below, sorted)
//   memory.json    the bytes each rank holds, per pipeline stage
//   the console    one progress line per step, one per validation
#pragma once

#include <array>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "telemetry/jsonl_log.h"
#include "telemetry/rank_records.h"

namespace scaletrain {

// A rank's process groups, in the order records list them.
// kDp is the gradient group (dp x cp ranks with context parallelism).
enum class CommGroup { kDp, kTp, kPp, kCp };
inline constexpr int kNumCommGroups = 4;
const char* CommGroupName(CommGroup g);  // "dp", "tp", "pp", "cp"

// What one rank handed to one group's collectives in a step
// (comm/communicator.h's payload convention).
struct GroupTraffic {
  int64_t payload_bytes = 0;
  int64_t calls = 0;
};
using StepTraffic = std::array<GroupTraffic, kNumCommGroups>;  // by CommGroup

// One training step on the lead rank. Times in seconds.
struct StepRecord {
  int64_t step = 0;  // 1-based: the number of steps done
  double loss = 0, lr = 0, grad_norm = 0;
  double step_time_s = 0, tokens_per_s = 0;
  // Where the step's time went.
  double data_s = 0, forward_s = 0, backward_s = 0;
  double grad_sync_wait_s = 0;  // waiting for the DP gradient reductions
  double exposed_comm_s = 0;    // time blocked on the DP group's collectives
  double optimizer_s = 0;       // norm, clipping, AdamW and the ZeRO all-gather
  // Only where the layout has them.
  std::optional<double> tp_comm_wait_s;   // TP collectives (inside forward/backward)
  std::optional<double> cp_comm_wait_s;   // the context-parallel ring or all-to-alls (inside them too)
  std::optional<double> pipeline_wait_s;  // pipeline receives, sends, tied-embedding sum
  std::optional<double> weight_grad_s;    // of backward_s, the W passes (zero-bubble schedules)
  std::optional<double> val_loss;
  // Traffic per group; `groups_used[g]` says whether group g has more than
  // one rank (only those appear in comm_bytes / comm_calls).
  StepTraffic traffic{};
  std::array<bool, kNumCommGroups> groups_used{};
  // With pipeline parallelism: the traffic of one rank of every stage.
  std::vector<StepTraffic> traffic_by_stage;
  // At the end of a window of per-rank records: the ranks flagged slow.
  std::vector<Straggler> stragglers;
};

// The run's mean step time, for tokens/s and the ETA. The first step of a
// run (warming caches) counts only when it is the only one.
class StepClock {
 public:
  StepClock(int64_t start_step, int64_t steps) : start_step_(start_step), steps_(steps) {}
  void Add(int64_t step, double seconds);  // step: 1-based, as StepRecord::step
  bool timed() const { return timed_steps_ > 0; }
  double MeanSeconds() const;
  double EtaSeconds(int64_t done) const { return MeanSeconds() * static_cast<double>(steps_ - done); }

 private:
  int64_t start_step_, steps_, timed_steps_ = 0;
  double sum_s_ = 0, last_s_ = 0;
};

// metrics.jsonl's line for a record: step, loss, lr, grad_norm,
// step_time_s, tokens_per_s, data_s, forward_s, backward_s,
// grad_sync_wait_s, exposed_comm_s, optimizer_s; tp_comm_wait_s,
// pipeline_wait_s, weight_grad_s and val_loss where set; comm_bytes / comm_calls (objects
// by group name) when any group has more than one rank; comm_bytes_by_stage
// / comm_calls_by_stage (arrays per group) with pipeline parallelism;
// stragglers ([{rank, host, phase, seconds, median_s, compute_ratio,
// compute_s, fastest_compute_s, median_compute_s, ranks_compared, windows}])
// when the detector flags any.
std::string StepRecordJson(const StepRecord& record);

// RUN_DIR/metrics.jsonl, appended a line per step and flushed.
class MetricsLog {
 public:
  static Result<MetricsLog> Open(const std::string& run_dir, std::optional<int64_t> resume_step);
  Status Append(const StepRecord& record);

 private:
  explicit MetricsLog(JsonlLog log) : log_(std::move(log)) {}
  JsonlLog log_;
};

// Bytes one rank holds for the whole run.
struct MemoryRecord {
  int64_t params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activations_bytes = 0;
};
// RUN_DIR/memory.json: {"per_rank": the lead's, "per_stage": one rank of
// every pipeline stage, "dp", "tp", "pp", "zero"}.
Status WriteMemoryReport(const std::string& run_dir, const MemoryRecord& per_rank,
                         const std::vector<MemoryRecord>& per_stage, int64_t dp, int64_t tp,
                         int64_t pp, int64_t zero);

// The console: "step    10/2000 | loss 2.3012 | lr 1.00e-03 | norm 0.512 |
// 80.1 ms | 51234 tok/s | ETA 2:40" and "step    10 | val loss 2.3456".
std::string StepLine(const StepRecord& record, int64_t total_steps, double eta_s);
std::string ValidationLine(const StepRecord& record);
// "1:02:03" or "2:03".
std::string FormatDuration(double seconds);

}  // namespace scaletrain
