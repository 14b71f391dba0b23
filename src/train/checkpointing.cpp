#include "train/checkpointing.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "checkpoint/model_io.h"

namespace fs = std::filesystem;

namespace scaletrain {

namespace {

Status CheckSameModel(const ModelSpec& saved, const ModelSpec& spec, const std::string& dir,
                      const std::string& fix) {
  ModelSpec saved_padded = saved;
  saved_padded.padded_vocab_size = spec.padded_vocab_size;  // padding rows carry no weights
  if (SpecToJson(saved_padded) == SpecToJson(spec)) return Status::Ok();
  return FailedPrecondition("checkpoint '" + dir + "' is for a different model (" +
                            SpecToJson(saved).dump() + ") than this config (" +
                            SpecToJson(spec).dump() + "); " + fix);
}

// This rank's shard of `prefix` tensors ("": the parameters, or a moment)
// from whole tensors in the checkpoint's shapes, into `local` (laid out as
// the rank's model).
Status ReadRankShard(const GPT& model, CheckpointReader& reader, const char* prefix, float* local) {
  const ParamLayout saved_layout = BuildParamLayout(reader.spec());
  std::vector<float> whole, full_shape;
  for (const ParamEntry& e : model.layout().entries) {
    const ParamEntry* saved = saved_layout.Find(e.name);
    if (saved == nullptr) return Internal("checkpoint layout has no '" + e.name + "'");
    whole.resize(static_cast<size_t>(saved->numel));
    ST_RETURN_IF_ERROR(reader.ReadWhole(prefix, *saved, whole.data()));
    full_shape.resize(static_cast<size_t>(NumElements(e.full_shape)));
    CopyCommonRows(whole.data(), saved->shape, full_shape.data(), e.full_shape);
    ExtractShard(e, full_shape.data(), local + e.offset);
  }
  return Status::Ok();
}

// The lead's string (or error) on every rank. Collective.
Result<std::string> ShareLeadResult(TrainingRun& run, const Result<std::string>& mine,
                                    const std::string& what) {
  Communicator& world = *run.groups->world;
  int64_t size = mine.ok() ? static_cast<int64_t>(mine->size()) : -1;
  ST_RETURN_IF_ERROR(world.Broadcast(&size, 1, 0));
  if (run.lead() && !mine.ok()) return mine.status();
  if (size < 0) return FailedPrecondition("rank 0 could not " + what + " (see its message)");
  std::string text = run.lead() ? *mine : std::string(static_cast<size_t>(size), '\0');
  ST_RETURN_IF_ERROR(world.Broadcast(reinterpret_cast<uint8_t*>(text.data()), size, 0));
  return text;
}

std::string CheckpointsRoot(const TrainingRun& run) {
  return (fs::path(run.run_dir) / "checkpoints").string();
}

}  // namespace

Result<std::string> ChooseCheckpoint(TrainingRun& run, const TrainOptions& opts) {
  if (opts.resume.empty()) return std::string();
  Result<std::string> chosen = std::string();
  if (run.lead()) {
    if (opts.resume != "auto") {
      chosen = ResolveCheckpoint(opts.resume);
    } else if (opts.run_dir.empty()) {
      chosen = InvalidArgument("--resume auto continues the run in --run-dir; pass --run-dir DIR");
    } else if (HasCheckpoints(opts.run_dir)) {
      chosen = ResolveCheckpoint(opts.run_dir);
      if (!chosen.ok()) {
        chosen = NotFound("no intact checkpoint in " + opts.run_dir + "/checkpoints (" +
                          chosen.status().message() +
                          "); remove the damaged ones to start afresh, or resume from a copy");
      }
    }
  }
  return ShareLeadResult(run, chosen, "find the checkpoint to resume from");
}

Status RestoreCheckpoint(TrainingRun& run, const std::string& dir, bool finished_ok) {
  ST_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(dir));
  ST_RETURN_IF_ERROR(CheckSameModel(reader->spec(), run.spec, dir,
                                    "resume with the config the checkpoint was trained with"));
  if (!reader->has_optimizer()) {
    return FailedPrecondition("checkpoint '" + dir +
                              "' has no optimizer.safetensors, so training cannot continue "
                              "exactly; use a checkpoint written by `scaletrain train`");
  }
  // Whole tensors in the checkpoint's shapes, then this rank's TP/PP shard
  // of each, then (the moments) its ZeRO part.
  GPT& model = *run.model;
  Buffer moments(static_cast<size_t>(model.flat_numel()) * sizeof(float));
  for (const char* prefix : {"", "exp_avg.", "exp_avg_sq."}) {
    float* local = prefix[0] == '\0' ? model.params() : moments.f32();
    ST_RETURN_IF_ERROR(ReadRankShard(model, *reader, prefix, local));
    if (prefix[0] != '\0') {
      const bool first = std::strcmp(prefix, "exp_avg.") == 0;
      run.dp->ScatterState(moments.f32(),
                           first ? run.optimizer->exp_avg() : run.optimizer->exp_avg_sq());
    }
  }
  const nlohmann::json& m = reader->manifest();
  try {
    run.optimizer->set_step_count(m.at("optimizer").at("step").get<int64_t>());
    run.start_step = m.at("step").get<int64_t>();
  } catch (const nlohmann::json::exception& ex) {
    return DataLoss(dir + "/manifest.json lacks the step or the optimizer's step: " + ex.what());
  }
  const int64_t steps = run.cfg.training.steps;
  if (run.start_step == steps && finished_ok) return Status::Ok();  // TrainingRun::finished()
  if (run.start_step >= steps) {
    return InvalidArgument("checkpoint '" + dir + "' is at step " + std::to_string(run.start_step) +
                           ", already at training.steps = " + std::to_string(steps) +
                           "; raise training.steps to train further");
  }
  if (run.lead()) {
    std::fprintf(stderr, "resuming from %s at step %lld\n", dir.c_str(),
                 static_cast<long long>(run.start_step));
  }
  return Status::Ok();
}

