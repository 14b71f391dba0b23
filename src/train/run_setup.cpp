#include "train/run_setup.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/model_io.h"
#include "comm/flight_recorder.h"
#include "kernels/cpu/ops.h"
#include "train/checkpointing.h"
#include "train/generate.h"
#include "train/launch_checks.h"

namespace fs = std::filesystem;

namespace scaletrain {

int LaunchedRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

void TrainingRun::AbortIfFailed(const Status& st) const {
  if (st.ok()) return;
  std::fprintf(stderr, "error: rank %lld: %s\n", static_cast<long long>(groups->rank),
               st.message().c_str());
  std::fflush(stderr);
  groups->world->Abort(3);
}

namespace {

bool LaunchedByMpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(var)) return true;
  }
  return false;
}

// The vocabulary, if the data has one (VocabularyPath); ids are their own
// text otherwise.
Result<std::optional<Vocabulary>> LoadVocabulary(const DataConfig& d) {
  const std::string path = VocabularyPath(d);
  if (path.empty() || (d.vocab.empty() && !fs::exists(path))) return std::optional<Vocabulary>();
  ST_ASSIGN_OR_RETURN(Vocabulary v, Vocabulary::Load(path));
  return std::optional<Vocabulary>(std::move(v));
}

// The model as the ranks hold it: the checkpoint's spec with the
// vocabulary padded further for tensor parallelism.
ModelSpec RankModelSpec(const TrainingRun& run) {
  ModelSpec s = run.spec;
  s.padded_vocab_size =
      PaddedVocabSize(s.vocab_size, run.cfg.model.vocab_multiple, run.cfg.parallel.tp);
  return s;
}

// Data, vocabulary and the model spec they imply; every rank opens the same
// files and makes the same checks, so start-up errors need no MPI.
Status OpenData(TrainingRun& run) {
  const RunConfig& cfg = run.cfg;
  if (cfg.data.train.empty() || cfg.data.val.empty()) {
    return InvalidArgument(
        "data.train and data.val must name token shards; create them with "
        "`scaletrain data prepare --input FILE --output DIR`");
  }
  ST_ASSIGN_OR_RETURN(run.train_data, TokenDataset::Open(cfg.data.train));
  ST_ASSIGN_OR_RETURN(run.val_data, TokenDataset::Open(cfg.data.val));
  ST_ASSIGN_OR_RETURN(run.vocab, LoadVocabulary(cfg.data));
  const int32_t max_token = std::max(run.train_data->max_token(), run.val_data->max_token());
  const int64_t data_vocab = run.vocab ? run.vocab->size() : max_token + 1;
  ST_ASSIGN_OR_RETURN(run.spec,
                      ModelSpecFromConfig(cfg.model, data_vocab, cfg.model.vocab_multiple));
  const ParallelConfig& par = cfg.parallel;
  ST_RETURN_IF_ERROR(
      CheckModelShard(RankModelSpec(run), ModelShard{par.tp, 0, par.pp, 0, par.vpp, par.sp}));
  if (max_token >= run.spec.vocab_size) {
    return InvalidArgument(
        "the data holds token id " + std::to_string(max_token) + " but the vocabulary has " +
        std::to_string(run.spec.vocab_size) +
        " entries; use the vocab.json written with the data or raise model.vocab_size");
  }
  return Status::Ok();
}

