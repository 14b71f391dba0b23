#include "train/run_setup.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/model_io.h"
#include "comm/flight_recorder.h"
#include "kernels/cpu/ops.h"
#include "model/context_parallel.h"
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

void AbortIfFailed(Communicator& world, const Status& st) {
  if (st.ok()) return;
  std::fprintf(stderr, "error: rank %lld: %s\n", static_cast<long long>(world.rank()),
               st.message().c_str());
  std::fflush(stderr);
  world.Abort(3);
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
ModelSpec RankModelSpec(const ModelSpec& spec, const RunConfig& cfg) {
  ModelSpec s = spec;
  s.padded_vocab_size = PaddedVocabSize(s.vocab_size, cfg.model.vocab_multiple, cfg.parallel.tp);
  return s;
}

int64_t MicroBatchesPerRank(const RunConfig& cfg) {
  const TrainingConfig& tc = cfg.training;
  return tc.global_batch_size / (tc.micro_batch_size * cfg.parallel.dp);
}

// The token shards and the vocabulary; every rank opens the same files and
// makes the same checks, so start-up errors need no MPI.
Result<TrainingData> OpenData(const DataConfig& d) {
  if (d.train.empty() || d.val.empty()) {
    return InvalidArgument(
        "data.train and data.val must name token shards; create them with "
        "`scaletrain data prepare --input FILE --output DIR`");
  }
  TrainingData data;
  ST_ASSIGN_OR_RETURN(data.train, TokenDataset::Open(d.train));
  ST_ASSIGN_OR_RETURN(data.val, TokenDataset::Open(d.val));
  ST_ASSIGN_OR_RETURN(data.vocab, LoadVocabulary(d));
  return data;
}

// The model spec the config and the data imply, checked against the layout.
Result<ModelSpec> ModelSpecFor(const RunConfig& cfg, const TrainingData& data) {
  const int32_t max_token = std::max(data.train->max_token(), data.val->max_token());
  const int64_t data_vocab = data.vocab ? data.vocab->size() : max_token + 1;
  ST_ASSIGN_OR_RETURN(const ModelSpec spec,
                      ModelSpecFromConfig(cfg.model, data_vocab, cfg.model.vocab_multiple));
  const ParallelConfig& par = cfg.parallel;
  ST_RETURN_IF_ERROR(CheckModelShard(RankModelSpec(spec, cfg),
                                     ModelShard{par.tp, 0, par.pp, 0, par.vpp, par.sp, par.chunks_in_v()}));
  if (max_token >= spec.vocab_size) {
    return InvalidArgument(
        "the data holds token id " + std::to_string(max_token) + " but the vocabulary has " +
        std::to_string(spec.vocab_size) +
        " entries; use the vocab.json written with the data or raise model.vocab_size");
  }
  return spec;
}

// The step's micro-batches against the layout: the pipeline schedule that
// runs them (pp = 1: a one-stage 1F1B pipeline), rebalancing's records,
// sequence parallelism's split.
Status CheckMicroBatches(const RunConfig& cfg, int64_t seq_len) {
  const ParallelConfig& par = cfg.parallel;
  const int64_t mb = cfg.training.micro_batch_size;
  ST_RETURN_IF_ERROR(PipelineScheduleFromConfig(par, MicroBatchesPerRank(cfg)).status());
  ST_RETURN_IF_ERROR(CheckContextParallel(seq_len, par.cp));
  if (par.rebalance && cfg.telemetry.rank_interval == 0) {
    return InvalidArgument("parallel.rebalance follows the per-rank records: set telemetry.rank_interval > 0");
  }
  const int64_t rows = mb * seq_len / par.cp;  // a context-parallel rank's
  if (par.sp && par.tp > 1 && rows % par.tp != 0) {
    return InvalidArgument("parallel.sp splits each micro-batch's " + std::to_string(rows) +
                           " token rows" + (par.cp > 1 ? " (per parallel.cp rank)" : "") +
                           " over tp = " + std::to_string(par.tp) + "; make micro_batch_size x block_size" +
                           (par.cp > 1 ? " / cp" : "") + " a multiple of tp");
  }
  return Status::Ok();
}

// The batch samplers of sequences of `seq_len` tokens, checked against the data.
Status OpenSamplers(TrainingData& data, int64_t seq_len, int64_t seed) {
  data.train_batches =
      std::make_unique<BatchSampler>(data.train.get(), seq_len, static_cast<uint64_t>(seed));
  data.val_batches =
      std::make_unique<BatchSampler>(data.val.get(), seq_len, static_cast<uint64_t>(seed));
  ST_RETURN_IF_ERROR(data.train_batches->Check().WithContext("data.train"));
  return data.val_batches->Check().WithContext("data.val");
}

// training.recompute (the config check took only these names).
ActivationRecompute ActivationRecomputeOf(const std::string& name) {
  if (name == "selective") return ActivationRecompute::kSelective;
  if (name == "full") return ActivationRecompute::kFull;
  return ActivationRecompute::kNone;
}

// The communicators (the world must be dp x tp x pp) and the ranks' hosts.
Result<std::unique_ptr<ProcessGroups>> ConnectRanks(const RunConfig& cfg, std::string backend,
                                                    std::vector<std::string>* hosts) {
  const ParallelConfig& par = cfg.parallel;
  if (backend == "auto") backend = (LaunchedByMpi() || par.dp > 1) ? "mpi" : "self";
  ST_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroups> groups,
                      CreateCommunicators(par, backend, par.comm_timeout_s));
  ST_RETURN_IF_ERROR(CheckRanksAgree(*groups->world, cfg, hosts));
  if (groups->rank == 0) WarnIfTensorParallelSpansHosts(groups->mesh, *hosts);
  ST_RETURN_IF_ERROR(CreateHierarchicalDpGroups(*groups, par.dp_reduce, par.zero));
  groups->SetPeerHosts(*hosts);
  return groups;
}

