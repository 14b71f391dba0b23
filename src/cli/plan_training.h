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

Result<plan::Prediction> PredictTrainingConfig(const std::string& config_path, const std::string& cluster,
                                               const std::vector<std::string>& hardware_files,
                                               std::optional<int64_t> vocab);

}  // namespace scaletrain::cli
