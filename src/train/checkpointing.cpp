#include "train/checkpointing.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "checkpoint/model_io.h"
#include "train/run_setup.h"

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
Result<std::string> ShareLeadResult(Communicator& world, const Result<std::string>& mine,
                                    const std::string& what) {
  const bool lead = world.rank() == 0;
  int64_t size = mine.ok() ? static_cast<int64_t>(mine->size()) : -1;
  ST_RETURN_IF_ERROR(world.Broadcast(&size, 1, 0));
  if (lead && !mine.ok()) return mine.status();
  if (size < 0) return FailedPrecondition("rank 0 could not " + what + " (see its message)");
  std::string text = lead ? *mine : std::string(static_cast<size_t>(size), '\0');
  ST_RETURN_IF_ERROR(world.Broadcast(reinterpret_cast<uint8_t*>(text.data()), size, 0));
  return text;
}

std::string CheckpointsRoot(const std::string& run_dir) {
  return (fs::path(run_dir) / "checkpoints").string();
}

}  // namespace

Result<std::string> ChooseCheckpoint(Communicator& world, const TrainOptions& opts) {
  if (opts.resume.empty()) return std::string();
  Result<std::string> chosen = std::string();
  if (world.rank() == 0) {
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
  return ShareLeadResult(world, chosen, "find the checkpoint to resume from");
}

Result<int64_t> RestoreCheckpoint(ParallelModel& model, const ModelSpec& spec,
                                  const std::string& dir, int64_t training_steps,
                                  bool finished_ok, bool lead) {
  ST_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(dir));
  ST_RETURN_IF_ERROR(CheckSameModel(reader->spec(), spec, dir,
                                    "resume with the config the checkpoint was trained with"));
  if (!reader->has_optimizer()) {
    return FailedPrecondition("checkpoint '" + dir +
                              "' has no optimizer.safetensors, so training cannot continue "
                              "exactly; use a checkpoint written by `scaletrain train`");
  }
  int64_t step = 0, optimizer_steps = 0;
  const nlohmann::json& m = reader->manifest();
  try {
    optimizer_steps = m.at("optimizer").at("step").get<int64_t>();
    step = m.at("step").get<int64_t>();
  } catch (const nlohmann::json::exception& ex) {
    return DataLoss(dir + "/manifest.json lacks the step or the optimizer's step: " + ex.what());
  }
  // Whole tensors in the checkpoint's shapes, then this rank's TP/PP shard
  // of each, then (the moments) its ZeRO part.
  const GPT& shard = model.shard();
  ST_RETURN_IF_ERROR(ReadRankShard(shard, *reader, "", model.whole_params()));
  const size_t numel = static_cast<size_t>(shard.flat_numel());
  std::vector<float> exp_avg(numel, 0.0f), exp_avg_sq(numel, 0.0f);
  ST_RETURN_IF_ERROR(ReadRankShard(shard, *reader, "exp_avg.", exp_avg.data()));
  ST_RETURN_IF_ERROR(ReadRankShard(shard, *reader, "exp_avg_sq.", exp_avg_sq.data()));
  model.LoadOptimizerState(exp_avg.data(), exp_avg_sq.data(), optimizer_steps);
  if (step == training_steps && finished_ok) return step;  // TrainingRun::finished()
  if (step >= training_steps) {
    return InvalidArgument("checkpoint '" + dir + "' is at step " + std::to_string(step) +
                           ", already at training.steps = " + std::to_string(training_steps) +
                           "; raise training.steps to train further");
  }
  if (lead) {
    std::fprintf(stderr, "resuming from %s at step %lld\n", dir.c_str(),
                 static_cast<long long>(step));
  }
  return step;
}