Status InitFromCheckpoint(TrainingRun& run, const std::string& path) {
  Result<std::string> resolved = std::string();
  if (run.lead()) resolved = ResolveCheckpoint(path);
  if (!resolved.ok()) resolved = resolved.status().WithContext("training.init_from");
  ST_ASSIGN_OR_RETURN(const std::string dir,
                      ShareLeadResult(run, resolved, "find training.init_from's checkpoint"));
  ST_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(dir));
  ST_RETURN_IF_ERROR(CheckSameModel(
      reader->spec(), run.spec, dir,
      "training.init_from needs [model] to match it: set n_layer, n_head, n_embd, block_size "
      "(and the data's vocabulary) to the checkpoint's"));
  const nlohmann::json& m = reader->manifest();
  if (run.vocab && m.contains("vocab") && !m.at("vocab").is_null() &&
      m.at("vocab") != run.vocab->ToJson()) {
    return FailedPrecondition("training.init_from checkpoint '" + dir +
                              "' was trained with another vocabulary than data.vocab's; "
                              "tokenize the data with the checkpoint's vocabulary");
  }
  ST_RETURN_IF_ERROR(ReadRankShard(*run.model, *reader, "", run.model->params()));
  run.start_step = 0;
  if (run.lead()) std::fprintf(stderr, "initialised the weights from %s\n", dir.c_str());
  return Status::Ok();
}

CheckpointWriter::CheckpointWriter(TrainingRun* run) : run_(run) {
  snapshot_.pieces = ShardPieces(run->model->spec(), run->cfg.parallel, run->groups->coord);
  int64_t n = 0;
  for (const CheckpointPiece& p : snapshot_.pieces) n += p.size();
  snapshot_.params.resize(static_cast<size_t>(n));
  snapshot_.exp_avg.resize(static_cast<size_t>(n));
  snapshot_.exp_avg_sq.resize(static_cast<size_t>(n));
}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::Snapshot() {
  // ZeRO keeps the moments of this rank's blocks only, compactly; ZeRO-0
  // keeps them whole, indexed like the parameters.
  // ZeRO-3 keeps the parameters compactly too.
  const bool compact = run_->cfg.parallel.zero >= 1;
  const bool params_compact = run_->zero3 != nullptr;
  const float* params = run_->opt_params();
  const float* m = run_->optimizer->exp_avg();
  const float* v = run_->optimizer->exp_avg_sq();
  int64_t at = 0;
  for (const CheckpointPiece& p : snapshot_.pieces) {
    const size_t bytes = static_cast<size_t>(p.size()) * sizeof(float);
    const int64_t state = compact ? p.block : p.flat;
    std::memcpy(snapshot_.params.data() + at, params + (params_compact ? p.block : p.flat), bytes);
    std::memcpy(snapshot_.exp_avg.data() + at, m + state, bytes);
    std::memcpy(snapshot_.exp_avg_sq.data() + at, v + state, bytes);
    at += p.size();
  }
}

Result<std::optional<std::string>> CheckpointWriter::Start(int64_t step, double lr) {
  std::optional<std::string> finished;
  if (in_flight_) {
    ST_ASSIGN_OR_RETURN(std::string dir, Finish());
    finished = std::move(dir);
  }
  TrainingRun& run = *run_;
  // The lead makes the temporary directory every rank writes into.
  Result<std::string> tmp = std::string();
  if (run.lead()) tmp = BeginCheckpointDir(CheckpointsRoot(run), step, std::to_string(::getpid()));
  ST_ASSIGN_OR_RETURN(tmp_dir_, ShareLeadResult(run, tmp, "create the checkpoint directory"));
  Snapshot();
  step_ = step;
  manifest_ = Manifest(step, lr);  // now: the optimizer's step count moves on
  in_flight_ = true;
  done_ = false;
  const std::string name = ShardFileName(run.rank());
  thread_ = std::thread([this, name] {
    Result<FileDigest> d = WriteShardFile((fs::path(tmp_dir_) / name).string(), snapshot_);
    write_status_ = d.status();
    if (d.ok()) digest_ = *d;
    done_ = true;
  });
  return finished;
}

