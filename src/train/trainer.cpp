// The training loop. Set-up (run_setup.h) has built this rank's model
// shard, data parallelism, optimizer and pipeline executor; a step is
//   1. forward and backward of the step's micro-batches (the executor; data
//      parallelism reduces gradient buckets while backward runs),
//   2. gradient reduction: the tied embedding's copies summed, the last
//      reductions finished,
//   3. the global gradient norm, for clipping,
//   4. the optimizer step (and ZeRO's parameter all-gather),
// and after it the hooks: a metrics record, validation, a checkpoint (its
// writing goes on in the background). Between steps the ranks agree whether
// a signal asked them to stop (preemption: a checkpoint, then exit 75) and
// whether the checkpoint in flight is written everywhere.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "parallel/schedule.h"
#include "telemetry/metrics.h"
#include "train/checkpointing.h"
#include "train/rank_telemetry.h"
#include "train/rebalance.h"
#include "train/run_setup.h"
#include "train/step_trace.h"
#include "train/stop_signals.h"

namespace scaletrain {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class Trainer {
 public:
  Trainer(TrainingRun& run, const TrainOptions& opts)
      : run_(run),
        tc_(run.cfg.training),
        quiet_(opts.quiet || !run.lead()),
        checkpoints_(&run),
        ranks_(&run),
        loss_scale_(1.0f / static_cast<float>(run.micro_batches * run.cfg.parallel.dp)),
        shares_(run.cfg.parallel.dp, run.micro_batches, run.groups->coord.dp),
        first_sequence_(run.groups->coord.dp * (tc_.global_batch_size / run.cfg.parallel.dp)),
        clock_(run.start_step, run.cfg.training.steps) {
    if (!opts.trace.empty()) {
      trace_ = std::make_unique<StepTrace>(opts.trace, run.rank(), run.groups->world->size(),
                                           run.spec.n_layer, run.cfg.parallel.zero);
    }
  }

  Result<TrainSummary> Run() {
    if (!quiet_) PrintRunSummary(run_);
    summary_.rank = static_cast<int>(run_.rank());
    for (int64_t step = run_.start_step; step < tc_.steps; ++step) {
      Result<StepRecord> record = Step(step);
      run_.AbortIfFailed(record.status());  // a failed collective ends the job
      const Status written = AfterStep(*record);  // only the lead's metrics file can fail here
      ST_ASSIGN_OR_RETURN(const bool stop, AtStepBoundary(*record, written));
      if (stop) break;
    }
    return Finish();
  }

