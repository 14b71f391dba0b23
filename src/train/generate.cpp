#include "train/generate.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"

namespace scaletrain {

std::vector<int32_t> Generate(GPT& model, std::vector<int32_t> ids, const GenerateOptions& opt,
                              const std::function<void(int32_t)>& on_token) {
  const ModelSpec& s = model.spec();
  Rng rng(opt.seed);
  if (ids.empty()) ids.push_back(0);
  std::vector<double> prob(static_cast<size_t>(s.vocab_size));
  for (int64_t n = 0; n < opt.max_new_tokens; ++n) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), s.block_size);
    const int32_t* window = ids.data() + ids.size() - T;
    model.Forward(window, nullptr, 1, T);
    const float* logits = model.logits(0, T - 1);
    int32_t next = 0;
    if (opt.temperature <= 0.0) {
      next = static_cast<int32_t>(std::max_element(logits, logits + s.vocab_size) - logits);
    } else {
      const double mx = *std::max_element(logits, logits + s.vocab_size);
      double sum = 0.0;
      for (int64_t v = 0; v < s.vocab_size; ++v) {
        prob[v] = std::exp((logits[v] - mx) / opt.temperature);
        sum += prob[v];
      }
      double u = rng.UniformDouble() * sum;
      next = static_cast<int32_t>(s.vocab_size - 1);
      for (int64_t v = 0; v < s.vocab_size; ++v) {
        u -= prob[v];
        if (u < 0) {
          next = static_cast<int32_t>(v);
          break;
        }
      }
    }
    ids.push_back(next);
    if (on_token) on_token(next);
  }
  return ids;
}

}  // namespace scaletrain
