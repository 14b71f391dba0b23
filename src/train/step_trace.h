// `scaletrain train --trace FILE`: a Chrome trace (telemetry/trace.h) of
// every step on this rank. Compute row: each pipeline action ("F mb0 c0")
// and, inside it, each layer's forward or backward ("backward layer 3");
// communication row: each gradient bucket's reduction from issue to finish
// and the pipeline's receive waits; optimizer row: the optimizer step.
// bench/trace_overlap.py reads these names.
#pragma once

#include <memory>
#include <string>

#include "parallel/data_parallel.h"
#include "parallel/parallel_model.h"
#include "parallel/pipeline.h"
#include "telemetry/trace.h"

namespace scaletrain {

class StepTrace : public StepObserver {
 public:
  // `path`: "%r" is replaced by the rank; without it, a world of more than
  // one rank appends ".rank<r>".
  StepTrace(std::string path, int64_t rank, int64_t world_size, int64_t n_layer, int64_t zero);

  void BeginStep(int64_t step) { step_ = step; }  // 1-based
  void OnAction(const PipeAction& action, Clock::time_point start, Clock::time_point end) override;
  void OnLayer(const PipeAction& action, int64_t layer, Clock::time_point start,
               Clock::time_point end) override;
  // The step's gradient reductions, bucket by bucket.
  void OnGradReductions(const DataParallel& dp) override;
  void OnGradWait(Clock::time_point start, Clock::time_point end) override;
  void OnOptimizer(Clock::time_point start, Clock::time_point end) override;

  const std::string& path() const { return path_; }
  Status Write() const { return trace_.Write(path_); }

 private:
  std::string path_;
  ChromeTrace trace_;
  int64_t n_layer_, zero_;
  int64_t step_ = 0;
};

}  // namespace scaletrain