Result<std::unique_ptr<ParallelModel>> BuildParallelModel(const RunConfig& cfg,
                                                          const ModelSpec& spec,
                                                          ProcessGroups* groups) {
  const TrainingConfig& tc = cfg.training;
  ParallelModelOptions o;
  o.spec = RankModelSpec(spec, cfg);
  o.parallel = cfg.parallel;
  o.micro_batch_size = tc.micro_batch_size;
  o.micro_batches = MicroBatchesPerRank(cfg);
  o.recompute = ActivationRecomputeOf(tc.recompute);
  o.adamw = AdamWOptions{tc.beta1, tc.beta2, tc.eps, tc.weight_decay};
  // Fault injection (faults.slow_rank): this rank computes slower.
  if (cfg.faults.slow_rank == groups->rank) o.extra_forward_s = cfg.faults.slow_ms * 1e-3;
  return ParallelModel::Create(o, groups);
}

// The weights the run starts from: the checkpoint `opts.resume` names (with
// the optimizer's state), training.init_from's, or a fresh initialisation.
Result<ResumePoint> LoadWeights(const TrainOptions& opts, const TrainingRun& run,
                                ParallelModel& model) {
  const RunConfig& cfg = run.cfg;
  Communicator& world = *run.groups->world;
  ResumePoint start;
  ST_ASSIGN_OR_RETURN(start.checkpoint, ChooseCheckpoint(world, opts));
  if (!start.checkpoint.empty()) {
    ST_ASSIGN_OR_RETURN(start.step,
                        RestoreCheckpoint(model, run.spec, start.checkpoint, cfg.training.steps,
                                          opts.resume == "auto", world.rank() == 0));
  } else if (!cfg.training.init_from.empty()) {
    ST_RETURN_IF_ERROR(InitFromCheckpoint(world, model, run.spec, run.data.vocab, cfg.training.init_from));
  } else {
    model.InitWeights(static_cast<uint64_t>(cfg.training.seed));
  }
  model.CommitWeights();
  return start;
}