// Micro-batches per step and the pipeline schedule that runs them (pp = 1:
// a one-stage 1F1B pipeline, forward and backward of each micro-batch in
// turn), the batch samplers, and the checks that need them.
Status PlanMicroBatches(TrainingRun& run) {
  const TrainingConfig& tc = run.cfg.training;
  const ParallelConfig& par = run.cfg.parallel;
  const int64_t T = run.spec.block_size, mb = tc.micro_batch_size;
  run.micro_batches = tc.global_batch_size / (mb * par.dp);
  ST_ASSIGN_OR_RETURN(run.schedule, PipelineScheduleFromConfig(par, run.micro_batches));
  if (par.rebalance && run.cfg.telemetry.rank_interval == 0) {
    return InvalidArgument("parallel.rebalance follows the per-rank records: set telemetry.rank_interval > 0");
  }
  if (par.sp && par.tp > 1 && (mb * T) % par.tp != 0) {
    return InvalidArgument("parallel.sp splits each micro-batch's " + std::to_string(mb * T) +
                           " token rows over tp = " + std::to_string(par.tp) +
                           "; make micro_batch_size x block_size a multiple of tp");
  }
  run.train_batches =
      std::make_unique<BatchSampler>(run.train_data.get(), T, static_cast<uint64_t>(tc.seed));
  run.val_batches =
      std::make_unique<BatchSampler>(run.val_data.get(), T, static_cast<uint64_t>(tc.seed));
  ST_RETURN_IF_ERROR(run.train_batches->Check().WithContext("data.train"));
  ST_RETURN_IF_ERROR(run.val_batches->Check().WithContext("data.val"));
  run.lr_schedule = LrSchedule{tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};
  return Status::Ok();
}

// training.recompute (the config check took only these names).
ActivationRecompute ActivationRecomputeOf(const std::string& name) {
  if (name == "selective") return ActivationRecompute::kSelective;
  if (name == "full") return ActivationRecompute::kFull;
  return ActivationRecompute::kNone;
}

// This rank's model shard, data parallelism, optimizer and executor.
Status BuildRankModel(TrainingRun& run) {
  const ParallelConfig& par = run.cfg.parallel;
  const TrainingConfig& tc = run.cfg.training;
  ProcessGroups& g = *run.groups;
  const ModelSpec run_spec = RankModelSpec(run);
  const ModelShard shard{par.tp, g.coord.tp, par.pp, g.coord.pp, par.vpp, par.sp};
  const std::vector<int64_t> slots = PipelineExecutor::SlotsPerChunk(run.schedule, g.coord.pp);
  DpCompression compression = DpCompression::kNone;
  DpCompressionFromName(par.dp_compress, &compression);  // the config check took only known names
  ST_ASSIGN_OR_RETURN(
      run.model, GPT::CreateShard(run_spec, shard, g.tp.get(), tc.micro_batch_size, par.dp, slots,
                                  ActivationRecomputeOf(tc.recompute)));
  run.dp = std::make_unique<DataParallel>(
      run.model->layout(), g.dp.get(),
      DataParallelOptions{par.zero, static_cast<int64_t>(par.bucket_mb * 1048576.0),
                          par.pp > 1 && run_spec.tied_embeddings(),
                          run.groups->dp_host.get(), run.groups->dp_cross.get(), compression,
                          run_spec.n_layer});
  if (par.zero >= 3)
    run.zero3 = std::make_unique<Zero3Params>(run.model->layout(), run_spec.n_layer, g.dp.get());
  run.optimizer = std::make_unique<AdamW>(&run.model->layout(),
                                          AdamWOptions{tc.beta1, tc.beta2, tc.eps, tc.weight_decay},
                                          run.dp->OwnedRanges());
  run.pipeline =
      std::make_unique<PipelineExecutor>(run.model.get(), g.pp.get(), run.dp.get(), run.schedule,
                                         tc.micro_batch_size, run.spec.block_size);
  // Fault injection (faults.slow_rank): this rank computes slower.
  if (run.cfg.faults.slow_rank == g.rank)
    run.pipeline->set_extra_forward_s(run.cfg.faults.slow_ms * 1e-3);
  return Status::Ok();
}

// Resuming a run directory without --run-dir continues it in place, and
// --resume auto always continues --run-dir (from its newest checkpoint, or
// from the start if it has none yet).
void ChooseRunDir(TrainingRun& run, const TrainOptions& opts, const std::string& checkpoint_dir) {
  run.run_dir = opts.run_dir;
  if (opts.resume == "auto") run.continuing = true;
  if (!run.run_dir.empty() || opts.resume.empty()) return;
  run.run_dir = fs::exists(fs::path(opts.resume) / "checkpoints")
                    ? opts.resume
                    : fs::path(checkpoint_dir).parent_path().parent_path().string();
  run.continuing = true;
}