 private:
  // One optimizer step on batch `step` (0-based).
  Result<StepRecord> Step(int64_t step) {
    StepRecord rec;
    rec.step = step + 1;
    run_.groups->SetStep(rec.step);  // the watchdog names it
    run_.groups->ClearStats();  // the step's traffic counts from here
    if (trace_) trace_->BeginStep(rec.step);
    const auto t0 = Clock::now();

    // 1. Forward and backward of this rank's micro-batches of batch `step`.
    run_.dp->BeginStep(run_.model->grads());
    auto micro_batch = [&](int64_t micro, int32_t* tokens, int32_t* targets) {
      const int64_t mb = tc_.micro_batch_size;
      run_.train_batches->TrainSequences(step, first_sequence_ + micro * mb, mb, tokens, targets);
    };
    ST_ASSIGN_OR_RETURN(const double loss_sum,
                        run_.pipeline->RunMicroBatches(micro_batch, loss_scale_, trace_.get()));

    // 2. Gradient reduction: what waited for the tied embedding's sum, then the rest in flight.
    const auto t1 = Clock::now();
    ST_RETURN_IF_ERROR(run_.pipeline->SumTiedEmbeddingGrads());
    const auto t2 = Clock::now();
    ST_RETURN_IF_ERROR(run_.dp->FinishGradReduction());
    const auto t3 = Clock::now();
    ST_ASSIGN_OR_RETURN(rec.loss, MeanLoss(loss_sum));

    // 3. The global gradient norm (over every rank's unique gradients), for clipping.
    ST_ASSIGN_OR_RETURN(
        rec.grad_norm,
        run_.dp->GradNorm(run_.model->grads(), {run_.groups->tp.get(), run_.groups->pp.get()}));

    // 4. The optimizer step on this rank's part; ZeRO all-gathers the parameters after it.
    rec.lr = run_.lr_schedule.At(step);
    run_.optimizer->Step(run_.opt_params(), run_.dp->optimizer_grads(run_.model->grads()), rec.lr,
                         ClipScale(rec.grad_norm, tc_.grad_clip), run_.dp->grads_compact(),
                         run_.zero3 != nullptr);
    ST_RETURN_IF_ERROR(run_.dp->GatherParams(run_.model->params()));
    const auto t4 = Clock::now();

    const PipelineStepTimes& pt = run_.pipeline->last_times();
    rec.step_time_s = Seconds(t0, t4);
    rec.tokens_per_s =
        static_cast<double>(tc_.global_batch_size * run_.spec.block_size) / rec.step_time_s;
    rec.data_s = pt.data_s;
    rec.forward_s = pt.forward_s;
    rec.backward_s = pt.backward_s;
    rec.grad_sync_wait_s = pt.grad_sync_wait_s + Seconds(t2, t3);
    rec.optimizer_s = Seconds(t3, t4);
    if (run_.cfg.parallel.pp > 1) rec.pipeline_wait_s = pt.wait_s + Seconds(t1, t2);
    if (trace_) {
      trace_->RecordGradReductions(*run_.dp);
      trace_->RecordGradWait(t2, t3);
      trace_->RecordOptimizer(t3, t4);
    }
    return rec;
  }

  // The step's loss: the mean over its micro-batches (computed on the last
  // pipeline stage) and the DP ranks.
  Result<double> MeanLoss(double loss_sum) {
    const ParallelConfig& par = run_.cfg.parallel;
    // Rebalanced, a rank's micro-batches are its share of the step's: their
    // sum over the DP average is the step's mean (dp / all micro-batches).
    double loss = par.rebalance ? loss_sum * static_cast<double>(par.dp) / static_cast<double>(shares_.total())
                                : loss_sum / static_cast<double>(run_.micro_batches);
    if (par.pp > 1) {
      if (run_.groups->coord.pp != par.pp - 1) loss = 0.0;
      ST_RETURN_IF_ERROR(run_.groups->pp->Allreduce(&loss, 1, ReduceOp::kSum));
    }
    if (par.dp > 1) return run_.dp->Average(loss);
    return loss;
  }

  // After step `rec.step`: its metrics record, validation and checkpoint when
  // due. Returns the metrics file's status (a lead-only failure, e.g. a full
  // disk, which AtStepBoundary makes every rank's); the other errors here
  // happen on every rank alike and are returned at once.
  Status AfterStep(StepRecord& rec) {
    const int64_t done = rec.step;
    TakeStepTraffic(run_, rec);
    clock_.Add(rec.step, rec.step_time_s);
    if (!std::isfinite(rec.loss)) {
      if (run_.metrics) (void)run_.metrics->Append(rec);
      return Internal(
          "loss became " + std::to_string(rec.loss) + " at step " + std::to_string(done) +
          "; lower training.lr or set training.grad_clip (the last checkpoint is intact)");
    }
    ranks_.AddStep(rec, std::exchange(checkpoint_s_, 0.0), std::exchange(boundary_wait_s_, 0.0));
    ST_ASSIGN_OR_RETURN(rec.stragglers, ranks_.EndOfWindow(done));
    for (const Straggler& s : rec.stragglers) std::printf("%s\n", StragglerLine(s).c_str());
    if (run_.cfg.parallel.rebalance && ranks_.last_window_step() == done) ST_RETURN_IF_ERROR(Rebalance());
    if (run_.metrics_server) run_.metrics_server->Update(ranks_.Snapshot(rec));
    if (!quiet_) std::printf("%s\n", StepLine(rec, tc_.steps, clock_.EtaSeconds(done)).c_str());
    const bool last = done == tc_.steps;
    if ((tc_.eval_interval > 0 && done % tc_.eval_interval == 0) || last) {
      rec.val_loss = summary_.final_val_loss = Evaluate();
      if (!quiet_) std::printf("%s\n", ValidationLine(rec).c_str());
    }
    const Status written = run_.metrics ? run_.metrics->Append(rec) : Status::Ok();
    if (!quiet_) std::fflush(stdout);
    if ((run_.cfg.checkpoint.interval > 0 && done % run_.cfg.checkpoint.interval == 0) || last) {
      ST_RETURN_IF_ERROR(StartCheckpoint(done, rec.lr));
    }
    summary_.final_loss = rec.loss;
    summary_.steps_run++;
    return written;
  }