Status InitFromCheckpoint(Communicator& world, ParallelModel& model, const ModelSpec& spec,
                          const std::optional<Vocabulary>& vocab, const std::string& path) {
  const bool lead = world.rank() == 0;
  Result<std::string> resolved = std::string();
  if (lead) resolved = ResolveCheckpoint(path);
  if (!resolved.ok()) resolved = resolved.status().WithContext("training.init_from");
  ST_ASSIGN_OR_RETURN(const std::string dir,
                      ShareLeadResult(world, resolved, "find training.init_from's checkpoint"));
  ST_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(dir));
  ST_RETURN_IF_ERROR(CheckSameModel(
      reader->spec(), spec, dir,
      "training.init_from needs [model] to match it: set n_layer, n_head, n_embd, block_size "
      "(and the data's vocabulary) to the checkpoint's"));
  const nlohmann::json& m = reader->manifest();
  if (vocab && m.contains("vocab") && !m.at("vocab").is_null() &&
      m.at("vocab") != vocab->ToJson()) {
    return FailedPrecondition("training.init_from checkpoint '" + dir +
                              "' was trained with another vocabulary than data.vocab's; "
                              "tokenize the data with the checkpoint's vocabulary");
  }
  ST_RETURN_IF_ERROR(ReadRankShard(model.shard(), *reader, "", model.whole_params()));
  if (lead) std::fprintf(stderr, "initialised the weights from %s\n", dir.c_str());
  return Status::Ok();
}

CheckpointWriter::CheckpointWriter(CheckpointContext ctx) : ctx_(std::move(ctx)) {
  snapshot_.pieces = ShardPieces(ctx_.model->shard().spec(), ctx_.cfg->parallel, ctx_.coord);
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
  // A piece sits at its flat offset in a whole buffer, at its block offset
  // in a compact one (a ZeRO rank's blocks one after another).
  const TrainStateView s = ctx_.model->state();
  int64_t at = 0;
  for (const CheckpointPiece& p : snapshot_.pieces) {
    const size_t bytes = static_cast<size_t>(p.size()) * sizeof(float);
    const int64_t moments = s.moments_compact ? p.block : p.flat;
    std::memcpy(snapshot_.params.data() + at, s.params + (s.params_compact ? p.block : p.flat), bytes);
    std::memcpy(snapshot_.exp_avg.data() + at, s.exp_avg + moments, bytes);
    std::memcpy(snapshot_.exp_avg_sq.data() + at, s.exp_avg_sq + moments, bytes);
    at += p.size();
  }
}

