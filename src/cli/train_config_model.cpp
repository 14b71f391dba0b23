#include "cli/train_config_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/data.h"

namespace scaletrain::cli {

Result<int64_t> TrainConfigVocab(const RunConfig& cfg, const std::string& config_path,
                                 std::optional<int64_t> vocab) {
  if (cfg.model.vocab_size > 0) return cfg.model.vocab_size;
  if (vocab) {
    if (*vocab < 1) return InvalidArgument("--vocab must be >= 1, got " + std::to_string(*vocab));
    return *vocab;
  }
  const std::string path = VocabularyPath(cfg.data);
  const std::string fix = "; set model.vocab_size (--set model.vocab_size=N), pass --vocab N, or prepare the data "
                          "with `scaletrain data prepare` so that vocab.json lies beside data.train";
  std::ifstream f(path);
  if (path.empty() || !f) {
    return NotFound("the vocabulary size of " + config_path + " is unknown: model.vocab_size is 0 and " +
                    (path.empty() ? std::string("data.train is empty") : "there is no " + path) + fix);
  }
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("vocab_size") || !j["vocab_size"].is_number_integer() ||
      j["vocab_size"].get<int64_t>() < 1) {
    return DataLoss(path + " has no positive integer vocab_size" + fix);
  }
  return j["vocab_size"].get<int64_t>();
}

Result<ModelSpec> TrainConfigModel(const RunConfig& cfg, const std::string& config_path,
                                   std::optional<int64_t> vocab, int64_t tp) {
  ST_ASSIGN_OR_RETURN(int64_t v, TrainConfigVocab(cfg, config_path, vocab));
  // As the trainer builds it (src/train/run_setup.cpp).
  ST_ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromConfig(cfg.model, v, cfg.model.vocab_multiple));
  spec.padded_vocab_size = PaddedVocabSize(spec.vocab_size, cfg.model.vocab_multiple, tp);
  spec.name = std::filesystem::path(config_path).stem().string();
  return spec;
}

}  // namespace scaletrain::cli
