// The training loop. Set-up (run_setup.h) has built this rank's parallel
// model (parallel/parallel_model.h: the model shard with its layout
// applied), the data and the run directory; a step is, at every layout,
//   1. forward and backward of the step's micro-batches, the gradients
//      reduced over the ranks that share them,
//   2. the global gradient norm, for clipping,
//   3. the optimizer step,
// and after it the hooks: a metrics record, per-rank telemetry (after whose
// windows the layout may move work between ranks), validation, a checkpoint
// (its writing goes on in the background). Between steps the ranks agree
// whether a signal asked them to stop (preemption: a checkpoint, then exit
// 75) and whether the checkpoint in flight is written everywhere.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "telemetry/metrics.h"
#include "train/checkpointing.h"
#include "train/rank_telemetry.h"
#include "train/run_setup.h"
#include "train/step_trace.h"
#include "train/stop_signals.h"

namespace scaletrain {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// What checkpoints and per-rank telemetry read of the run.
CheckpointContext CheckpointContextOf(const TrainingRun& run) {
  const std::optional<Vocabulary>& vocab = run.data.vocab;
  return {run.groups->world.get(), run.dir.path, &run.cfg, run.spec,
          vocab ? &*vocab : nullptr, run.model.get(), run.groups->coord};
}
RankTelemetryContext RankTelemetryContextOf(TrainingRun& run) {
  const MemoryRecord m = RankMemory(*run.model);
  return {run.groups->world.get(),
          &run.groups->mesh,
          run.cfg.telemetry,
          run.spec,
          run.hosts,
          m.params_bytes + m.grads_bytes + m.optimizer_bytes + m.activations_bytes,
          run.dir.rank_log ? &*run.dir.rank_log : nullptr};
}

class Trainer {
 public:
  Trainer(TrainingRun& run, const TrainOptions& opts)
      : run_(run),
        tc_(run.cfg.training),
        world_(*run.groups->world),
        quiet_(opts.quiet || !run.lead()),
        lr_schedule_{tc_.lr, tc_.min_lr, tc_.warmup_steps, tc_.steps},
        checkpoints_(CheckpointContextOf(run)),
        ranks_(RankTelemetryContextOf(run)),
        clock_(run.start.step, tc_.steps) {
    if (!opts.trace.empty()) {
      trace_ = std::make_unique<StepTrace>(opts.trace, world_.rank(), world_.size(),
                                           run.spec.n_layer, run.cfg.parallel.zero);
      run.model->set_observer(trace_.get());
    }
  }

  Result<TrainSummary> Run() {
    if (!quiet_) PrintRunSummary(run_);
    summary_.rank = static_cast<int>(world_.rank());
    for (int64_t step = run_.start.step; step < tc_.steps; ++step) {
      Result<StepRecord> record = Step(step);
      AbortIfFailed(world_, record.status());  // a failed collective ends the job
      const Status written = AfterStep(*record);  // only the lead's metrics file can fail here
      ST_ASSIGN_OR_RETURN(const bool stop, AtStepBoundary(*record, written));
      if (stop) break;
    }
    return Finish();
  }

 private:
  // One optimizer step on batch `step` (0-based).
  Result<StepRecord> Step(int64_t step) {
    ParallelModel& model = *run_.model;
    StepRecord rec;
    rec.step = step + 1;
    run_.groups->SetStep(rec.step);  // the watchdog names it
    run_.groups->ClearStats();  // the step's traffic counts from here
    if (trace_) trace_->BeginStep(rec.step);
    const auto t0 = Clock::now();

    // 1. Forward and backward of the step's micro-batches, the gradients reduced.
    const int64_t mb = tc_.micro_batch_size;
    auto micro_batch = [&](int64_t index, int32_t* tokens, int32_t* targets) {
      run_.data.train_batches->TrainSequences(step, index * mb, mb, tokens, targets);
    };
    ST_ASSIGN_OR_RETURN(rec.loss, model.ForwardBackward(micro_batch));
    // 2. The global gradient norm, for clipping.
    ST_ASSIGN_OR_RETURN(rec.grad_norm, model.GradNorm());
    // 3. The optimizer step.
    rec.lr = lr_schedule_.At(step);
    ST_RETURN_IF_ERROR(model.OptimizerStep(rec.lr, ClipScale(rec.grad_norm, tc_.grad_clip)));

    rec.step_time_s = Seconds(t0, Clock::now());
    rec.tokens_per_s =
        static_cast<double>(tc_.global_batch_size * run_.spec.block_size) / rec.step_time_s;
    const StepPhaseTimes& t = model.last_times();
    rec.data_s = t.data_s;
    rec.forward_s = t.forward_s;
    rec.backward_s = t.backward_s;
    rec.grad_sync_wait_s = t.grad_sync_wait_s;
    rec.optimizer_s = t.optimizer_s;
    rec.pipeline_wait_s = t.pipeline_wait_s;
    rec.weight_grad_s = t.weight_grad_s;
    return rec;
  }

  // After step `rec.step`: its metrics record, validation and checkpoint when
  // due. Returns the metrics file's status (a lead-only failure, e.g. a full
  // disk, which AtStepBoundary makes every rank's); the other errors here
  // happen on every rank alike and are returned at once.
  Status AfterStep(StepRecord& rec) {
    const int64_t done = rec.step;
    ST_RETURN_IF_ERROR(ObserveStep(rec));
    if (Due(tc_.eval_interval, done)) {
      rec.val_loss = Evaluate();
      if (rec.val_loss) summary_.final_val_loss = *rec.val_loss;
      if (rec.val_loss && !quiet_) std::printf("%s\n", ValidationLine(rec).c_str());
    }
    const Status written = AppendRecord(rec);
    if (!quiet_) std::fflush(stdout);
    if (Due(run_.cfg.checkpoint.interval, done)) ST_RETURN_IF_ERROR(StartCheckpoint(done, rec.lr));
    summary_.final_loss = rec.loss;
    summary_.steps_run++;
    return written;
  }