Status PrepareRunDir(const std::string& run_dir, bool continuing) {
  std::error_code ec;
  if (!continuing && fs::exists(fs::path(run_dir) / "metrics.jsonl")) {
    return FailedPrecondition("run directory '" + run_dir +
                              "' already holds a run (metrics.jsonl); pass a new --run-dir, or "
                              "--resume " +
                              run_dir + " to continue it");
  }
  fs::create_directories(run_dir, ec);
  if (ec) return IoError("cannot create run directory '" + run_dir + "': " + ec.message());
  return Status::Ok();
}

// The lead creates the run directory, writes config.resolved.toml and
// memory.json and opens metrics.jsonl; every rank learns whether that worked.
Status WriteRunDir(TrainingRun& run) {
  const MemoryRecord mine = RankMemory(run);
  const std::vector<MemoryRecord> by_stage = MemoryByStage(run, mine);
  Status st;
  if (run.lead()) {
    st = PrepareRunDir(run.run_dir, run.continuing);
    if (st.ok()) {
      std::ofstream out(fs::path(run.run_dir) / "config.resolved.toml");
      out << RunConfigToToml(run.cfg);
      if (!out) st = IoError("cannot write into run directory '" + run.run_dir + "' (disk full?)");
    }
    const ParallelConfig& par = run.cfg.parallel;
    if (st.ok())
      st = WriteMemoryReport(run.run_dir, mine, by_stage, par.dp, par.tp, par.pp, par.zero);
    if (st.ok()) {
      // A continued run drops the records of steps after its checkpoint:
      // it runs them again.
      auto log = MetricsLog::Open(
          run.run_dir, run.continuing ? std::optional<int64_t>(run.start_step) : std::nullopt);
      if (log.ok()) run.metrics.emplace(std::move(log).value());
      st = log.status();
    }
    if (st.ok() && run.cfg.telemetry.rank_interval > 0) {
      auto ranks = RankLog::Open(
          run.run_dir, run.continuing ? std::optional<int64_t>(run.start_step) : std::nullopt);
      if (ranks.ok()) run.rank_log.emplace(std::move(ranks).value());
      st = ranks.status();
    }
    const TelemetryConfig& t = run.cfg.telemetry;
    if (st.ok() && t.metrics_port > 0) {
      auto server = MetricsServer::Start(t.metrics_address, t.metrics_port);
      if (server.ok()) run.metrics_server = std::move(server).value();
      st = server.status();
    }
  }
  return AgreeAcrossRanks(*run.groups->world, st, "during start-up");
}

// Every rank records its last collectives for RUN_DIR/flight/rank-R.json
// (comm/flight_recorder.h), with its groups' members for the report.
void EnableFlightRecorder(const TrainingRun& run) {
  const int64_t n = run.cfg.telemetry.flight_records;
  if (n <= 0) return;
  const Mesh& mesh = run.groups->mesh;
  std::vector<std::pair<std::string, std::vector<int64_t>>> groups;
  std::vector<int64_t> world(static_cast<size_t>(mesh.world_size()));
  for (int64_t r = 0; r < mesh.world_size(); ++r) world[static_cast<size_t>(r)] = r;
  groups.emplace_back("world", world);
  for (MeshAxis axis : kMeshAxes) groups.emplace_back(MeshAxisName(axis), mesh.GroupMembers(axis, run.rank()));
  FlightRecorder::Get().Enable((fs::path(run.run_dir) / "flight").string(), run.rank(),
                               run.hosts[static_cast<size_t>(run.rank())], n, groups);
}

}  // namespace

Status AgreeAcrossRanks(Communicator& world, const Status& local, const std::string& during) {
  int64_t failed = local.ok() ? 0 : 1;
  ST_RETURN_IF_ERROR(world.Allreduce(&failed, 1, ReduceOp::kSum));
  if (!local.ok()) return local;
  if (failed > 0) return FailedPrecondition("another rank failed " + during + " (see its message)");
  return Status::Ok();
}