bool CheckpointWriter::LocalWriteDone() const { return done_; }

nlohmann::json CheckpointWriter::Manifest(int64_t step, double lr) const {
  const TrainingRun& run = *run_;
  const RunConfig& cfg = run.cfg;
  const TrainingConfig& tc = cfg.training;
  const ParallelConfig& par = cfg.parallel;
  return {
      {"format", "scaletrain-checkpoint"},
      {"version", kShardedCheckpointVersion},
      {"step", step},
      {"model", SpecToJson(run.spec)},
      {"layout",
       {{"dp", par.dp},
        {"tp", par.tp},
        {"pp", par.pp},
        {"vpp", par.vpp},
        {"sp", par.sp},
        {"schedule", par.schedule},
        {"zero", par.zero}}},
      {"optimizer",
       {{"type", "adamw"},
        {"step", run.optimizer->step_count()},
        {"lr", lr},
        {"beta1", tc.beta1},
        {"beta2", tc.beta2},
        {"eps", tc.eps},
        {"weight_decay", tc.weight_decay}}},
      // Batch k's sequences are a function of (seed, k): the next batch
      // index and the seed are the whole data position and RNG state.
      {"data",
       {{"next_batch", step}, {"seed", tc.seed}, {"train", cfg.data.train}, {"val", cfg.data.val}}},
      {"config", RunConfigToToml(cfg)},
      {"vocab", run.vocab ? run.vocab->ToJson() : nlohmann::json(nullptr)},
      {"tensors", ShardedTensorTable(run.model->spec(), par)},
  };
}

Result<std::string> CheckpointWriter::Finish() {
  TrainingRun& run = *run_;
  if (!in_flight_) return Internal("no checkpoint save in flight to finish");
  if (thread_.joinable()) thread_.join();
  in_flight_ = false;
  // Every rank's outcome: ok flag, file size, SHA-256 (64 hex digits).
  constexpr int64_t kRecord = 8 + 8 + 64;
  std::vector<uint8_t> mine(kRecord, 0),
      all(static_cast<size_t>(kRecord * run.groups->world->size()));
  const int64_t ok = write_status_.ok() ? 1 : 0, bytes = static_cast<int64_t>(digest_.bytes);
  std::memcpy(mine.data(), &ok, 8);
  std::memcpy(mine.data() + 8, &bytes, 8);
  if (ok) std::memcpy(mine.data() + 16, digest_.sha256.data(), 64);
  run.AbortIfFailed(run.groups->world->Allgather(mine.data(), all.data(), kRecord));
  if (!write_status_.ok() && !run.lead()) {  // the lead reports its own in the returned error
    std::fprintf(stderr, "error: rank %lld: %s\n", static_cast<long long>(run.rank()),
                 write_status_.message().c_str());
  }
  const std::string root = CheckpointsRoot(run);
  const std::string dir = (fs::path(root) / CheckpointDirName(step_)).string();
  Status st;
  if (run.lead()) {
    std::vector<FileDigest> files;
    for (int64_t r = 0; r < run.groups->world->size() && st.ok(); ++r) {
      const uint8_t* rec = all.data() + r * kRecord;
      int64_t rank_ok = 0, rank_bytes = 0;
      std::memcpy(&rank_ok, rec, 8);
      std::memcpy(&rank_bytes, rec + 8, 8);
      if (!rank_ok) {
        st = r == 0 ? write_status_
                    : IoError("rank " + std::to_string(r) +
                              " could not write its part of checkpoint " + dir +
                              " (see its message); the previous checkpoint is intact");
      }
      files.push_back({ShardFileName(r), static_cast<uint64_t>(rank_bytes),
                       std::string(reinterpret_cast<const char*>(rec + 16), 64)});
    }
    if (st.ok()) st = CommitCheckpointDir(tmp_dir_, root, step_, manifest_, files);
    // Older checkpoints go only once this one is known good: every file was
    // read back and checked against the bytes meant by its writer; here, the
    // manifest lists them all, at their sizes.
    if (st.ok()) st = ValidateCheckpoint(dir);
    if (st.ok()) st = PruneCheckpoints(root, run.cfg.checkpoint.keep_last);
    if (!st.ok()) {
      std::error_code ec;
      fs::remove_all(tmp_dir_, ec);
    }
  }
  ST_RETURN_IF_ERROR(AgreeAcrossRanks(*run.groups->world, st, "to finish the checkpoint"));
  return dir;
}

}  // namespace scaletrain
