#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "kernels/cpu/ops.h"
#include "model/gpt.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/process_groups.h"
#include "train/checkpoint_dir.h"
#include "train/data.h"
#include "train/generate.h"
#include "train/model_io.h"
#include "train/optimizer.h"
#include "train/tokenizer.h"
#include "telemetry/trace.h"

namespace fs = std::filesystem;

namespace scaletrain {

int LaunchedRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

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

bool LaunchedByMpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(var)) return true;
  }
  return false;
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

// Every rank learns whether any rank failed, so none waits forever in a
// collective for a rank that already gave up.
Status Agree(Communicator& world, Status local) {
  int64_t failed = local.ok() ? 0 : 1;
  Status st = world.Allreduce(&failed, 1, ReduceOp::kSum);
  if (!st.ok()) return st;
  if (!local.ok()) return local;
  if (failed > 0) return FailedPrecondition("another rank failed during start-up (see its message)");
  return Status::Ok();
}

}  // namespace

Result<TrainSummary> RunTraining(const TrainOptions& opts) {
  const RunConfig& cfg = opts.config;
  const TrainingConfig& tc = cfg.training;
  cpu::SetNumThreads(static_cast<int>(tc.threads));

  // Data and vocabulary: every rank opens the same files.
  if (cfg.data.train.empty() || cfg.data.val.empty()) {
    return InvalidArgument("data.train and data.val must name token shards; create them with "
                           "`scaletrain data prepare --input FILE --output DIR`");
  }
  ST_ASSIGN_OR_RETURN(auto train_data, TokenDataset::Open(cfg.data.train));
  ST_ASSIGN_OR_RETURN(auto val_data, TokenDataset::Open(cfg.data.val));
  ST_ASSIGN_OR_RETURN(std::optional<Vocabulary> vocab, FindVocabulary(cfg.data));
  const int32_t max_token = std::max(train_data->max_token(), val_data->max_token());
  const int64_t data_vocab = vocab ? vocab->size() : max_token + 1;
  // `spec` is the model as checkpoints store it; `run_spec` pads the
  // embedding further so tensor parallelism splits it evenly.
  ST_ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromConfig(cfg.model, data_vocab, cfg.model.vocab_multiple));
  ModelSpec run_spec = spec;
  run_spec.padded_vocab_size = RoundUp(spec.vocab_size, cfg.model.vocab_multiple * cfg.parallel.tp);
  const ParallelConfig& par = cfg.parallel;
  ST_RETURN_IF_ERROR(CheckModelShard(run_spec, ModelShard{par.tp, 0, par.pp, 0, par.vpp, par.sp}));
  if (max_token >= spec.vocab_size) {
    return InvalidArgument("the data holds token id " + std::to_string(max_token) +
                           " but the vocabulary has " + std::to_string(spec.vocab_size) +
                           " entries; use the vocab.json written with the data or raise model.vocab_size");
  }
  const int64_t T = spec.block_size, mb = tc.micro_batch_size, dp_size = cfg.parallel.dp;
  const int64_t accum = tc.global_batch_size / (mb * dp_size);
  // With pipeline parallelism the accumulation micro-batches are the
  // pipeline's; the schedule is checked before any rank starts MPI.
  ST_ASSIGN_OR_RETURN(PipelineSchedule schedule, PipelineScheduleFromConfig(par, accum));
  if (par.sp && par.tp > 1 && (mb * T) % par.tp != 0) {
    return InvalidArgument("parallel.sp splits each micro-batch's " + std::to_string(mb * T) +
                           " token rows over tp = " + std::to_string(par.tp) +
                           "; make micro_batch_size x block_size a multiple of tp");
  }
  const int64_t seqs_per_rank = tc.global_batch_size / dp_size;
  BatchSampler train_sampler(train_data.get(), T, static_cast<uint64_t>(tc.seed));
  BatchSampler val_sampler(val_data.get(), T, static_cast<uint64_t>(tc.seed));
  ST_RETURN_IF_ERROR(train_sampler.Check().WithContext("data.train"));
  ST_RETURN_IF_ERROR(val_sampler.Check().WithContext("data.val"));

  // Communicators: the world must be dp x tp x pp.
  std::string backend = opts.backend;
  if (backend == "auto") backend = (LaunchedByMpi() || dp_size > 1) ? "mpi" : "self";
  ST_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroups> groups,
                      CreateCommunicators(cfg.parallel, backend, cfg.parallel.comm_timeout_s));
  Communicator& world = *groups->world;
  Communicator& dp_comm = *groups->dp;
  Communicator& tp_comm = *groups->tp;
  Communicator& pp_comm = *groups->pp;
  const int64_t stage = groups->coord.pp, pp_size = par.pp;
  const bool last_stage = stage == pp_size - 1;
  const bool sharded = par.tp > 1 || pp_size > 1;
  const bool lead = groups->rank == 0;  // writes logs, metrics and checkpoints
  const bool quiet = opts.quiet || !lead;

  // Model, data parallelism, optimizer.
  const ModelShard shard{par.tp, groups->coord.tp, pp_size, stage, par.vpp, par.sp};
  std::vector<int64_t> slots(static_cast<size_t>(par.vpp), 1);
  if (pp_size > 1) slots = PipelineExecutor::SlotsPerChunk(schedule, stage);
  ST_ASSIGN_OR_RETURN(std::unique_ptr<GPT> model,
                      GPT::CreateShard(run_spec, shard, &tp_comm, mb, dp_size, slots));
  PipelineExecutor pipeline(model.get(), &pp_comm, schedule, mb, T);
  DataParallel dpar(model->layout(), &dp_comm,
                    {cfg.parallel.zero, static_cast<int64_t>(cfg.parallel.bucket_mb * 1048576.0)});
  AdamW adamw(&model->layout(), {tc.beta1, tc.beta2, tc.eps, tc.weight_decay}, dpar.OwnedRanges());
  LrSchedule sched{tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};
  int64_t start_step = 0;

  std::string run_dir = opts.run_dir;
  bool continuing = false;
  if (!opts.resume.empty()) {
    ST_ASSIGN_OR_RETURN(std::string ckpt_dir, ResolveCheckpoint(opts.resume));
    ST_ASSIGN_OR_RETURN(LoadedCheckpoint ck, ReadCheckpoint(ckpt_dir));
    ST_ASSIGN_OR_RETURN(ModelSpec saved, SpecFromJson(ck.manifest.at("model")));
    ModelSpec saved_padded = saved;
    saved_padded.padded_vocab_size = spec.padded_vocab_size;  // padding rows carry no weights
    if (SpecToJson(saved_padded) != SpecToJson(spec)) {
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
    // Checkpoints hold whole tensors and the whole optimizer state; each
    // rank keeps its TP/PP shard of them and its ZeRO part of that, whatever
    // layout wrote them.
    const ParamLayout saved_layout = BuildParamLayout(saved);
    Buffer whole(static_cast<size_t>(saved_layout.total_numel) * sizeof(float));
    Buffer full(static_cast<size_t>(model->flat_numel()) * sizeof(float));
    ST_RETURN_IF_ERROR(LoadLayoutTensors(*ck.model, saved_layout, whole.f32()));
    ST_RETURN_IF_ERROR(ScatterToRank(saved_layout, whole.f32(), *model, model->params()));
    for (const char* moment : {"exp_avg.", "exp_avg_sq."}) {
      ST_RETURN_IF_ERROR(LoadLayoutTensors(*ck.optimizer, saved_layout, whole.f32(), moment));
      ST_RETURN_IF_ERROR(ScatterToRank(saved_layout, whole.f32(), *model, full.f32()));
      dpar.ScatterState(full.f32(), std::string(moment) == "exp_avg." ? adamw.exp_avg() : adamw.exp_avg_sq());
    }
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
    if (lead) {
      std::fprintf(stderr, "resuming from %s at step %lld\n", ckpt_dir.c_str(),
                   static_cast<long long>(start_step));
    }
  } else {
    model->InitWeights(static_cast<uint64_t>(tc.seed));
  }
  if (run_dir.empty()) return InvalidArgument("no run directory given; pass --run-dir DIR");

  std::ofstream metrics;
  const std::string ckpt_root = (fs::path(run_dir) / "checkpoints").string();
  const int64_t param_bytes = model->flat_numel() * static_cast<int64_t>(sizeof(float));
  const std::vector<int64_t> memory_bytes = {param_bytes, dpar.persistent_grad_bytes(),
                                             static_cast<int64_t>(adamw.state_bytes()),
                                             static_cast<int64_t>(model->activation_bytes())};
  auto memory_json = [](const std::vector<int64_t>& v) {
    return nlohmann::json{
        {"params_bytes", v[0]}, {"grads_bytes", v[1]}, {"optimizer_bytes", v[2]}, {"activations_bytes", v[3]}};
  };
  // A collective that fails (the watchdog, or a lost rank) ends the job on
  // every surviving rank: the state can no longer be trusted to agree.
  auto comm_fail = [&](const Status& st) {
    std::fprintf(stderr, "error: rank %lld: %s\n", static_cast<long long>(groups->rank), st.message().c_str());
    std::fflush(stderr);
    world.Abort(3);
  };
#define ST_COMM_OR_ABORT(expr)        \
  do {                                \
    Status st_c_ = (expr);            \
    if (!st_c_.ok()) comm_fail(st_c_); \
  } while (0)

  // One rank of every pipeline stage (dp 0, tp 0) reports what it holds and,
  // each step, what it sent: the stages differ (first/last hold the
  // embedding/head), and the lead writes them all.
  const bool stage_reporter = groups->coord.dp == 0 && groups->coord.tp == 0;
  auto gather_by_stage = [&](std::vector<int64_t> mine) -> std::vector<std::vector<int64_t>> {
    const size_t n = mine.size();
    std::vector<int64_t> all(n * static_cast<size_t>(pp_size), 0);
    if (stage_reporter) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(n * stage));
    if (pp_size > 1) ST_COMM_OR_ABORT(world.Allreduce(all.data(), static_cast<int64_t>(all.size()), ReduceOp::kSum));
    std::vector<std::vector<int64_t>> by_stage;
    for (int64_t s = 0; s < pp_size; ++s) by_stage.emplace_back(all.begin() + s * n, all.begin() + (s + 1) * n);
    return by_stage;
  };
  nlohmann::json memory_by_stage = nlohmann::json::array();
  for (const auto& v : gather_by_stage(memory_bytes)) memory_by_stage.push_back(memory_json(v));
  Status setup;
  if (lead) {
    setup = PrepareRunDir(run_dir, continuing);
    if (setup.ok()) {
      std::ofstream out(fs::path(run_dir) / "config.resolved.toml");
      out << RunConfigToToml(cfg);
      std::ofstream mem(fs::path(run_dir) / "memory.json");
      const nlohmann::json mem_json = {{"per_rank", memory_json(memory_bytes)},
                                       {"per_stage", memory_by_stage},
                                       {"dp", dp_size},
                                       {"tp", par.tp},
                                       {"pp", pp_size},
                                       {"zero", cfg.parallel.zero}};
      mem << mem_json.dump(1) << "\n";
      metrics.open(fs::path(run_dir) / "metrics.jsonl", continuing ? std::ios::app : std::ios::trunc);
      if (!out || !mem || !metrics) setup = IoError("cannot write into run directory '" + run_dir + "' (disk full?)");
    }
  }
  ST_RETURN_IF_ERROR(Agree(world, setup));

  // Whole tensors in the checkpoint's layout: each TP/PP rank of DP group
  // 0 places its shards, the world's sum assembles them (every element has
  // one writer, the others add zeros: exact). Unsharded, the local buffer
  // already is the whole: it is used as it is.
  const ParamLayout ckpt_layout = BuildParamLayout(spec);
  Buffer final_params;  // sharded: the lead's last assembled parameters, for the sample
  auto assemble = [&](const float* local, Buffer& whole) -> const float* {
    if (!sharded) return local;
    whole = Buffer(static_cast<size_t>(ckpt_layout.total_numel) * sizeof(float));
    GatherFromRank(*model, local, groups->coord.dp == 0, ckpt_layout, whole.f32());
    ST_COMM_OR_ABORT(world.Allreduce(whole.f32(), ckpt_layout.total_numel, ReduceOp::kSum));
    return whole.f32();
  };
  auto save_checkpoint = [&](int64_t step, double lr) -> Result<std::string> {
    // Every rank contributes its optimizer shard; the lead writes the whole.
    Buffer m(static_cast<size_t>(model->flat_numel()) * sizeof(float));
    Buffer v(static_cast<size_t>(model->flat_numel()) * sizeof(float));
    ST_COMM_OR_ABORT(dpar.GatherState(adamw.exp_avg(), m.f32()));
    ST_COMM_OR_ABORT(dpar.GatherState(adamw.exp_avg_sq(), v.f32()));
    Buffer wp, wm, wv;
    const float* whole_params = assemble(model->params(), wp);
    const float* whole_m = assemble(m.f32(), wm);
    const float* whole_v = assemble(v.f32(), wv);
    const std::string dir = (fs::path(ckpt_root) / CheckpointDirName(step)).string();
    Status written;
    if (lead) {
      CheckpointContents c;
      c.model = LayoutTensors(ckpt_layout, whole_params);
      c.optimizer = LayoutTensors(ckpt_layout, whole_m, "exp_avg.");
      auto vt = LayoutTensors(ckpt_layout, whole_v, "exp_avg_sq.");
      c.optimizer.insert(c.optimizer.end(), vt.begin(), vt.end());
      c.manifest = {
          {"format", "scaletrain-checkpoint"},
          {"version", 1},
          {"step", step},
          {"model", SpecToJson(spec)},
          {"layout", {{"dp", dp_size}, {"tp", par.tp}, {"pp", pp_size}, {"vpp", par.vpp},
                      {"sp", par.sp}, {"schedule", par.schedule}, {"zero", cfg.parallel.zero}}},
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
      written = WriteCheckpoint(ckpt_root, step, c);
      if (written.ok()) written = PruneCheckpoints(ckpt_root, cfg.checkpoint.keep);
      if (sharded) final_params = std::move(wp);
    }
    ST_RETURN_IF_ERROR(Agree(world, written));
    return dir;
  };

  if (!quiet) {
    std::printf("model: %lld layers, %lld heads, %lld wide, context %lld, vocab %lld -> %.2fM parameters\n",
                static_cast<long long>(spec.n_layer), static_cast<long long>(spec.n_head),
                static_cast<long long>(spec.n_embd), static_cast<long long>(T),
                static_cast<long long>(spec.vocab_size), model->num_params() / 1e6);
    std::printf("batch: %lld sequences x %lld tokens = %lld tokens/step (dp %lld x %lld micro-batches "
                "of %lld); %d threads, %s\n",
                static_cast<long long>(tc.global_batch_size), static_cast<long long>(T),
                static_cast<long long>(tc.global_batch_size * T), static_cast<long long>(dp_size),
                static_cast<long long>(accum), static_cast<long long>(mb), cpu::NumThreads(),
                cpu::BlasInfo());
    if (sharded) {
      std::printf("layout: dp %lld x tp %lld x pp %lld%s%s; this rank (stage 0) holds %.2fM parameters\n",
                  static_cast<long long>(dp_size), static_cast<long long>(par.tp),
                  static_cast<long long>(pp_size), par.sp && par.tp > 1 ? ", sequence parallel" : "",
                  pp_size > 1 ? (", schedule " + par.schedule + (par.vpp > 1 ? " vpp " + std::to_string(par.vpp) : "")).c_str() : "",
                  model->num_params() / 1e6);
    }
    if (dp_size > 1) {
      std::printf("data parallel: dp %lld, zero %lld, %zu gradient buckets; per rank: params %.2f MiB, "
                  "grads %.2f MiB, optimizer %.2f MiB\n",
                  static_cast<long long>(dp_size), static_cast<long long>(cfg.parallel.zero),
                  dpar.buckets().size(), param_bytes / 1048576.0,
                  dpar.persistent_grad_bytes() / 1048576.0, adamw.state_bytes() / 1048576.0);
    }
    std::printf("train: %lld tokens, val: %lld tokens; run dir %s\n",
                static_cast<long long>(train_data->num_tokens()),
                static_cast<long long>(val_data->num_tokens()), run_dir.c_str());
    std::fflush(stdout);
  }

  // The trace, if asked for: per-layer forward/backward spans, each bucket's
  // collective from issue to finish, the optimizer.
  std::unique_ptr<ChromeTrace> trace;
  std::string trace_path = opts.trace;
  if (!trace_path.empty()) {
    const auto at = trace_path.find("%r");
    if (at != std::string::npos) {
      trace_path.replace(at, 2, std::to_string(groups->rank));
    } else if (world.size() > 1) {
      trace_path += ".rank" + std::to_string(groups->rank);
    }
    trace = std::make_unique<ChromeTrace>(groups->rank);
  }
  Clock::time_point span_start;
  int64_t trace_step = 0, trace_micro = 0;
  auto layer_name = [&](const char* phase, int64_t layer) {
    const std::string what = layer < 0 ? "embedding" : layer == spec.n_layer ? "head+loss"
                             : "layer " + std::to_string(layer);
    return std::string(phase) + " " + what;
  };
  std::function<void(int64_t)> fwd_hook, bwd_trace_hook;
  if (trace) {
    fwd_hook = [&](int64_t layer) {
      const auto now = Clock::now();
      trace->Complete(layer_name("forward", layer), "forward", TraceTrack::kCompute, span_start, now,
                      {{"step", trace_step}, {"micro", trace_micro}});
      span_start = now;
    };
    bwd_trace_hook = [&](int64_t layer) {
      const auto now = Clock::now();
      trace->Complete(layer_name("backward", layer), "backward", TraceTrack::kCompute, span_start,
                      now, {{"step", trace_step}, {"micro", trace_micro}});
      span_start = now;
    };
  }
  auto trace_collectives = [&]() {
    for (const auto& c : dpar.last_collectives()) {
      const GradBucket& b = dpar.buckets()[c.bucket];
      trace->Complete(std::string(cfg.parallel.zero == 0 ? "allreduce" : "reduce_scatter") +
                          " bucket " + std::to_string(c.bucket),
                      "comm", TraceTrack::kComm, c.handle.issue_time(), c.handle.end_time(),
                      {{"step", trace_step}, {"group", "dp"},
                       {"bytes", (b.end - b.begin) * 4},
                       {"started", std::chrono::duration<double, std::micro>(
                                       c.handle.start_time() - c.handle.issue_time()).count()}});
    }
  };

  std::vector<int32_t> inputs(mb * T), targets(mb * T);
  // Validation micro-batches are dealt out over the DP ranks and averaged.
  auto evaluate = [&]() -> double {
    double sum = 0.0;
    for (int64_t i = dp_comm.rank(); i < tc.eval_steps; i += dp_size) {
      val_sampler.EvalSequences(i * mb, mb, inputs.data(), targets.data());
      // Through every pipeline stage; the loss is on the last.
      auto r = pipeline.Evaluate(inputs.data(), targets.data());
      if (!r.ok()) comm_fail(r.status());
      sum += *r;
    }
    ST_COMM_OR_ABORT(dp_comm.Allreduce(&sum, 1, ReduceOp::kSum));
    if (pp_size > 1) ST_COMM_OR_ABORT(pp_comm.Allreduce(&sum, 1, ReduceOp::kSum));
    return sum / static_cast<double>(tc.eval_steps);
  };

  TrainSummary summary;
  summary.rank = static_cast<int>(groups->rank);
  double time_sum = 0.0;
  int64_t timed_steps = 0;
  const int64_t tokens_per_step = tc.global_batch_size * T;
  const int64_t first_seq = dp_comm.rank() * seqs_per_rank;
  auto on_ready = [&](int64_t layer) {
    if (bwd_trace_hook) bwd_trace_hook(layer);
    dpar.OnGradsReady(layer);
  };

  for (int64_t step = start_step; step < tc.steps; ++step) {
    groups->SetStep(step + 1);
    dp_comm.TakeStats();
    tp_comm.TakeStats();
    pp_comm.TakeStats();
    const auto t0 = Clock::now();
    double data_s = 0, fwd_s = 0, bwd_s = 0, sync_s = 0;
    dpar.ZeroGradState(model->grads());
    double loss = 0.0, pipe_wait_s = 0;
    if (pp_size > 1) {
      // The schedule runs every micro-batch; data parallelism hears about
      // the gradients during the last one's backward.
      dpar.BeginBackward(true, model->grads());
      auto source = [&](int64_t micro, int32_t* tok, int32_t* tgt) {
        train_sampler.TrainSequences(step, first_seq + micro * mb, mb, tok, tgt);
      };
      std::function<void(const PipeAction&, Clock::time_point, Clock::time_point)> on_action;
      if (trace) {
        on_action = [&](const PipeAction& a, Clock::time_point s0, Clock::time_point s1) {
          const bool compute = IsCompute(a.op);
          const bool waits = a.op == PipeOp::kRecvActivation || a.op == PipeOp::kRecvGradient;
          if (!compute && !waits) return;
          trace->Complete(PipeActionToString(a), compute ? "compute" : "pipeline_wait",
                          compute ? TraceTrack::kCompute : TraceTrack::kComm, s0, s1,
                          {{"step", step + 1}, {"micro", a.micro_batch}, {"chunk", a.chunk}});
        };
      }
      auto r = pipeline.RunStep(source, 1.0f / static_cast<float>(accum * dp_size),
                                [&](int64_t layer) { dpar.OnGradsReady(layer); }, on_action);
      if (!r.ok()) comm_fail(r.status());
      loss = *r;
      const auto d = Clock::now();
      ST_COMM_OR_ABORT(dpar.EndBackward());
      const auto e = Clock::now();
      if (trace) {
        trace_step = step + 1;
        trace_collectives();
        trace->Complete("wait for gradients", "comm_wait", TraceTrack::kCompute, d, e);
      }
      const PipelineStepTimes& pt = pipeline.last_times();
      fwd_s = pt.forward_s;
      bwd_s = pt.backward_s;
      pipe_wait_s = pt.wait_s + pt.tied_sync_s;
      sync_s = Seconds(d, e);
    }
    for (int64_t micro = 0; pp_size == 1 && micro < accum; ++micro) {
      const auto a = Clock::now();
      train_sampler.TrainSequences(step, first_seq + micro * mb, mb, inputs.data(), targets.data());
      const auto b = Clock::now();
      trace_step = step + 1;
      trace_micro = micro;
      span_start = b;
      auto fl = model->ForwardChunk(0, 0, inputs.data(), targets.data(), nullptr, mb, T, fwd_hook);
      if (!fl.ok()) comm_fail(fl.status());
      loss += *fl;
      const auto c = Clock::now();
      const bool communicates = micro == accum - 1 || cfg.parallel.zero == 2;
      dpar.BeginBackward(communicates, model->grads());
      span_start = c;
      // 1/(accum x dp): the DP reduction sums, so the sum is the mean.
      ST_COMM_OR_ABORT(model->BackwardChunk(0, 0, nullptr, 1.0f / static_cast<float>(accum * dp_size), on_ready));
      const auto d = Clock::now();
      ST_COMM_OR_ABORT(dpar.EndBackward());
      const auto e = Clock::now();
      if (trace && communicates) {
        trace_collectives();
        trace->Complete("wait for gradients", "comm_wait", TraceTrack::kCompute, d, e);
      }
      data_s += Seconds(a, b);
      fwd_s += Seconds(b, c);
      bwd_s += Seconds(c, d);
      sync_s += Seconds(d, e);
    }
    loss /= static_cast<double>(accum);
    if (pp_size > 1) {
      // Only the last stage computed the loss.
      if (!last_stage) loss = 0.0;
      ST_COMM_OR_ABORT(pp_comm.Allreduce(&loss, 1, ReduceOp::kSum));
    }
    const auto o0 = Clock::now();
    if (dp_size > 1) {
      auto avg = dpar.Average(loss);
      if (!avg.ok()) comm_fail(avg.status());
      loss = *avg;
    }
    auto norm_r = dpar.GradNorm(model->grads(), {&tp_comm, &pp_comm});
    if (!norm_r.ok()) comm_fail(norm_r.status());
    const double norm = *norm_r;
    const double lr = sched.At(step);
    adamw.Step(model->params(), dpar.optimizer_grads(model->grads()), lr, ClipScale(norm, tc.grad_clip),
               dpar.grads_compact());
    ST_COMM_OR_ABORT(dpar.GatherParams(model->params()));
    const auto t1 = Clock::now();
    if (trace) trace->Complete("optimizer", "optimizer", TraceTrack::kOptimizer, o0, t1, {{"step", step + 1}});
    const double step_s = Seconds(t0, t1);
    if (step > start_step || tc.steps - start_step == 1) {  // the first step warms caches
      time_sum += step_s;
      ++timed_steps;
    }
    const double avg_s = timed_steps ? time_sum / timed_steps : step_s;
    const int64_t done = step + 1;
    const CommStats cs = dp_comm.TakeStats();
    const CommStats tp_cs = tp_comm.TakeStats();
    const CommStats pp_cs = pp_comm.TakeStats();

    nlohmann::json line = {{"step", done},
                           {"loss", loss},
                           {"lr", lr},
                           {"grad_norm", norm},
                           {"step_time_s", step_s},
                           {"tokens_per_s", tokens_per_step / step_s},
                           {"data_s", data_s},
                           {"forward_s", fwd_s},
                           {"backward_s", bwd_s},
                           {"grad_sync_wait_s", sync_s},
                           {"exposed_comm_s", cs.wait_s},
                           {"optimizer_s", Seconds(o0, t1)}};
    // Tensor-parallel collectives block inside forward and backward: their
    // wait is part of forward_s/backward_s, reported here to split it out.
    if (par.tp > 1) line["tp_comm_wait_s"] = tp_cs.wait_s;
    if (pp_size > 1) line["pipeline_wait_s"] = pipe_wait_s;
    if (dp_size > 1 || sharded) {
      line["comm_bytes"] = nlohmann::json::object();
      line["comm_calls"] = nlohmann::json::object();
      if (dp_size > 1) {
        line["comm_bytes"]["dp"] = cs.payload_bytes();
        line["comm_calls"]["dp"] = cs.calls();
      }
      if (par.tp > 1) {
        line["comm_bytes"]["tp"] = tp_cs.payload_bytes();
        line["comm_calls"]["tp"] = tp_cs.calls();
      }
      if (pp_size > 1) {
        line["comm_bytes"]["pp"] = pp_cs.payload_bytes();
        line["comm_calls"]["pp"] = pp_cs.calls();
      }
    }
    if (pp_size > 1) {
      // The same for one rank of every stage (the lead's are stage 0's).
      const auto by_stage = gather_by_stage({cs.payload_bytes(), cs.calls(), tp_cs.payload_bytes(), tp_cs.calls(),
                                             pp_cs.payload_bytes(), pp_cs.calls()});
      nlohmann::json bytes = nlohmann::json::object(), calls = nlohmann::json::object();
      for (const auto& [g, i] : {std::pair{"dp", 0}, {"tp", 2}, {"pp", 4}}) {
        bytes[g] = nlohmann::json::array(), calls[g] = nlohmann::json::array();
        for (const auto& v : by_stage) bytes[g].push_back(v[i]), calls[g].push_back(v[i + 1]);
      }
      line["comm_bytes_by_stage"] = bytes;
      line["comm_calls_by_stage"] = calls;
    }
    if (!std::isfinite(loss)) {
      if (lead) metrics << line.dump() << "\n";
      return Internal("loss became " + std::to_string(loss) + " at step " + std::to_string(done) +
                      "; lower training.lr or set training.grad_clip (the last checkpoint is intact)");
    }
    if (!quiet) {
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | ETA %s\n",
                  static_cast<long long>(done), static_cast<long long>(tc.steps), loss, lr, norm,
                  step_s * 1e3, tokens_per_step / step_s,
                  FormatDuration(avg_s * static_cast<double>(tc.steps - done)).c_str());
    }
    const bool last = done == tc.steps;
    if ((tc.eval_interval > 0 && done % tc.eval_interval == 0) || last) {
      const double val = evaluate();
      line["val_loss"] = val;
      summary.final_val_loss = val;
      if (!quiet) std::printf("step %5lld | val loss %.4f\n", static_cast<long long>(done), val);
    }
    if (lead) {
      metrics << line.dump() << "\n" << std::flush;
      if (!metrics) return IoError("cannot append to " + run_dir + "/metrics.jsonl (disk full?)");
    }
    if (!quiet) std::fflush(stdout);
    if ((cfg.checkpoint.interval > 0 && done % cfg.checkpoint.interval == 0) || last) {
      ST_ASSIGN_OR_RETURN(summary.last_checkpoint, save_checkpoint(done, lr));
      if (!quiet) std::printf("checkpoint: %s\n", summary.last_checkpoint.c_str());
    }
    summary.final_loss = loss;
    summary.steps_run++;
  }