Result<std::unique_ptr<TrainingRun>> SetUpTraining(const TrainOptions& opts) {
  auto run = std::make_unique<TrainingRun>();
  run->cfg = opts.config;
  cpu::SetNumThreads(static_cast<int>(run->cfg.training.threads));
  ST_RETURN_IF_ERROR(OpenData(*run));
  ST_RETURN_IF_ERROR(PlanMicroBatches(*run));
  // Communicators: the world must be dp x tp x pp.
  std::string backend = opts.backend;
  if (backend == "auto") backend = (LaunchedByMpi() || run->cfg.parallel.dp > 1) ? "mpi" : "self";
  ST_ASSIGN_OR_RETURN(run->groups, CreateCommunicators(run->cfg.parallel, backend,
                                                       run->cfg.parallel.comm_timeout_s));
  ST_RETURN_IF_ERROR(CheckRanksAgree(*run->groups->world, run->cfg, &run->hosts));
  if (run->lead()) WarnIfTensorParallelSpansHosts(run->groups->mesh, run->hosts);
  ST_RETURN_IF_ERROR(CreateHierarchicalDpGroups(*run->groups, run->cfg.parallel.dp_reduce, run->cfg.parallel.zero));
  ST_RETURN_IF_ERROR(BuildRankModel(*run));
  ST_ASSIGN_OR_RETURN(const std::string checkpoint_dir, ChooseCheckpoint(*run, opts));
  if (!checkpoint_dir.empty()) {
    ST_RETURN_IF_ERROR(RestoreCheckpoint(*run, checkpoint_dir, opts.resume == "auto"));
    run->resumed_from = checkpoint_dir;
  } else if (!run->cfg.training.init_from.empty()) {
    ST_RETURN_IF_ERROR(InitFromCheckpoint(*run, run->cfg.training.init_from));
  } else {
    run->model->InitWeights(static_cast<uint64_t>(run->cfg.training.seed));
  }
  if (run->zero3) {
    // From here the model reads its parameters gathered from the shards.
    run->zero3->LoadShard(run->model->params());
    run->model->SetParamSource(run->zero3.get());
  }
  ChooseRunDir(*run, opts, checkpoint_dir);
  if (run->run_dir.empty()) return InvalidArgument("no run directory given; pass --run-dir DIR");
  ST_RETURN_IF_ERROR(WriteRunDir(*run));
  EnableFlightRecorder(*run);
  return run;
}

MemoryRecord RankMemory(const TrainingRun& run) {
  MemoryRecord m;
  m.params_bytes = run.zero3 ? run.zero3->shard_bytes()
                             : run.model->flat_numel() * static_cast<int64_t>(sizeof(float));
  m.grads_bytes = run.dp->persistent_grad_bytes();
  m.optimizer_bytes = static_cast<int64_t>(run.optimizer->state_bytes());
  m.activations_bytes = static_cast<int64_t>(run.model->activation_bytes());
  return m;
}

std::vector<std::vector<int64_t>> GatherByStage(TrainingRun& run,
                                                const std::vector<int64_t>& mine) {
  const ProcessGroups& g = *run.groups;
  const int64_t pp = run.cfg.parallel.pp;
  const size_t n = mine.size();
  std::vector<int64_t> all(n * static_cast<size_t>(pp), 0);
  if (g.coord.dp == 0 && g.coord.tp == 0) {
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(n * g.coord.pp));
  }
  if (pp > 1)
    run.AbortIfFailed(
        g.world->Allreduce(all.data(), static_cast<int64_t>(all.size()), ReduceOp::kSum));
  std::vector<std::vector<int64_t>> by_stage;
  for (int64_t s = 0; s < pp; ++s)
    by_stage.emplace_back(all.begin() + s * n, all.begin() + (s + 1) * n);
  return by_stage;
}

std::vector<MemoryRecord> MemoryByStage(TrainingRun& run, const MemoryRecord& m) {
  std::vector<MemoryRecord> out;
  for (const auto& v : GatherByStage(
           run, {m.params_bytes, m.grads_bytes, m.optimizer_bytes, m.activations_bytes})) {
    out.push_back({v[0], v[1], v[2], v[3]});
  }
  return out;
}