// Resuming a run directory without --run-dir continues it in place, and
// --resume auto always continues --run-dir (from its newest checkpoint, or
// from the start if it has none yet).
Result<RunDirectory> ChooseRunDir(const TrainOptions& opts, const std::string& checkpoint_dir) {
  RunDirectory dir;
  dir.path = opts.run_dir;
  if (opts.resume == "auto") dir.continuing = true;
  if (dir.path.empty() && !opts.resume.empty()) {
    dir.path = fs::exists(fs::path(opts.resume) / "checkpoints")
                   ? opts.resume
                   : fs::path(checkpoint_dir).parent_path().parent_path().string();
    dir.continuing = true;
  }
  if (dir.path.empty()) return InvalidArgument("no run directory given; pass --run-dir DIR");
  return dir;
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

std::vector<MemoryRecord> MemoryByStage(ProcessGroups& groups, const MemoryRecord& m) {
  std::vector<MemoryRecord> out;
  for (const auto& v : GatherByStage(
           groups, {m.params_bytes, m.grads_bytes, m.optimizer_bytes, m.activations_bytes})) {
    out.push_back({v[0], v[1], v[2], v[3]});
  }
  return out;
}

// The lead's files: config.resolved.toml, memory.json, metrics.jsonl,
// ranks.jsonl, the TensorBoard events (with the memory at the start step),
// and the /metrics endpoint. `start_step`: a continued run drops
// the records of steps after its checkpoint (it runs them again).
Status OpenRunFiles(RunDirectory& dir, const RunConfig& cfg, const MemoryRecord& mine,
                    const std::vector<MemoryRecord>& by_stage, int64_t start_step) {
  ST_RETURN_IF_ERROR(PrepareRunDir(dir.path, dir.continuing));
  {
    std::ofstream out(fs::path(dir.path) / "config.resolved.toml");
    out << RunConfigToToml(cfg);
    if (!out) return IoError("cannot write into run directory '" + dir.path + "' (disk full?)");
  }
  const ParallelConfig& par = cfg.parallel;
  ST_RETURN_IF_ERROR(WriteMemoryReport(dir.path, mine, by_stage, par.dp, par.tp, par.pp, par.zero));
  const std::optional<int64_t> truncate_after =
      dir.continuing ? std::optional<int64_t>(start_step) : std::nullopt;
  ST_ASSIGN_OR_RETURN(MetricsLog metrics, MetricsLog::Open(dir.path, truncate_after));
  dir.metrics.emplace(std::move(metrics));
  if (cfg.telemetry.rank_interval > 0) {
    ST_ASSIGN_OR_RETURN(RankLog ranks, RankLog::Open(dir.path, truncate_after));
    dir.rank_log.emplace(std::move(ranks));
  }
  const TelemetryConfig& t = cfg.telemetry;
  if (t.tensorboard) {
    ST_ASSIGN_OR_RETURN(TensorBoardWriter tb, TensorBoardWriter::Open(dir.path));
    ST_RETURN_IF_ERROR(tb.AddScalars(start_step, {{"memory/params_bytes", mine.params_bytes},
                                                  {"memory/grads_bytes", mine.grads_bytes},
                                                  {"memory/optimizer_bytes", mine.optimizer_bytes},
                                                  {"memory/activations_bytes", mine.activations_bytes}}));
    dir.tensorboard.emplace(std::move(tb));
  }
  if (t.metrics_port > 0) {
    ST_ASSIGN_OR_RETURN(dir.metrics_server, MetricsServer::Start(t.metrics_address, t.metrics_port));
  }
  return Status::Ok();
}

// A fresh run that failed to start (a port taken, a full disk) leaves
// nothing a retry would trip on ("already holds a run"): the files this
// start made go, and the directory too if this start made it.
void RemoveUnstartedRun(RunDirectory& dir, bool made_dir) {
  dir.metrics.reset();
  dir.rank_log.reset();
  dir.tensorboard.reset();
  std::error_code ec;
  for (const char* f : {"config.resolved.toml", "memory.json", "metrics.jsonl", "ranks.jsonl", "tb"})
    fs::remove_all(fs::path(dir.path) / f, ec);
  if (made_dir) fs::remove(dir.path, ec);  // only if empty
}

// The run directory; the lead writes its files, and every rank learns
// whether that worked.
Result<RunDirectory> OpenRunDir(const TrainOptions& opts, TrainingRun& run) {
  ST_ASSIGN_OR_RETURN(RunDirectory dir, ChooseRunDir(opts, run.start.checkpoint));
  const MemoryRecord mine = RankMemory(*run.model);
  const std::vector<MemoryRecord> by_stage = MemoryByStage(*run.groups, mine);
  Status st;
  if (run.lead()) {
    const bool fresh = !dir.continuing && !fs::exists(fs::path(dir.path) / "metrics.jsonl");
    const bool made_dir = !fs::exists(dir.path);
    st = OpenRunFiles(dir, run.cfg, mine, by_stage, run.start.step);
    if (!st.ok() && fresh) RemoveUnstartedRun(dir, made_dir);
  }
  ST_RETURN_IF_ERROR(AgreeAcrossRanks(*run.groups->world, st, "during start-up"));
  return dir;
}

// Every rank records its last collectives for RUN_DIR/flight/rank-R.json
// (comm/flight_recorder.h), with its groups' members for the report.
void EnableFlightRecorder(const TrainingRun& run) {
  const int64_t n = run.cfg.telemetry.flight_records;
  if (n <= 0) return;
  const Mesh& mesh = run.groups->mesh;
  const int64_t rank = run.groups->rank;
  std::vector<std::pair<std::string, std::vector<int64_t>>> groups;
  std::vector<int64_t> world(static_cast<size_t>(mesh.world_size()));
  for (int64_t r = 0; r < mesh.world_size(); ++r) world[static_cast<size_t>(r)] = r;
  groups.emplace_back("world", world);
  for (MeshAxis axis : kMeshAxes) groups.emplace_back(MeshAxisName(axis), run.groups->Members(axis));
  FlightRecorder::Get().Enable((fs::path(run.dir.path) / "flight").string(), rank,
                               run.hosts[static_cast<size_t>(rank)], n, groups);
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
  const RunConfig& cfg = run->cfg;
  cpu::SetNumThreads(static_cast<int>(cfg.training.threads));
  ST_ASSIGN_OR_RETURN(run->data, OpenData(cfg.data));
  ST_ASSIGN_OR_RETURN(run->spec, ModelSpecFor(cfg, run->data));
  ST_RETURN_IF_ERROR(CheckMicroBatches(cfg, run->spec.block_size));
  if (cfg.parallel.cp_impl == "ulysses") {
    ST_RETURN_IF_ERROR(CheckUlysses(run->spec, cfg.parallel.tp, cfg.parallel.cp));
  }
  ST_RETURN_IF_ERROR(OpenSamplers(run->data, run->spec.block_size, cfg.training.seed));
  ST_ASSIGN_OR_RETURN(run->groups, ConnectRanks(cfg, opts.backend, &run->hosts));
  ST_ASSIGN_OR_RETURN(run->model, BuildParallelModel(cfg, run->spec, run->groups.get()));
  ST_ASSIGN_OR_RETURN(run->start, LoadWeights(opts, *run, *run->model));
  ST_ASSIGN_OR_RETURN(run->dir, OpenRunDir(opts, *run));
  EnableFlightRecorder(*run);
  return run;
}

MemoryRecord RankMemory(const ParallelModel& model) {
  const ModelMemoryBytes m = model.memory();
  return {m.params, m.grads, m.optimizer, m.activations};
}

std::vector<std::vector<int64_t>> GatherByStage(ProcessGroups& g, const std::vector<int64_t>& mine) {
  const int64_t pp = g.pp->size();
  const size_t n = mine.size();
  std::vector<int64_t> all(n * static_cast<size_t>(pp), 0);
  if (g.coord.dp == 0 && g.coord.tp == 0 && g.coord.cp == 0) {
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(n * g.coord.pp));
  }
  if (pp > 1)
    AbortIfFailed(*g.world,
                  g.world->Allreduce(all.data(), static_cast<int64_t>(all.size()), ReduceOp::kSum));
  std::vector<std::vector<int64_t>> by_stage;
  for (int64_t s = 0; s < pp; ++s)
    by_stage.emplace_back(all.begin() + s * n, all.begin() + (s + 1) * n);
  return by_stage;
}

