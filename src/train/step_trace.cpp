#include "train/step_trace.h"

namespace scaletrain {

namespace {

std::string TracePath(std::string path, int64_t rank, int64_t world_size) {
  const auto at = path.find("%r");
  if (at != std::string::npos) {
    path.replace(at, 2, std::to_string(rank));
  } else if (world_size > 1) {
    path += ".rank" + std::to_string(rank);
  }
  return path;
}

}  // namespace

StepTrace::StepTrace(std::string path, int64_t rank, int64_t world_size, int64_t n_layer,
                     int64_t zero)
    : path_(TracePath(std::move(path), rank, world_size)),
      trace_(rank),
      n_layer_(n_layer),
      zero_(zero) {}

void StepTrace::OnAction(const PipeAction& a, Clock::time_point start, Clock::time_point end) {
  const bool compute = IsCompute(a.op);
  const bool waits = a.op == PipeOp::kRecvActivation || a.op == PipeOp::kRecvGradient;
  if (!compute && !waits) return;  // sends are posted, not waited for
  trace_.Complete(PipeActionToString(a), compute ? "compute" : "pipeline_wait",
                  compute ? TraceTrack::kCompute : TraceTrack::kComm, start, end,
                  {{"step", step_}, {"micro", a.micro_batch}, {"chunk", a.chunk}});
}

void StepTrace::OnLayer(const PipeAction& a, int64_t layer, Clock::time_point start,
                        Clock::time_point end) {
  const char* phase = a.op == PipeOp::kForward ? "forward" : "backward";
  trace_.Complete(std::string(phase) + " " + LayerName(layer, n_layer_), phase,
                  TraceTrack::kCompute, start, end, {{"step", step_}, {"micro", a.micro_batch}});
}

void StepTrace::OnGradReductions(const DataParallel& dp) {
  const char* op = zero_ == 0 ? "allreduce" : "reduce_scatter";
  for (const auto& c : dp.step_collectives()) {
    const GradBucket& b = dp.buckets()[c.bucket];
    const double started_us =
        std::chrono::duration<double, std::micro>(c.handle.start_time() - c.handle.issue_time())
            .count();
    trace_.Complete(std::string(op) + " bucket " + std::to_string(c.bucket), "comm",
                    TraceTrack::kComm, c.handle.issue_time(), c.handle.end_time(),
                    {{"step", step_},
                     {"group", "dp"},
                     {"bytes", (b.end - b.begin) * 4},
                     {"started", started_us}});
  }
}

void StepTrace::OnGradWait(Clock::time_point start, Clock::time_point end) {
  trace_.Complete("wait for gradients", "comm_wait", TraceTrack::kCompute, start, end,
                  {{"step", step_}});
}

void StepTrace::OnOptimizer(Clock::time_point start, Clock::time_point end) {
  trace_.Complete("optimizer", "optimizer", TraceTrack::kOptimizer, start, end, {{"step", step_}});
}

}  // namespace scaletrain
