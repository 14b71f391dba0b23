// The model a training config describes, as the trainer will build it, for
// the commands that do not train: `plan --train-config` and `bench --config`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/config.h"
#include "core/status.h"
#include "model/spec.h"

namespace scaletrain::cli {

// The vocabulary: model.vocab_size, else `vocab` (a --vocab flag), else the
// vocab.json that `scaletrain data prepare` wrote (data.vocab, or beside
// data.train), as the trainer finds it. Errors name the three fixes.
Result<int64_t> TrainConfigVocab(const RunConfig& cfg, const std::string& config_path,
                                 std::optional<int64_t> vocab);

// The model as the trainer runs it at tensor-parallel size `tp`: the
// vocabulary padded to a multiple of model.vocab_multiple x tp; named after
// the config file.
Result<ModelSpec> TrainConfigModel(const RunConfig& cfg, const std::string& config_path,
                                   std::optional<int64_t> vocab, int64_t tp);

}  // namespace scaletrain::cli