  // parallel.rebalance, after a window of per-rank records: every rank
  // derives the same new shares from the same gathered figures and runs its
  // share from the next step.
  Status Rebalance() {
    std::vector<int64_t> replica_of;
    for (int64_t r = 0; r < run_.groups->mesh.world_size(); ++r) replica_of.push_back(run_.groups->mesh.Coord(r).dp);
    if (!shares_.Update(ranks_.window_compute(), replica_of)) return Status::Ok();
    first_sequence_ = shares_.first_micro_batch() * tc_.micro_batch_size;
    ST_ASSIGN_OR_RETURN(const PipelineSchedule schedule, PipelineScheduleFromConfig(run_.cfg.parallel, shares_.mine()));
    ST_RETURN_IF_ERROR(run_.pipeline->SetSchedule(schedule));
    run_.micro_batches = shares_.mine();
    if (run_.lead()) std::printf("%s\n", shares_.Line().c_str());  // also with --quiet, as the straggler lines
    return Status::Ok();
  }

  // A checkpoint of step `done`, written in the background (checkpointing.h).
  Status StartCheckpoint(int64_t done, double lr) {
    const auto t0 = Clock::now();
    ST_ASSIGN_OR_RETURN(std::optional<std::string> finished, checkpoints_.Start(done, lr));
    checkpoint_s_ += Seconds(t0, Clock::now());
    if (finished) CheckpointFinished(*finished);
    last_checkpoint_step_ = done;
    return Status::Ok();
  }
  Status FinishCheckpoint() {
    const auto t0 = Clock::now();
    ST_ASSIGN_OR_RETURN(const std::string dir, checkpoints_.Finish());
    checkpoint_s_ += Seconds(t0, Clock::now());
    CheckpointFinished(dir);
    return Status::Ok();
  }
  void CheckpointFinished(const std::string& dir) {
    summary_.last_checkpoint = dir;
    if (!quiet_) std::printf("checkpoint: %s\n", dir.c_str());
  }

  // Between steps, every rank learns in one small all-reduce whether any
  // failed after the step (`after`), whether any was asked to stop
  // (stop_signals.h) and whether every rank has written its part of the
  // checkpoint in flight; it finishes that checkpoint, and on a stop writes
  // one of this step and returns true.
  Result<bool> AtStepBoundary(const StepRecord& rec, const Status& after) {
    int64_t flags[3] = {StopSignals::Requested() ? 1 : 0, checkpoints_.LocalWriteDone() ? 1 : 0,
                        after.ok() ? 0 : 1};
    const auto t0 = Clock::now();  // waiting here is waiting for the slowest rank
    run_.AbortIfFailed(run_.groups->world->Allreduce(flags, 3, ReduceOp::kSum));
    boundary_wait_s_ += Seconds(t0, Clock::now());
    if (!after.ok()) return after;
    if (flags[2] > 0) {
      return FailedPrecondition("another rank failed after step " + std::to_string(rec.step) +
                                " (see its message)");
    }
    if (checkpoints_.in_flight() && flags[1] == run_.groups->world->size())
      ST_RETURN_IF_ERROR(FinishCheckpoint());
    if (flags[0] == 0) return false;
    if (last_checkpoint_step_ != rec.step) ST_RETURN_IF_ERROR(StartCheckpoint(rec.step, rec.lr));
    ST_RETURN_IF_ERROR(FinishCheckpoint());
    summary_.preempted = true;
    summary_.stop_signal = StopSignals::Signal();
    return true;
  }

