#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/ops.h"
#include "model/gpt.h"
#include "train/checkpoint_dir.h"
#include "train/data.h"
#include "train/generate.h"
#include "train/model_io.h"
#include "train/optimizer.h"
#include "train/tokenizer.h"

namespace fs = std::filesystem;

namespace scaletrain {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string FormatDuration(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  }
  return buf;
}

// The parallel layouts land with the data/tensor/pipeline parallel issues;
// until then a layout other than 1x1x1 is refused rather than ignored.
Status CheckSingleRankLayout(const ParallelConfig& p) {
  if (p.dp != 1 || p.tp != 1 || p.pp != 1 || p.vpp != 1 || p.zero != 0 || p.sp) {
    return InvalidArgument(
        "this build trains on a single rank: parallel.dp, tp, pp and vpp must be 1, zero 0 and "
        "sp false (got dp=" + std::to_string(p.dp) + " tp=" + std::to_string(p.tp) +
        " pp=" + std::to_string(p.pp) + " vpp=" + std::to_string(p.vpp) +
        " zero=" + std::to_string(p.zero) + "); remove the [parallel] overrides");
  }
  return Status::Ok();
}

// The vocabulary: the configured file, else vocab.json beside the training
// shards, else none (ids are their own text).
Result<std::optional<Vocabulary>> FindVocabulary(const DataConfig& d) {
  std::string path = d.vocab;
  if (path.empty()) {
    fs::path beside = fs::path(d.train).parent_path() / "vocab.json";
    if (fs::exists(beside)) path = beside.string();
  }
  if (path.empty()) return std::optional<Vocabulary>();
  ST_ASSIGN_OR_RETURN(Vocabulary v, Vocabulary::Load(path));
  return std::optional<Vocabulary>(std::move(v));
}

Status PrepareRunDir(const std::string& run_dir, bool continuing) {
  std::error_code ec;
  if (!continuing && fs::exists(fs::path(run_dir) / "metrics.jsonl")) {
    return FailedPrecondition("run directory '" + run_dir +
                              "' already holds a run (metrics.jsonl); pass a new --run-dir, or "
                              "--resume " + run_dir + " to continue it");
  }
  fs::create_directories(run_dir, ec);
  if (ec) return IoError("cannot create run directory '" + run_dir + "': " + ec.message());
  return Status::Ok();
}

struct Evaluator {
  const BatchSampler* sampler;
  int64_t micro_batch, T, steps;
  std::vector<int32_t> in, tgt;
  double Run(GPT& model) {
    double sum = 0.0;
    for (int64_t i = 0; i < steps; ++i) {
      sampler->EvalSequences(i * micro_batch, micro_batch, in.data(), tgt.data());
      sum += model.Forward(in.data(), tgt.data(), micro_batch, T);
    }
    return sum / static_cast<double>(steps);
  }
};

}  // namespace