void PrintRunSummary(const TrainingRun& run) {
  const ModelSpec& spec = run.spec;
  const TrainingConfig& tc = run.cfg.training;
  const ParallelConfig& par = run.cfg.parallel;
  const auto ll = [](int64_t v) { return static_cast<long long>(v); };
  const int64_t T = spec.block_size;
  std::printf(
      "model: %lld layers, %lld heads, %lld wide, context %lld, vocab %lld -> %.2fM parameters\n",
      ll(spec.n_layer), ll(spec.n_head), ll(spec.n_embd), ll(T), ll(spec.vocab_size),
      run.model->num_params() / 1e6);
  std::printf(
      "batch: %lld sequences x %lld tokens = %lld tokens/step (dp %lld x %lld micro-batches "
      "of %lld); %d threads, %s\n",
      ll(tc.global_batch_size), ll(T), ll(tc.global_batch_size * T), ll(par.dp),
      ll(run.micro_batches), ll(tc.micro_batch_size), cpu::NumThreads(), cpu::BlasInfo());
  if (run.sharded()) {
    const std::string schedule =
        par.pp > 1
            ? ", schedule " + par.schedule + (par.vpp > 1 ? " vpp " + std::to_string(par.vpp) : "")
            : "";
    std::printf(
        "layout: dp %lld x tp %lld x pp %lld%s%s; this rank (stage 0) holds %.2fM parameters\n",
        ll(par.dp), ll(par.tp), ll(par.pp), par.sp && par.tp > 1 ? ", sequence parallel" : "",
        schedule.c_str(), run.model->num_params() / 1e6);
  }
  if (par.dp > 1) {
    const MemoryRecord m = RankMemory(run);
    std::printf(
        "data parallel: dp %lld, zero %lld, %zu gradient buckets; per rank: params %.2f MiB, "
        "grads %.2f MiB, optimizer %.2f MiB\n",
        ll(par.dp), ll(par.zero), run.dp->buckets().size(), m.params_bytes / 1048576.0,
        m.grads_bytes / 1048576.0, m.optimizer_bytes / 1048576.0);
    if (run.zero3) {
      std::printf("ZeRO-3: parameters gathered layer by layer into 2 buffers of %.2f MiB\n",
                  run.zero3->gather_bytes() / 2 / 1048576.0);
    }
    const ProcessGroups& g = *run.groups;
    if (g.dp_host) {
      std::printf("gradient all-reduce: hierarchical, %d hosts x %d ranks (reduce-scatter in host, all-reduce "
                  "across, all-gather in host)\n",
                  g.dp_cross->size(), g.dp_host->size());
    }
    if (par.dp_compress != "none") {
      std::printf("gradient compression: %s%s\n", par.dp_compress.c_str(),
                  par.dp_compress == "sign" ? " (1 bit + a scale per 256 elements, error feedback)" : "");
    }
  }
  std::printf("train: %lld tokens, val: %lld tokens; run dir %s\n",
              ll(run.train_data->num_tokens()), ll(run.val_data->num_tokens()),
              run.run_dir.c_str());
  std::fflush(stdout);
}

Status PrintSample(TrainingRun& run, int64_t tokens, const std::string& last_checkpoint) {
  std::printf("\n--- sample (%lld tokens, temperature 0.8) ---\n", static_cast<long long>(tokens));
  std::vector<int32_t> prompt;
  if (run.vocab) {
    auto nl = run.vocab->Encode("\n");
    if (nl.ok()) prompt = *nl;
  }
  GenerateOptions g{tokens, 0.8, static_cast<uint64_t>(run.cfg.training.seed)};
  // A sharded model samples from its whole, read back from the checkpoint.
  std::unique_ptr<GPT> whole_model;
  const bool whole = run.sharded() || run.zero3 != nullptr;  // ZeRO-3: no rank holds it all
  if (whole) {
    ST_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelForInference(last_checkpoint, 1));
    whole_model = std::move(loaded.model);
  }
  auto ids = Generate(whole ? *whole_model : *run.model, prompt, g);
  std::vector<int32_t> fresh(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ids.end());
  if (run.vocab) {
    std::printf("%s\n", run.vocab->Decode(fresh).c_str());
  } else {
    for (int32_t id : fresh) std::printf("%d ", id);
    std::printf("\n");
  }
  std::printf("---\n");
  return Status::Ok();
}

}  // namespace scaletrain
