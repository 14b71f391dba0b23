// `scaletrain plan` as a function, for the Python package (python/): the
// binary and the package parse the same flags (plan_cmd.cpp registers them
// once) and run the same code, so every default, check and error message is
// the command's own.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace scaletrain::cli {

// What `scaletrain plan ARGS` prints on stdout, ARGS being the words after
// `plan` ({"--model", "llama2-70b", "--cluster", "dgx-h100", "--gpus", "64",
// "--json"}, or {"validate", "runs.csv", "--json"}); on failure the error
// the command prints (without "error: "), a flag CLI11 rejects included.
Result<std::string> RunPlanCommand(const std::vector<std::string>& args);

// The long flags of `plan` (validate false) or of `plan validate`, without
// "--" ("model", "micro-batch", ...).
std::vector<std::string> PlanFlagNames(bool validate);

// The names `plan` accepts for --model, --cluster and --stack, and the GPUs
// of the hardware catalog, from the catalogs of `config_dir` ("" for the
// command's default: $SCALETRAIN_CONFIG_DIR, ./configs, ...).
struct PlanCatalogNames {
  std::vector<std::string> models, clusters, gpus, stacks;
};
Result<PlanCatalogNames> ListPlanCatalogs(const std::string& config_dir);

}  // namespace scaletrain::cli
