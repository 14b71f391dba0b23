#include "train/checkpointing.h"

#include <cstdio>
#include <filesystem>

#include "train/checkpoint_dir.h"
#include "train/model_io.h"

namespace fs = std::filesystem;

namespace scaletrain {

namespace {

Status CheckSameModel(const ModelSpec& saved, const ModelSpec& spec, const std::string& dir) {
  ModelSpec saved_padded = saved;
  saved_padded.padded_vocab_size = spec.padded_vocab_size;  // padding rows carry no weights
  if (SpecToJson(saved_padded) == SpecToJson(spec)) return Status::Ok();
  return FailedPrecondition("checkpoint '" + dir + "' is for a different model (" +
                            SpecToJson(saved).dump() + ") than this config (" +
                            SpecToJson(spec).dump() +
                            "); resume with the config the checkpoint was trained with");
}

}  // namespace

Result<std::string> RestoreCheckpoint(TrainingRun& run, const std::string& resume) {
  ST_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpoint(resume));
  ST_ASSIGN_OR_RETURN(LoadedCheckpoint ck, ReadCheckpoint(dir));
  ST_ASSIGN_OR_RETURN(ModelSpec saved, SpecFromJson(ck.manifest.at("model")));
  ST_RETURN_IF_ERROR(CheckSameModel(saved, run.spec, dir));
  if (!ck.optimizer) {
    return FailedPrecondition("checkpoint '" + dir +
                              "' has no optimizer.safetensors, so training cannot continue "
                              "exactly; use a checkpoint written by `scaletrain train`");
  }
  // Each rank keeps its TP/PP shard of the whole tensors and its ZeRO part
  // of that, whatever layout wrote them.
  GPT& model = *run.model;
  const ParamLayout saved_layout = BuildParamLayout(saved);
  Buffer whole(static_cast<size_t>(saved_layout.total_numel) * sizeof(float));
  Buffer full(static_cast<size_t>(model.flat_numel()) * sizeof(float));
  ST_RETURN_IF_ERROR(LoadLayoutTensors(*ck.model, saved_layout, whole.f32()));
  ST_RETURN_IF_ERROR(ScatterToRank(saved_layout, whole.f32(), model, model.params()));
  for (const char* moment : {"exp_avg.", "exp_avg_sq."}) {
    ST_RETURN_IF_ERROR(LoadLayoutTensors(*ck.optimizer, saved_layout, whole.f32(), moment));
    ST_RETURN_IF_ERROR(ScatterToRank(saved_layout, whole.f32(), model, full.f32()));
    const bool first = std::string(moment) == "exp_avg.";
    run.dp->ScatterState(full.f32(),
                         first ? run.optimizer->exp_avg() : run.optimizer->exp_avg_sq());
  }
  run.optimizer->set_step_count(ck.manifest.at("optimizer").at("step").get<int64_t>());
  run.start_step = ck.manifest.at("step").get<int64_t>();
  const int64_t steps = run.cfg.training.steps;
  if (run.start_step >= steps) {
    return InvalidArgument("checkpoint '" + dir + "' is at step " + std::to_string(run.start_step) +
                           ", already at training.steps = " + std::to_string(steps) +
                           "; raise training.steps to train further");
  }
  if (run.lead()) {
    std::fprintf(stderr, "resuming from %s at step %lld\n", dir.c_str(),
                 static_cast<long long>(run.start_step));
  }
  return dir;
}

CheckpointWriter::CheckpointWriter(TrainingRun* run)
    : run_(run), ckpt_layout_(BuildParamLayout(run->spec)) {}

const float* CheckpointWriter::Assemble(const float* local, Buffer& whole) {
  // Each TP/PP rank of DP group 0 places its shards, the world's sum
  // assembles them (every element has one writer, the others add zeros:
  // exact). Unsharded, the local buffer already is the whole.
  if (!run_->sharded()) return local;
  whole = Buffer(static_cast<size_t>(ckpt_layout_.total_numel) * sizeof(float));
  GatherFromRank(*run_->model, local, run_->groups->coord.dp == 0, ckpt_layout_, whole.f32());
  run_->AbortIfFailed(
      run_->groups->world->Allreduce(whole.f32(), ckpt_layout_.total_numel, ReduceOp::kSum));
  return whole.f32();
}

const float* CheckpointWriter::last_whole_params() const {
  return run_->sharded() ? whole_params_.f32() : run_->model->params();
}

Result<std::string> CheckpointWriter::Save(int64_t step, double lr) {
  TrainingRun& run = *run_;
  const RunConfig& cfg = run.cfg;
  const TrainingConfig& tc = cfg.training;
  const ParallelConfig& par = cfg.parallel;
  // Every rank contributes its optimizer shard; the lead writes the whole.
  Buffer m(static_cast<size_t>(run.model->flat_numel()) * sizeof(float));
  Buffer v(static_cast<size_t>(run.model->flat_numel()) * sizeof(float));
  run.AbortIfFailed(run.dp->GatherState(run.optimizer->exp_avg(), m.f32()));
  run.AbortIfFailed(run.dp->GatherState(run.optimizer->exp_avg_sq(), v.f32()));
  Buffer wp, wm, wv;
  const float* whole_params = Assemble(run.model->params(), wp);
  const float* whole_m = Assemble(m.f32(), wm);
  const float* whole_v = Assemble(v.f32(), wv);
  const std::string root = (fs::path(run.run_dir) / "checkpoints").string();
  const std::string dir = (fs::path(root) / CheckpointDirName(step)).string();
  Status written;
  if (run.lead()) {
    CheckpointContents c;
    c.model = LayoutTensors(ckpt_layout_, whole_params);
    c.optimizer = LayoutTensors(ckpt_layout_, whole_m, "exp_avg.");
    auto vt = LayoutTensors(ckpt_layout_, whole_v, "exp_avg_sq.");
    c.optimizer.insert(c.optimizer.end(), vt.begin(), vt.end());
    c.manifest = {
        {"format", "scaletrain-checkpoint"},
        {"version", 1},
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
         {{"next_batch", step},
          {"seed", tc.seed},
          {"train", cfg.data.train},
          {"val", cfg.data.val}}},
        {"config", RunConfigToToml(cfg)},
        {"vocab", run.vocab ? run.vocab->ToJson() : nlohmann::json(nullptr)},
    };
    written = WriteCheckpoint(root, step, c);
    if (written.ok()) written = PruneCheckpoints(root, cfg.checkpoint.keep);
    if (run.sharded()) whole_params_ = std::move(wp);
  }
  ST_RETURN_IF_ERROR(AgreeAcrossRanks(*run.groups->world, written, "to write the checkpoint"));
  return dir;
}

}  // namespace scaletrain