Result<TrainSummary> RunTraining(const TrainOptions& opts) {
  const RunConfig& cfg = opts.config;
  const TrainingConfig& tc = cfg.training;
  ST_RETURN_IF_ERROR(CheckSingleRankLayout(cfg.parallel));
  cpu::SetNumThreads(static_cast<int>(tc.threads));

  // Data and vocabulary.
  if (cfg.data.train.empty() || cfg.data.val.empty()) {
    return InvalidArgument("data.train and data.val must name token shards; create them with "
                           "`scaletrain data prepare --input FILE --output DIR`");
  }
  ST_ASSIGN_OR_RETURN(auto train_data, TokenDataset::Open(cfg.data.train));
  ST_ASSIGN_OR_RETURN(auto val_data, TokenDataset::Open(cfg.data.val));
  ST_ASSIGN_OR_RETURN(std::optional<Vocabulary> vocab, FindVocabulary(cfg.data));
  const int64_t data_vocab = vocab ? vocab->size()
      : std::max(train_data->max_token(), val_data->max_token()) + 1;
  ST_ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromConfig(cfg.model, data_vocab));
  if (std::max(train_data->max_token(), val_data->max_token()) >= spec.vocab_size) {
    return InvalidArgument("the data holds token id " +
                           std::to_string(std::max(train_data->max_token(), val_data->max_token())) +
                           " but the vocabulary has " + std::to_string(spec.vocab_size) +
                           " entries; use the vocab.json written with the data or raise model.vocab_size");
  }
  const int64_t T = spec.block_size, mb = tc.micro_batch_size;
  const int64_t accum = tc.global_batch_size / (mb * cfg.parallel.dp);
  BatchSampler train_sampler(train_data.get(), T, static_cast<uint64_t>(tc.seed));
  BatchSampler val_sampler(val_data.get(), T, static_cast<uint64_t>(tc.seed));
  ST_RETURN_IF_ERROR(train_sampler.Check().WithContext("data.train"));
  ST_RETURN_IF_ERROR(val_sampler.Check().WithContext("data.val"));

  // Model and optimizer.
  ST_ASSIGN_OR_RETURN(std::unique_ptr<GPT> model, GPT::Create(spec, mb));
  AdamW adamw(&model->layout(), {tc.beta1, tc.beta2, tc.eps, tc.weight_decay});
  LrSchedule sched{tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};
  int64_t start_step = 0;

  std::string run_dir = opts.run_dir;
  bool continuing = false;
  if (!opts.resume.empty()) {
    ST_ASSIGN_OR_RETURN(std::string ckpt_dir, ResolveCheckpoint(opts.resume));
    ST_ASSIGN_OR_RETURN(LoadedCheckpoint ck, ReadCheckpoint(ckpt_dir));
    ST_ASSIGN_OR_RETURN(ModelSpec saved, SpecFromJson(ck.manifest.at("model")));
    if (SpecToJson(saved) != SpecToJson(spec)) {
      return FailedPrecondition("checkpoint '" + ckpt_dir + "' is for a different model (" +
                                SpecToJson(saved).dump() + ") than this config (" +
                                SpecToJson(spec).dump() +
                                "); resume with the config the checkpoint was trained with");
    }
    if (!ck.optimizer) {
      return FailedPrecondition("checkpoint '" + ckpt_dir +
                                "' has no optimizer.safetensors, so training cannot continue "
                                "exactly; use a checkpoint written by `scaletrain train`");
    }
    ST_RETURN_IF_ERROR(LoadLayoutTensors(*ck.model, model->layout(), model->params()));
    ST_RETURN_IF_ERROR(LoadLayoutTensors(*ck.optimizer, model->layout(), adamw.exp_avg(), "exp_avg."));
    ST_RETURN_IF_ERROR(LoadLayoutTensors(*ck.optimizer, model->layout(), adamw.exp_avg_sq(), "exp_avg_sq."));
    adamw.set_step_count(ck.manifest.at("optimizer").at("step").get<int64_t>());
    start_step = ck.manifest.at("step").get<int64_t>();
    if (start_step >= tc.steps) {
      return InvalidArgument("checkpoint '" + ckpt_dir + "' is at step " + std::to_string(start_step) +
                             ", already at training.steps = " + std::to_string(tc.steps) +
                             "; raise training.steps to train further");
    }
    // Resuming a run directory without --run-dir continues it in place.
    if (run_dir.empty()) {
      run_dir = fs::exists(fs::path(opts.resume) / "checkpoints") ? opts.resume
                : fs::path(ckpt_dir).parent_path().parent_path().string();
      continuing = true;
    }
    std::fprintf(stderr, "resuming from %s at step %lld\n", ckpt_dir.c_str(),
                 static_cast<long long>(start_step));
  } else {
    model->InitWeights(static_cast<uint64_t>(tc.seed));
  }
  if (run_dir.empty()) return InvalidArgument("no run directory given; pass --run-dir DIR");
  ST_RETURN_IF_ERROR(PrepareRunDir(run_dir, continuing));
  {
    std::ofstream out(fs::path(run_dir) / "config.resolved.toml");
    out << RunConfigToToml(cfg);
    if (!out) return IoError("cannot write " + run_dir + "/config.resolved.toml (disk full?)");
  }
  std::ofstream metrics(fs::path(run_dir) / "metrics.jsonl", continuing ? std::ios::app : std::ios::trunc);
  if (!metrics) return IoError("cannot write " + run_dir + "/metrics.jsonl");
  const std::string ckpt_root = (fs::path(run_dir) / "checkpoints").string();

  auto save_checkpoint = [&](int64_t step, double lr) -> Result<std::string> {
    CheckpointContents c;
    c.model = LayoutTensors(model->layout(), model->params());
    auto m = LayoutTensors(model->layout(), adamw.exp_avg(), "exp_avg.");
    auto v = LayoutTensors(model->layout(), adamw.exp_avg_sq(), "exp_avg_sq.");
    c.optimizer = std::move(m);
    c.optimizer.insert(c.optimizer.end(), v.begin(), v.end());
    c.manifest = {
        {"format", "scaletrain-checkpoint"},
        {"version", 1},
        {"step", step},
        {"model", SpecToJson(spec)},
        {"layout", {{"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero", 0}}},
        {"optimizer", {{"type", "adamw"}, {"step", adamw.step_count()}, {"lr", lr},
                       {"beta1", tc.beta1}, {"beta2", tc.beta2}, {"eps", tc.eps},
                       {"weight_decay", tc.weight_decay}}},
        // Batch k's sequences are a function of (seed, k): the next batch
        // index and the seed are the whole data position and RNG state.
        {"data", {{"next_batch", step}, {"seed", tc.seed}, {"train", cfg.data.train},
                  {"val", cfg.data.val}}},
        {"config", RunConfigToToml(cfg)},
        {"vocab", vocab ? vocab->ToJson() : nlohmann::json(nullptr)},
    };
    ST_RETURN_IF_ERROR(WriteCheckpoint(ckpt_root, step, c));
    ST_RETURN_IF_ERROR(PruneCheckpoints(ckpt_root, cfg.checkpoint.keep));
    return (fs::path(ckpt_root) / CheckpointDirName(step)).string();
  };

  if (!opts.quiet) {
    std::printf("model: %lld layers, %lld heads, %lld wide, context %lld, vocab %lld -> %.2fM parameters\n",
                static_cast<long long>(spec.n_layer), static_cast<long long>(spec.n_head),
                static_cast<long long>(spec.n_embd), static_cast<long long>(T),
                static_cast<long long>(spec.vocab_size), model->num_params() / 1e6);
    std::printf("batch: %lld sequences x %lld tokens = %lld tokens/step (%lld micro-batches of %lld); "
                "%d threads, %s\n",
                static_cast<long long>(tc.global_batch_size), static_cast<long long>(T),
                static_cast<long long>(tc.global_batch_size * T), static_cast<long long>(accum),
                static_cast<long long>(mb), cpu::NumThreads(), cpu::BlasInfo());
    std::printf("train: %lld tokens, val: %lld tokens; run dir %s\n",
                static_cast<long long>(train_data->num_tokens()),
                static_cast<long long>(val_data->num_tokens()), run_dir.c_str());
    std::fflush(stdout);
  }

  Evaluator eval{&val_sampler, mb, T, tc.eval_steps,
                 std::vector<int32_t>(mb * T), std::vector<int32_t>(mb * T)};
  std::vector<int32_t> inputs(mb * T), targets(mb * T);
  TrainSummary summary;
  double time_sum = 0.0;
  int64_t timed_steps = 0;
  const int64_t tokens_per_step = tc.global_batch_size * T;

  for (int64_t step = start_step; step < tc.steps; ++step) {
    const auto t0 = Clock::now();
    double data_s = 0, fwd_s = 0, bwd_s = 0;
    model->ZeroGrad();
    double loss = 0.0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      const auto a = Clock::now();
      train_sampler.TrainSequences(step, micro * mb, mb, inputs.data(), targets.data());
      const auto b = Clock::now();
      loss += model->Forward(inputs.data(), targets.data(), mb, T);
      const auto c = Clock::now();
      model->Backward(1.0f / static_cast<float>(accum));
      const auto d = Clock::now();
      data_s += Seconds(a, b);
      fwd_s += Seconds(b, c);
      bwd_s += Seconds(c, d);
    }
    loss /= static_cast<double>(accum);
    const auto o0 = Clock::now();
    const double norm = GlobalGradNorm(model->grads(), model->num_params());
    const double lr = sched.At(step);
    adamw.Step(model->params(), model->grads(), lr, ClipScale(norm, tc.grad_clip));
    const auto t1 = Clock::now();
    const double step_s = Seconds(t0, t1);
    if (step > start_step || tc.steps - start_step == 1) {  // the first step warms caches
      time_sum += step_s;
      ++timed_steps;
    }
    const double avg_s = timed_steps ? time_sum / timed_steps : step_s;
    const int64_t done = step + 1;

    nlohmann::json line = {{"step", done},
                           {"loss", loss},
                           {"lr", lr},
                           {"grad_norm", norm},
                           {"step_time_s", step_s},
                           {"tokens_per_s", tokens_per_step / step_s},
                           {"data_s", data_s},
                           {"forward_s", fwd_s},
                           {"backward_s", bwd_s},
                           {"optimizer_s", Seconds(o0, t1)}};
    if (!std::isfinite(loss)) {
      metrics << line.dump() << "\n";
      return Internal("loss became " + std::to_string(loss) + " at step " + std::to_string(done) +
                      "; lower training.lr or set training.grad_clip (the last checkpoint is intact)");
    }
    if (!opts.quiet) {
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | ETA %s\n",
                  static_cast<long long>(done), static_cast<long long>(tc.steps), loss, lr, norm,
                  step_s * 1e3, tokens_per_step / step_s,
                  FormatDuration(avg_s * static_cast<double>(tc.steps - done)).c_str());
    }
    const bool last = done == tc.steps;
    if ((tc.eval_interval > 0 && done % tc.eval_interval == 0) || last) {
      const double val = eval.Run(*model);
      line["val_loss"] = val;
      summary.final_val_loss = val;
      if (!opts.quiet) std::printf("step %5lld | val loss %.4f\n", static_cast<long long>(done), val);
    }
    metrics << line.dump() << "\n" << std::flush;
    if (!metrics) return IoError("cannot append to " + run_dir + "/metrics.jsonl (disk full?)");
    if (!opts.quiet) std::fflush(stdout);
    if ((cfg.checkpoint.interval > 0 && done % cfg.checkpoint.interval == 0) || last) {
      ST_ASSIGN_OR_RETURN(summary.last_checkpoint, save_checkpoint(done, lr));
      if (!opts.quiet) std::printf("checkpoint: %s\n", summary.last_checkpoint.c_str());
    }
    summary.final_loss = loss;
    summary.steps_run++;
  }
  summary.tokens_per_s = timed_steps ? tokens_per_step / (time_sum / timed_steps) : 0.0;

  if (!opts.quiet && tc.sample_tokens > 0) {
    std::printf("\n--- sample (%lld tokens, temperature 0.8) ---\n", static_cast<long long>(tc.sample_tokens));
    std::vector<int32_t> prompt;
    if (vocab) {
      auto nl = vocab->Encode("\n");
      if (nl.ok()) prompt = *nl;
    }
    GenerateOptions g{tc.sample_tokens, 0.8, static_cast<uint64_t>(tc.seed)};
    auto ids = Generate(*model, prompt, g);
    std::vector<int32_t> fresh(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ids.end());
    if (vocab) {
      std::printf("%s\n", vocab->Decode(fresh).c_str());
    } else {
      for (int32_t id : fresh) std::printf("%d ", id);
      std::printf("\n");
    }
    std::printf("---\n");
  }
  return summary;
}

}  // namespace scaletrain
