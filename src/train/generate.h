// Text generation from a trained model: autoregressive sampling with a
// temperature, over a sliding window of the last block_size tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt.h"

namespace scaletrain {

struct GenerateOptions {
  int64_t max_new_tokens = 200;
  double temperature = 1.0;  // 0: greedy (argmax)
  uint64_t seed = 1337;
};

// Returns prompt + generated ids. `on_token` (optional) sees each new id as
// it is produced, for streaming output.
std::vector<int32_t> Generate(GPT& model, std::vector<int32_t> prompt, const GenerateOptions& opt,
                              const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace scaletrain