void PrintRunSummary(const TrainingRun& run) {
  const ModelSpec& spec = run.spec;
  const TrainingConfig& tc = run.cfg.training;
  const ParallelConfig& par = run.cfg.parallel;
  const auto ll = [](int64_t v) { return static_cast<long long>(v); };
  const int64_t T = spec.block_size;
  const double params_m = static_cast<double>(run.model->shard().num_params()) / 1e6;
  std::printf(
      "model: %lld layers, %lld heads, %lld wide, context %lld, vocab %lld -> %.2fM parameters\n",
      ll(spec.n_layer), ll(spec.n_head), ll(spec.n_embd), ll(T), ll(spec.vocab_size), params_m);
  std::printf(
      "batch: %lld sequences x %lld tokens = %lld tokens/step (dp %lld x %lld micro-batches "
      "of %lld); %d threads, %s\n",
      ll(tc.global_batch_size), ll(T), ll(tc.global_batch_size * T), ll(par.dp),
      ll(MicroBatchesPerRank(run.cfg)), ll(tc.micro_batch_size), cpu::NumThreads(), cpu::BlasInfo());
  if (par.tp > 1 || par.pp > 1) {
    const std::string schedule =
        par.pp > 1
            ? ", schedule " + par.schedule + (par.vpp > 1 ? " vpp " + std::to_string(par.vpp) : "")
            : "";
    std::printf(
        "layout: dp %lld x tp %lld x pp %lld%s%s; this rank (stage 0) holds %.2fM parameters\n",
        ll(par.dp), ll(par.tp), ll(par.pp), par.sp && par.tp > 1 ? ", sequence parallel" : "",
        schedule.c_str(), params_m);
  }
  for (const std::string& line : run.model->LayoutSummary()) std::printf("%s\n", line.c_str());
  std::printf("train: %lld tokens, val: %lld tokens; run dir %s\n",
              ll(run.data.train->num_tokens()), ll(run.data.val->num_tokens()), run.dir.path.c_str());
  std::fflush(stdout);
}

Status PrintSample(ParallelModel& model, const std::optional<Vocabulary>& vocab,
                   uint64_t seed, int64_t tokens, const std::string& last_checkpoint) {
  std::printf("\n--- sample (%lld tokens, temperature 0.8) ---\n", static_cast<long long>(tokens));
  std::vector<int32_t> prompt;
  if (vocab) {
    auto nl = vocab->Encode("\n");
    if (nl.ok()) prompt = *nl;
  }
  GenerateOptions g{tokens, 0.8, seed};
  GPT* sampled = model.whole_model();
  LoadedModel loaded;
  if (sampled == nullptr) {
    ST_ASSIGN_OR_RETURN(loaded, LoadModelForInference(last_checkpoint, 1));
    sampled = loaded.model.get();
  }
  auto ids = Generate(*sampled, prompt, g);
  std::vector<int32_t> fresh(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ids.end());
  if (vocab) {
    std::printf("%s\n", vocab->Decode(fresh).c_str());
  } else {
    for (int32_t id : fresh) std::printf("%d ", id);
    std::printf("\n");
  }
  std::printf("---\n");
  return Status::Ok();
}

}  // namespace scaletrain