  // Validation loss: the micro-batches are dealt out over the DP ranks, each
  // goes through every pipeline stage, and the losses are averaged.
  double Evaluate() {
    const int64_t mb = tc_.micro_batch_size, dp = run_.cfg.parallel.dp;
    std::vector<int32_t> tokens(static_cast<size_t>(mb * run_.spec.block_size)),
        targets(tokens.size());
    double sum = 0.0;
    // ZeRO-3's forward gathers over the DP group: every rank runs as many
    // (a rank past the end repeats the last batch and drops its loss).
    const bool lockstep = run_.zero3 != nullptr;
    for (int64_t base = 0; base < tc_.eval_steps; base += dp) {
      const int64_t i = base + run_.groups->coord.dp;
      if (i >= tc_.eval_steps && !lockstep) break;
      run_.val_batches->EvalSequences(std::min(i, tc_.eval_steps - 1) * mb, mb, tokens.data(),
                                      targets.data());
      Result<double> loss = run_.pipeline->Evaluate(tokens.data(), targets.data());
      run_.AbortIfFailed(loss.status());
      if (i < tc_.eval_steps) sum += *loss;
    }
    run_.AbortIfFailed(run_.groups->dp->Allreduce(&sum, 1, ReduceOp::kSum));
    if (run_.cfg.parallel.pp > 1)
      run_.AbortIfFailed(run_.groups->pp->Allreduce(&sum, 1, ReduceOp::kSum));
    return sum / static_cast<double>(tc_.eval_steps);
  }

  // After the last step: the checkpoint in flight, the trace, the
  // throughput, a text sample.
  Result<TrainSummary> Finish() {
    if (checkpoints_.in_flight()) ST_RETURN_IF_ERROR(FinishCheckpoint());
    if (trace_) {
      ST_RETURN_IF_ERROR(trace_->Write());
      if (!quiet_)
        std::printf("trace: %s (open in https://ui.perfetto.dev)\n", trace_->path().c_str());
    }
    const double tokens_per_step =
        static_cast<double>(tc_.global_batch_size * run_.spec.block_size);
    summary_.tokens_per_s = clock_.timed() ? tokens_per_step / clock_.MeanSeconds() : 0.0;
    if (!quiet_) std::printf("%s\n", ranks_.Summary(summary_.tokens_per_s).c_str());
    if (!quiet_ && tc_.sample_tokens > 0 && !summary_.preempted) {
      ST_RETURN_IF_ERROR(PrintSample(run_, tc_.sample_tokens, summary_.last_checkpoint));
    }
    return summary_;
  }

  TrainingRun& run_;
  const TrainingConfig& tc_;
  const bool quiet_;
  CheckpointWriter checkpoints_;
  RankTelemetry ranks_;
  // Time on checkpoints and at the step boundary since the last step's
  // record: they count toward the next one's.
  double checkpoint_s_ = 0, boundary_wait_s_ = 0;
  const float loss_scale_;  // 1 / (micro-batches x dp): the DP reduction's sum is then the mean
  MicroBatchShares shares_;       // micro-batches per DP replica (rebalancing moves them)
  int64_t first_sequence_;        // this DP rank's first sequence of each batch
  std::unique_ptr<StepTrace> trace_;
  TrainSummary summary_;
  int64_t last_checkpoint_step_ = -1;
  StepClock clock_;
};

}  // namespace

Result<TrainSummary> RunTraining(const TrainOptions& opts) {
  ST_ASSIGN_OR_RETURN(std::unique_ptr<TrainingRun> run, SetUpTraining(opts));
  if (run->finished()) {
    TrainSummary done;
    done.rank = static_cast<int>(run->rank());
    done.already_finished = true;
    done.last_checkpoint = run->resumed_from;
    return done;
  }
  Trainer trainer(*run, opts);
  return trainer.Run();
}

}  // namespace scaletrain