Result<std::optional<std::string>> CheckpointWriter::Start(int64_t step, double lr) {
  std::optional<std::string> finished;
  if (in_flight_) {
    ST_ASSIGN_OR_RETURN(std::string dir, Finish());
    finished = std::move(dir);
  }
  // The lead makes the temporary directory every rank writes into.
  Result<std::string> tmp = std::string();
  if (lead()) tmp = BeginCheckpointDir(CheckpointsRoot(ctx_.run_dir), step, std::to_string(::getpid()));
  ST_ASSIGN_OR_RETURN(tmp_dir_, ShareLeadResult(*ctx_.world, tmp, "create the checkpoint directory"));
  Snapshot();
  step_ = step;
  manifest_ = Manifest(step, lr);  // now: the optimizer's step count moves on
  in_flight_ = true;
  done_ = false;
  const std::string name = ShardFileName(ctx_.world->rank());
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
  const RunConfig& cfg = *ctx_.cfg;
  const TrainingConfig& tc = cfg.training;
  const ParallelConfig& par = cfg.parallel;
  return {
      {"format", "scaletrain-checkpoint"},
      {"version", kShardedCheckpointVersion},
      {"step", step},
      {"model", SpecToJson(ctx_.spec)},
      {"layout",
       {{"dp", par.dp},
        {"tp", par.tp},
        {"pp", par.pp},
        {"cp", par.cp},
        {"vpp", par.vpp},
        {"sp", par.sp},
        {"schedule", par.schedule},
        {"zero", par.zero}}},
      {"optimizer",
       {{"type", "adamw"},
        {"step", ctx_.model->state().optimizer_steps},
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
      {"vocab", ctx_.vocab ? ctx_.vocab->ToJson() : nlohmann::json(nullptr)},
      {"tensors", ShardedTensorTable(ctx_.model->shard().spec(), par)},
  };
}

// Every rank's outcome of its background write, gathered on every rank: ok
// flag, file size, SHA-256 (64 hex digits). Collective.
std::vector<CheckpointWriter::RankWrite> CheckpointWriter::GatherWrites() {
  Communicator& world = *ctx_.world;
  constexpr int64_t kRecord = 8 + 8 + 64;
  std::vector<uint8_t> mine(kRecord, 0), all(static_cast<size_t>(kRecord * world.size()));
  const int64_t ok = write_status_.ok() ? 1 : 0, bytes = static_cast<int64_t>(digest_.bytes);
  std::memcpy(mine.data(), &ok, 8);
  std::memcpy(mine.data() + 8, &bytes, 8);
  if (ok) std::memcpy(mine.data() + 16, digest_.sha256.data(), 64);
  AbortIfFailed(world, world.Allgather(mine.data(), all.data(), kRecord));
  std::vector<RankWrite> writes;
  for (int64_t r = 0; r < world.size(); ++r) {
    const uint8_t* rec = all.data() + r * kRecord;
    RankWrite w;
    int64_t rank_ok = 0, rank_bytes = 0;
    std::memcpy(&rank_ok, rec, 8);
    std::memcpy(&rank_bytes, rec + 8, 8);
    w.ok = rank_ok != 0;
    w.file = {ShardFileName(r), static_cast<uint64_t>(rank_bytes),
              std::string(reinterpret_cast<const char*>(rec + 16), 64)};
    writes.push_back(std::move(w));
  }
  return writes;
}

// The lead's part: the manifest over every rank's file, the new checkpoint
// verified, and only then the old ones pruned. A failure leaves the previous
// checkpoints as they were.
Status CheckpointWriter::CommitOnLead(const std::vector<RankWrite>& writes, const std::string& root,
                                      const std::string& dir) {
  std::vector<FileDigest> files;
  for (size_t r = 0; r < writes.size(); ++r) {
    if (writes[r].ok) {
      files.push_back(writes[r].file);
    } else if (r == 0) {
      return write_status_;
    } else {
      return IoError("rank " + std::to_string(r) + " could not write its part of checkpoint " + dir +
                     " (see its message); the previous checkpoint is intact");
    }
  }
  ST_RETURN_IF_ERROR(CommitCheckpointDir(tmp_dir_, root, step_, manifest_, files));
  // Older checkpoints go only once this one is known good: every file was
  // read back and checked against the bytes meant by its writer; here, the
  // manifest lists them all, at their sizes.
  ST_RETURN_IF_ERROR(ValidateCheckpoint(dir));
  return PruneCheckpoints(root, ctx_.cfg->checkpoint.keep_last);
}

Result<std::string> CheckpointWriter::Finish() {
  if (!in_flight_) return Internal("no checkpoint save in flight to finish");
  if (thread_.joinable()) thread_.join();
  in_flight_ = false;
  const std::vector<RankWrite> writes = GatherWrites();
  if (!write_status_.ok() && !lead()) {  // the lead reports its own in the returned error
    std::fprintf(stderr, "error: rank %lld: %s\n", static_cast<long long>(ctx_.world->rank()),
                 write_status_.message().c_str());
  }
  const std::string root = CheckpointsRoot(ctx_.run_dir);
  const std::string dir = (fs::path(root) / CheckpointDirName(step_)).string();
  Status st;
  if (lead()) {
    st = CommitOnLead(writes, root, dir);
    if (!st.ok()) {
      std::error_code ec;
      fs::remove_all(tmp_dir_, ec);
    }
  }
  ST_RETURN_IF_ERROR(AgreeAcrossRanks(*ctx_.world, st, "to finish the checkpoint"));
  return dir;
}

}  // namespace scaletrain
