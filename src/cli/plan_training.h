// The planner's prediction for a training config, for commands other than
// `plan` (`report`): what `scaletrain plan --train-config CONFIG --cluster C
// [--hardware FILE ...]` prints, as a value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/cost_model.h"

namespace scaletrain::cli {

struct TrainingPrediction {
  plan::Prediction prediction;
  plan::ClusterSpec cluster;  // the cluster predicted on, as the catalog (and --hardware) gave it
};

Result<TrainingPrediction> PredictTrainingConfig(const std::string& config_path,
                                                 const std::string& cluster,
                                                 const std::vector<std::string>& hardware_files,
                                                 std::optional<int64_t> vocab);

// Whether `c` is a profile `scaletrain bench` measured (CPU ranks as
// "GPUs"), not a GPU cluster of the catalog: only the bench writes fabrics
// of kind "measured" or "unmeasured".
bool IsBenchProfile(const plan::ClusterSpec& c);

}  // namespace scaletrain::cli
