#include "parallel/parallel_model.h"

#include <algorithm>
#include <cstdio>

namespace scaletrain {

namespace {

double Seconds(ParallelModel::Clock::time_point a, ParallelModel::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

DataParallelOptions DataParallelOptionsFor(const ParallelConfig& par, const ModelSpec& spec,
                                           ProcessGroups& g) {
  DpCompression compression = DpCompression::kNone;
  DpCompressionFromName(par.dp_compress, &compression);  // the config check took only known names
  return DataParallelOptions{par.zero,
                             static_cast<int64_t>(par.bucket_mb * 1048576.0),
                             par.pp > 1 && spec.tied_embeddings() && !par.chunks_in_v(),
                             g.dp_host.get(),
                             g.dp_cross.get(),
                             compression,
                             spec.n_layer};
}

// The layers of each of the rank's model chunks: ZeRO-3 gathers per chunk
// pass (zb-v's two chunks each run their own forwards and backwards).
std::vector<LayerRange> ChunkRanges(const GPT& model) {
  std::vector<LayerRange> out;
  for (int64_t c = 0; c < model.num_chunks(); ++c) out.push_back(model.ChunkLayers(c));
  return out;
}

}  // namespace

ParallelModel::ParallelModel(const ParallelModelOptions& opt, ProcessGroups* groups)
    : opt_(opt),
      groups_(groups),
      shares_(opt.parallel.dp, opt.micro_batches, groups->coord.dp),
      // Each of a sequence's cp ranks takes the mean over its own positions:
      // the gradient sum over dp x cp ranks then needs 1 / cp more.
      loss_scale_(1.0f / static_cast<float>(opt.micro_batches * opt.parallel.dp * opt.parallel.cp)) {}

Result<std::unique_ptr<ParallelModel>> ParallelModel::Create(const ParallelModelOptions& opt,
                                                             ProcessGroups* groups) {
  std::unique_ptr<ParallelModel> m(new ParallelModel(opt, groups));
  ST_RETURN_IF_ERROR(m->Build());
  return m;
}

Status ParallelModel::Build() {
  const ParallelConfig& par = opt_.parallel;
  ProcessGroups& g = *groups_;
  ST_ASSIGN_OR_RETURN(const PipelineSchedule schedule,
                      PipelineScheduleFromConfig(par, opt_.micro_batches));
  ModelShard shard{par.tp, g.coord.tp, par.pp, g.coord.pp, par.vpp, par.sp, par.chunks_in_v()};
  shard.cp = par.cp, shard.cp_rank = g.coord.cp, shard.ulysses = par.cp_impl == "ulysses";
  const std::vector<int64_t> slots = PipelineExecutor::SlotsPerChunk(schedule, g.coord.pp);
  // The flat buffers split evenly over the gradient group (dp x cp ranks).
  ST_ASSIGN_OR_RETURN(model_, GPT::CreateShard(opt_.spec, shard, g.tp.get(), opt_.micro_batch_size,
                                               par.dp * par.cp, slots, opt_.recompute, g.cp.get(),
                                               SplitsBackward(schedule.kind)));
  dp_ = std::make_unique<DataParallel>(model_->layout(), g.dp.get(),
                                       DataParallelOptionsFor(par, opt_.spec, g));
  if (par.zero >= 3) {
    zero3_ = std::make_unique<Zero3Params>(model_->layout(), opt_.spec.n_layer, g.dp.get(),
                                           ChunkRanges(*model_));
  }
  optimizer_ = std::make_unique<AdamW>(&model_->layout(), opt_.adamw, dp_->OwnedRanges());
  pipeline_ = std::make_unique<PipelineExecutor>(model_.get(), g.pp.get(), dp_.get(), schedule,
                                                 opt_.micro_batch_size, opt_.spec.block_size);
  pipeline_->set_extra_forward_s(opt_.extra_forward_s);
  return Status::Ok();
}

float* ParallelModel::whole_params() { return model_->params(); }

void ParallelModel::InitWeights(uint64_t seed) { model_->InitWeights(seed); }

void ParallelModel::LoadOptimizerState(const float* exp_avg, const float* exp_avg_sq,
                                       int64_t steps) {
  dp_->ScatterState(exp_avg, optimizer_->exp_avg());
  dp_->ScatterState(exp_avg_sq, optimizer_->exp_avg_sq());
  optimizer_->set_step_count(steps);
}

void ParallelModel::CommitWeights() {
  if (!zero3_) return;
  zero3_->LoadShard(model_->params());
  model_->SetParamSource(zero3_.get());
}

Result<double> ParallelModel::ForwardBackward(const StepBatchSource& batches) {
  dp_->BeginStep(model_->grads());
  const int64_t first = shares_.first_micro_batch();
  auto micro_batch = [&](int64_t micro, int32_t* tokens, int32_t* targets) {
    batches(first + micro, tokens, targets);
  };
  ST_ASSIGN_OR_RETURN(const double loss_sum,
                      pipeline_->RunMicroBatches(micro_batch, loss_scale_, observer_));
  // What waited for the tied embedding's sum, then the rest in flight.
  const auto t1 = Clock::now();
  ST_RETURN_IF_ERROR(pipeline_->SumTiedEmbeddingGrads());
  const auto t2 = Clock::now();
  ST_RETURN_IF_ERROR(dp_->FinishGradReduction());
  reduced_at_ = Clock::now();

  const PipelineStepTimes& pt = pipeline_->last_times();
  times_ = {};
  times_.data_s = pt.data_s;
  times_.forward_s = pt.forward_s;
  times_.backward_s = pt.backward_s;
  times_.grad_sync_wait_s = pt.grad_sync_wait_s + Seconds(t2, reduced_at_);
  if (opt_.parallel.pp > 1) times_.pipeline_wait_s = pt.wait_s + Seconds(t1, t2);
  if (SplitsBackward(pipeline_->schedule().kind)) times_.weight_grad_s = pt.weight_s;
  if (observer_) {
    observer_->OnGradReductions(*dp_);
    observer_->OnGradWait(t2, reduced_at_);
  }
  return MeanLoss(loss_sum);
}

Result<double> ParallelModel::MeanLoss(double loss_sum) {
  const ParallelConfig& par = opt_.parallel;
  // Rebalanced, a rank's micro-batches are its share of the step's: their
  // sum over the DP average is the step's mean (dp / all micro-batches).
  double loss = par.rebalance ? loss_sum * static_cast<double>(par.dp) /
                                    static_cast<double>(shares_.total())
                              : loss_sum / static_cast<double>(opt_.micro_batches);
  if (par.pp > 1) {
    // Only the stage with the head (the last; the first under zb-v) computed the loss.
    if (groups_->coord.pp != model_->shard_head_stage()) loss = 0.0;
    ST_RETURN_IF_ERROR(groups_->pp->Allreduce(&loss, 1, ReduceOp::kSum));
  }
  // Over dp x cp: a context-parallel rank's loss is its positions' mean.
  if (par.dp * par.cp > 1) return dp_->Average(loss);
  return loss;
}

Result<double> ParallelModel::GradNorm() {
  return dp_->GradNorm(model_->grads(), {groups_->tp.get(), groups_->pp.get()});
}

Status ParallelModel::OptimizerStep(double lr, double grad_scale) {
  float* params = zero3_ ? zero3_->shard() : model_->params();
  optimizer_->Step(params, dp_->optimizer_grads(model_->grads()), lr, grad_scale,
                   dp_->grads_compact(), zero3_ != nullptr);
  ST_RETURN_IF_ERROR(dp_->GatherParams(model_->params()));
  const auto done = Clock::now();
  // From the end of the gradient reduction: the loss and norm sums count here.
  times_.optimizer_s = Seconds(reduced_at_, done);
  if (observer_) observer_->OnOptimizer(reduced_at_, done);
  return Status::Ok();
}

Result<std::optional<double>> ParallelModel::Evaluate(int64_t batches, const EvalBatchSource& source,
                                                      const StopQuery& stop) {
  const int64_t mb = opt_.micro_batch_size, dp = opt_.parallel.dp;
  std::vector<int32_t> tokens(static_cast<size_t>(mb * opt_.spec.block_size)),
      targets(tokens.size());
  double sum = 0.0;
  // ZeRO-3's forward gathers over the DP group: every rank runs as many
  // (a rank past the end repeats the last batch and drops its loss). Every
  // rank goes through every round, so that each asks `stop` as often.
  const bool lockstep = zero3_ != nullptr;
  for (int64_t base = 0; base < batches; base += dp) {
    if (stop) {
      ST_ASSIGN_OR_RETURN(const bool stopping, stop());
      if (stopping) return std::optional<double>();
    }
    const int64_t i = base + groups_->coord.dp;
    if (i >= batches && !lockstep) continue;
    source(std::min(i, batches - 1), tokens.data(), targets.data());
    ST_ASSIGN_OR_RETURN(const double loss, pipeline_->Evaluate(tokens.data(), targets.data()));
    if (i < batches) sum += loss;
  }
  ST_RETURN_IF_ERROR(groups_->dp->Allreduce(&sum, 1, ReduceOp::kSum));
  // Only the last stage computed losses.
  if (opt_.parallel.pp > 1) ST_RETURN_IF_ERROR(groups_->pp->Allreduce(&sum, 1, ReduceOp::kSum));
  // The gradient group holds each batch's cp ranks, each with the mean over
  // its positions.
  return std::optional<double>(sum / static_cast<double>(batches * opt_.parallel.cp));
}

Result<std::optional<std::string>> ParallelModel::AfterTelemetryWindow(
    const std::vector<double>& compute_s) {
  if (!opt_.parallel.rebalance) return std::optional<std::string>();
  // Every rank derives the same new shares from the same gathered figures.
  std::vector<int64_t> replica_of;
  const Mesh& mesh = groups_->mesh;
  for (int64_t r = 0; r < mesh.world_size(); ++r) replica_of.push_back(mesh.Coord(r).dp);
  if (!shares_.Update(compute_s, replica_of)) return std::optional<std::string>();
  ST_ASSIGN_OR_RETURN(const PipelineSchedule schedule,
                      PipelineScheduleFromConfig(opt_.parallel, shares_.mine()));
  ST_RETURN_IF_ERROR(pipeline_->SetSchedule(schedule));
  return std::optional<std::string>(shares_.Line());
}

TrainStateView ParallelModel::state() const {
  TrainStateView s;
  s.params = zero3_ ? zero3_->shard() : model_->params();
  s.params_compact = zero3_ != nullptr;
  s.exp_avg = optimizer_->exp_avg();
  s.exp_avg_sq = optimizer_->exp_avg_sq();
  s.moments_compact = opt_.parallel.zero >= 1;
  s.optimizer_steps = optimizer_->step_count();
  return s;
}

ModelMemoryBytes ParallelModel::memory() const {
  ModelMemoryBytes m;
  m.params = zero3_ ? zero3_->shard_bytes()
                    : model_->flat_numel() * static_cast<int64_t>(sizeof(float));
  m.grads = dp_->persistent_grad_bytes();
  m.optimizer = static_cast<int64_t>(optimizer_->state_bytes());
  m.activations = static_cast<int64_t>(model_->activation_bytes());
  return m;
}

GPT* ParallelModel::whole_model() {
  const ParallelConfig& par = opt_.parallel;
  const bool sharded = par.tp > 1 || par.pp > 1 || par.cp > 1 || zero3_ != nullptr;
  return sharded ? nullptr : model_.get();
}

std::vector<std::string> ParallelModel::LayoutSummary() const {
  const ParallelConfig& par = opt_.parallel;
  if (par.dp * par.cp <= 1) return {};
  std::vector<std::string> lines;
  char buf[512];
  const ModelMemoryBytes m = memory();
  std::snprintf(buf, sizeof buf,
                "data parallel: dp %lld%s, zero %lld, %zu gradient buckets; per rank: params %.2f "
                "MiB, grads %.2f MiB, optimizer %.2f MiB",
                static_cast<long long>(par.dp),
                par.cp > 1 ? (" x cp " + std::to_string(par.cp) + " (gradients reduced over both)").c_str() : "",
                static_cast<long long>(par.zero),
                dp_->buckets().size(), m.params / 1048576.0, m.grads / 1048576.0,
                m.optimizer / 1048576.0);
  lines.emplace_back(buf);
  if (zero3_) {
    std::snprintf(buf, sizeof buf, "ZeRO-3: parameters gathered layer by layer into 2 buffers of %.2f MiB",
                  zero3_->gather_bytes() / 2 / 1048576.0);
    lines.emplace_back(buf);
  }
  const ProcessGroups& g = *groups_;
  if (g.dp_host) {
    std::snprintf(buf, sizeof buf,
                  "gradient all-reduce: hierarchical, %d hosts x %d ranks (reduce-scatter in host, "
                  "all-reduce across, all-gather in host)",
                  g.dp_cross->size(), g.dp_host->size());
    lines.emplace_back(buf);
  }
  if (par.dp_compress != "none") {
    lines.push_back("gradient compression: " + par.dp_compress +
                    (par.dp_compress == "sign" ? " (1 bit + a scale per 256 elements, error feedback)"
                                               : ""));
  }
  return lines;
}

}  // namespace scaletrain