#undef ST_COMM_OR_ABORT
  if (trace) {
    ST_RETURN_IF_ERROR(trace->Write(trace_path));
    if (!quiet) std::printf("trace: %s (open in https://ui.perfetto.dev)\n", trace_path.c_str());
  }
  summary.tokens_per_s = timed_steps ? tokens_per_step / (time_sum / timed_steps) : 0.0;

  if (!quiet && tc.sample_tokens > 0) {
    std::printf("\n--- sample (%lld tokens, temperature 0.8) ---\n", static_cast<long long>(tc.sample_tokens));
    std::vector<int32_t> prompt;
    if (vocab) {
      auto nl = vocab->Encode("\n");
      if (nl.ok()) prompt = *nl;
    }
    GenerateOptions g{tc.sample_tokens, 0.8, static_cast<uint64_t>(tc.seed)};
    // A sharded model samples from its assembled whole on one rank.
    std::unique_ptr<GPT> whole_model;
    if (sharded) {
      ST_ASSIGN_OR_RETURN(whole_model, GPT::Create(spec, 1));
      std::memcpy(whole_model->params(), final_params.f32(),
                  static_cast<size_t>(ckpt_layout.total_numel) * sizeof(float));
    }
    auto ids = Generate(sharded ? *whole_model : *model, prompt, g);
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
