// `scaletrain report RUN_DIR`: the run as one self-contained HTML page with SVG
// plots (RUN_DIR/report/index.html), measured against the planner when given
// a cluster (and a `scaletrain bench` profile), and where the job stuck when
// ranks left flight records.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/plan_training.h"
#include "cli/train_config_model.h"
#include "core/file_io.h"
#include "core/strings.h"
#include "model/spec.h"
#include "report/compare.h"
#include "report/flight.h"
#include "report/page.h"
#include "report/run_data.h"

namespace fs = std::filesystem;

namespace scaletrain::cli {

namespace {

struct ReportOptions {
  std::string run_dir, output, cluster;
  std::vector<std::string> compare;  // run directories of one model on growing rank counts
  std::vector<std::string> hardware_files;
  std::optional<int64_t> vocab;
};

report::Prediction FromPlanner(const plan::Prediction& p, const std::string& source) {
  const plan::TimeBreakdown& t = p.time_s;
  report::Prediction r;
  r.source = source;
  r.step_time_s = p.step_time_s;
  // The planner's ranks are all alike: none waits for a slower one.
  const double parts[report::kBreakdownParts] = {
      t.compute + t.recompute, t.tp_comm, t.pp_comm + t.bubble, t.dp_comm, 0.0, t.optimizer, 0.0};
  for (int k = 0; k < report::kBreakdownParts; ++k)
    r.parts.emplace_back(report::kBreakdownNames[k], parts[k]);
  return r;
}

// A prediction on other hardware than the run's compares different
// machines: said on the console and on the page, not hidden in the errors.
std::string HardwareMismatch(const report::RunData& run, const plan::ClusterSpec& c) {
  const bool run_on_cpu = run.config.training.device == "cpu";
  if (run_on_cpu == IsBenchProfile(c)) return "";
  const int64_t t = run.config.training.threads;
  const std::string threads = t > 0 ? " --threads " + std::to_string(t) : "";
  const std::string what = IsBenchProfile(c)
                               ? "a profile `scaletrain bench` measured on CPU ranks"
                               : Fmt("a GPU cluster (%s, %lld per node)", c.gpu.name.c_str(),
                                     static_cast<long long>(c.node.gpus_per_node));
  return "the run trained on " + std::string(run_on_cpu ? "CPU ranks" : "GPUs") +
         " (training.device = " + run.config.training.device + ") and --cluster " + c.name +
         " is " + what +
         ": the prediction is for that hardware, not a model of this run, so the errors compare "
         "different machines; "
         "to check the planner against this run, measure its machine as it trained: `mpirun -np " +
         std::to_string(run.world_size()) + " scaletrain bench --output hw.toml --name here" +
         threads + " --config " + (fs::path(run.dir) / "config.resolved.toml").string() +
         "`, then pass --hardware hw.toml --cluster here";
}

// The prediction the page compares with, when --cluster asks for one. A
// cluster the planner cannot model is an error naming what to pass, not a
// note inside the page.
Status AddPrediction(const ReportOptions& o, const report::RunData& run,
                     const std::string& config_path, report::PageOptions* page) {
  if (o.cluster.empty()) {
    page->prediction_note =
        "No prediction: pass --cluster NAME (and --hardware PROFILE, e.g. from `scaletrain bench` on the "
        "machine that trained) to compare the measured step with the planner's.";
    return Status::Ok();
  }
  auto p = PredictTrainingConfig(config_path, o.cluster, o.hardware_files, o.vocab);
  if (!p.ok()) {
    const std::string hint =
        o.hardware_files.empty()
            ? "; a cluster measured by `scaletrain bench --output FILE` is defined in FILE: pass "
              "--hardware FILE"
            : "; the --hardware files define the clusters named in their [cluster.NAME] tables";
    return InvalidArgument("--cluster " + o.cluster +
                           ": the planner cannot predict this run: " + p.status().message() + hint);
  }
  std::string source = "cluster " + o.cluster;
  for (const std::string& f : o.hardware_files) source += ", hardware " + f;
  page->prediction = FromPlanner(p->prediction, source);
  page->prediction_warning = HardwareMismatch(run, p->cluster);
  if (!page->prediction_warning.empty())
    std::fprintf(stderr, "warning: %s\n", page->prediction_warning.c_str());
  return Status::Ok();
}

Status RunReport(const ReportOptions& o) {
  ST_ASSIGN_OR_RETURN(const report::RunData run, report::ReadRunDir(o.run_dir));
  report::PageOptions page;
  const std::string config_path = (fs::path(o.run_dir) / "config.resolved.toml").string();
  // MFU needs the model's FLOPs: without them the page leaves MFU out.
  auto spec = TrainConfigModel(run.config, config_path, o.vocab, run.config.parallel.tp);
  if (spec.ok())
    page.flops_per_token = ModelFlopsPerSequence(*spec) / static_cast<double>(spec->block_size);
  ST_RETURN_IF_ERROR(AddPrediction(o, run, config_path, &page));
  const std::string html = report::ReportHtml(run, page);
  const std::string out = o.output.empty() ? (fs::path(o.run_dir) / "report" / "index.html").string() : o.output;
  const fs::path parent = fs::path(out).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) return IoError("cannot create " + parent.string() + ": " + ec.message());
  ST_RETURN_IF_ERROR(WriteFileAtomically(out, html));
  std::printf("report: %s (%d plots; %zu steps%s)\n", out.c_str(), report::CountSvgs(html), run.steps.size(),
              run.finished() ? "" : ", run not finished");
  const report::MeasuredStep m = report::MeasureStep(run);
  if (m.slow) std::printf("slow rank: %s\n", report::SlowRankWords(*m.slow).c_str());
  if (page.prediction) {
    std::printf("step time: measured %.1f ms (%s), predicted %.1f ms (%+.1f%%)\n",
                m.step_time_s * 1e3, m.whose.c_str(), page.prediction->step_time_s * 1e3,
                m.step_time_s > 0
                    ? (page.prediction->step_time_s - m.step_time_s) / m.step_time_s * 100
                    : 0.0);
  }
  const report::HangDiagnosis d = report::DiagnoseHang(run.flight);
  if (!d.summary.empty()) std::printf("flight records: %s\n", d.summary.c_str());
  return Status::Ok();
}

// --compare: the runs' scaling curve, each run predicted on --cluster when given.
Status RunCompare(const ReportOptions& o) {
  if (o.compare.size() < 2) {
    return InvalidArgument("--compare draws a scaling curve: give it two or more run directories (got " +
                           std::to_string(o.compare.size()) + ")");
  }
  std::vector<report::ScalingRun> runs;
  std::string note = "No prediction: pass --cluster NAME (and --hardware PROFILE) to draw the planner's curve.";
  for (const std::string& dir : o.compare) {
    ST_ASSIGN_OR_RETURN(const report::RunData run, report::ReadRunDir(dir));
    report::ScalingRun r = report::ScalingRunOf(run);
    if (r.tokens_per_s <= 0) return FailedPrecondition("run '" + dir + "' has no timed step yet; train it first");
    if (!o.cluster.empty()) {
      auto p = PredictTrainingConfig((fs::path(dir) / "config.resolved.toml").string(), o.cluster,
                                     o.hardware_files, o.vocab);
      if (!p.ok()) {
        return FailedPrecondition("the planner cannot model run '" + dir + "' on cluster '" + o.cluster +
                                  "': " + p.status().message() + "; pass the profile that defines it with --hardware");
      }
      const TrainingConfig& tc = run.config.training;
      r.predicted_tokens_per_s =
          static_cast<double>(tc.global_batch_size * run.config.model.block_size) / p->prediction.step_time_s;
      note = "Predicted on cluster " + o.cluster + ".";
    }
    runs.push_back(std::move(r));
  }
  const std::string out = o.output.empty() ? "scaling-report.html" : o.output;
  ST_RETURN_IF_ERROR(WriteFileAtomically(out, report::CompareHtml(runs, note)));
  std::printf("scaling report: %s (%zu runs)\n", out.c_str(), runs.size());
  const std::vector<double> eff = report::ScalingEfficiency(runs, false), pred = report::ScalingEfficiency(runs, true);
  for (size_t i = 0; i < runs.size(); ++i) {
    std::printf("  %-40s %3lld ranks  %10.0f tokens/s  efficiency %.2f", runs[i].dir.c_str(),
                static_cast<long long>(runs[i].ranks), runs[i].tokens_per_s, eff[i]);
    if (runs[i].predicted_tokens_per_s) std::printf(" (predicted %.2f)", pred[i]);
    std::printf("\n");
  }
  return Status::Ok();
}

}  // namespace

void RegisterReportCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ReportOptions>();
  auto* cmd = app.add_subcommand(
      "report", "write RUN_DIR/report/index.html: plots of a training run (finished or in progress), "
                "measured against the planner, and where a hung job stuck");
  cmd->add_option("run_dir", o->run_dir, "the run directory of `scaletrain train`");
  cmd->add_option("--compare", o->compare,
                  "instead of one run: two or more run directories of one model on growing rank counts, drawn "
                  "as a scaling curve (tokens/s per rank against the smallest run), measured and predicted "
                  "(with --cluster); writes --output (default scaling-report.html)")
      ->expected(1, -1);
  cmd->add_option("--output", o->output, "the HTML file to write (default RUN_DIR/report/index.html)");
  cmd->add_option("--cluster", o->cluster,
                  "predict the run on this cluster (a preset, or the name in a --hardware profile)");
  cmd->add_option("--hardware", o->hardware_files,
                  "a hardware TOML added to the catalog, e.g. a profile from `scaletrain bench` (repeatable)");
  cmd->add_option("--vocab", o->vocab, "vocabulary size when the run's vocab.json cannot be found");
  cmd->callback([o, exit_code] {
    Status st = !o->compare.empty() ? RunCompare(*o)
                : o->run_dir.empty() ? InvalidArgument("report needs a run directory (scaletrain report RUN_DIR), or "
                                                       "--compare RUN_DIR RUN_DIR... for a scaling curve")
                                     : RunReport(*o);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace scaletrain::cli