  // The step's record into metrics.jsonl and TensorBoard's events (lead).
  Status AppendRecord(const StepRecord& rec) {
    if (run_.dir.metrics) ST_RETURN_IF_ERROR(run_.dir.metrics->Append(rec));
    if (!run_.dir.tensorboard) return Status::Ok();
    std::vector<std::pair<std::string, double>> scalars = StepScalars(rec);
    for (const auto& s : ranks_.ThroughputScalars(rec.tokens_per_s)) scalars.push_back(s);
    return run_.dir.tensorboard->AddScalars(rec.step, scalars);
  }

  // Every `interval` steps (0: never) and after the last.
  bool Due(int64_t interval, int64_t done) const {
    return (interval > 0 && done % interval == 0) || done == tc_.steps;
  }

  // The step's traffic and time split into `rec`, per-rank telemetry (and
  // what the layout does after a window), the console line. A loss that is
  // no longer finite ends the run here.
  Status ObserveStep(StepRecord& rec) {
    const int64_t done = rec.step;
    TakeStepTraffic(*run_.groups, rec);
    clock_.Add(rec.step, rec.step_time_s);
    if (!std::isfinite(rec.loss)) {
      (void)AppendRecord(rec);
      return Internal(
          "loss became " + std::to_string(rec.loss) + " at step " + std::to_string(done) +
          "; lower training.lr or set training.grad_clip (the last checkpoint is intact)");
    }
    ranks_.AddStep(rec, std::exchange(checkpoint_s_, 0.0), std::exchange(boundary_wait_s_, 0.0));
    ST_ASSIGN_OR_RETURN(rec.stragglers, ranks_.EndOfWindow(done));
    for (const Straggler& s : rec.stragglers) std::printf("%s\n", StragglerLine(s).c_str());
    if (ranks_.last_window_step() == done) ST_RETURN_IF_ERROR(AfterTelemetryWindow());
    if (run_.dir.metrics_server) run_.dir.metrics_server->Update(ranks_.Snapshot(rec));
    if (!quiet_) std::printf("%s\n", StepLine(rec, tc_.steps, clock_.EtaSeconds(done)).c_str());
    return Status::Ok();
  }

  // After a window of per-rank records: the layout may move work between
  // ranks (parallel.rebalance); it says so on the console.
  Status AfterTelemetryWindow() {
    ST_ASSIGN_OR_RETURN(const std::optional<std::string> moved,
                        run_.model->AfterTelemetryWindow(ranks_.window_compute()));
    if (moved && run_.lead()) std::printf("%s\n", moved->c_str());  // also with --quiet, as the straggler lines
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
    AbortIfFailed(world_, world_.Allreduce(flags, 3, ReduceOp::kSum));
    boundary_wait_s_ += Seconds(t0, Clock::now());
    if (!after.ok()) return after;
    if (flags[2] > 0) {
      return FailedPrecondition("another rank failed after step " + std::to_string(rec.step) +
                                " (see its message)");
    }
    if (checkpoints_.in_flight() && flags[1] == world_.size())
      ST_RETURN_IF_ERROR(FinishCheckpoint());
    if (flags[0] == 0) return false;
    if (last_checkpoint_step_ != rec.step) ST_RETURN_IF_ERROR(StartCheckpoint(rec.step, rec.lr));
    ST_RETURN_IF_ERROR(FinishCheckpoint());
    summary_.preempted = true;
    summary_.stop_signal = StopSignals::Signal();
    return true;
  }

  // The validation loss over training.eval_steps batches; none when a stop
  // was requested meanwhile (the ranks agree on it before every round of
  // batches, and the step boundary then stops the run).
  std::optional<double> Evaluate() {
    const int64_t mb = tc_.micro_batch_size;
    auto batch = [&](int64_t index, int32_t* tokens, int32_t* targets) {
      run_.data.val_batches->EvalSequences(index * mb, mb, tokens, targets);
    };
    auto stop = [this]() -> Result<bool> {
      int64_t asked = StopSignals::Requested() ? 1 : 0;
      ST_RETURN_IF_ERROR(world_.Allreduce(&asked, 1, ReduceOp::kSum));
      return asked > 0;
    };
    Result<std::optional<double>> loss = run_.model->Evaluate(tc_.eval_steps, batch, stop);
    AbortIfFailed(world_, loss.status());
    return *loss;
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
      ST_RETURN_IF_ERROR(PrintSample(*run_.model, run_.data.vocab, static_cast<uint64_t>(tc_.seed),
                                     tc_.sample_tokens, summary_.last_checkpoint));
    }
    return summary_;
  }

  TrainingRun& run_;
  const TrainingConfig& tc_;
  Communicator& world_;
  const bool quiet_;
  const LrSchedule lr_schedule_;
  CheckpointWriter checkpoints_;
  RankTelemetry ranks_;
  // Time on checkpoints and at the step boundary since the last step's
  // record: they count toward the next one's.
  double checkpoint_s_ = 0, boundary_wait_s_ = 0;
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
    done.rank = static_cast<int>(run->groups->rank);
    done.already_finished = true;
    done.last_checkpoint = run->start.checkpoint;
    return done;
  }
  Trainer trainer(*run, opts);
  return trainer.Run();
}

}  // namespace scaletrain
