// scaletrain._core: the C++ entry points of the Python package
// (python/scaletrain/__init__.py wraps them). Errors are Status values up to
// here and ValueError from here on, carrying the command's own message.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "cli/plan_command.h"
#include "core/jsonl.h"
#include "core/strings.h"
#include "core/version.h"
#include "plan/hardware.h"

namespace nb = nanobind;

namespace {

template <typename T>
T ValueOrRaise(scaletrain::Result<T> r) {
  if (!r.ok()) throw nb::value_error(r.status().message().c_str());
  return std::move(r).value();
}

// The records of a run's metrics.jsonl or ranks.jsonl as the trainer (on
// resume) and `scaletrain report` read them: a line cut short is skipped.
std::vector<std::string> StepRecordLines(const std::string& path) {
  std::vector<std::string> lines;
  scaletrain::ForEachStepRecord(
      path, [&lines](const std::string& line, const nlohmann::json&) { lines.push_back(line); });
  return lines;
}

nb::dict Catalogs(const std::string& config_dir) {
  scaletrain::cli::PlanCatalogNames names =
      ValueOrRaise(scaletrain::cli::ListPlanCatalogs(config_dir));
  nb::dict d;
  d["models"] = names.models;
  d["clusters"] = names.clusters;
  d["gpus"] = names.gpus;
  d["stacks"] = names.stacks;
  return d;
}

}  // namespace

NB_MODULE(_core, m) {
  m.attr("__version__") = SCALETRAIN_RELEASE;
  m.def(
      "run_plan",
      [](const std::vector<std::string>& args) {
        return ValueOrRaise(scaletrain::cli::RunPlanCommand(args));
      },
      nb::arg("args"), nb::call_guard<nb::gil_scoped_release>(),
      "What `scaletrain plan ARGS` prints; ValueError with its error message.");
  m.def("plan_flags", &scaletrain::cli::PlanFlagNames, nb::arg("validate"),
        "The long flags of `scaletrain plan` (or of `plan validate`), without '--'.");
  m.def("catalogs", &Catalogs, nb::arg("config_dir"),
        "The models, clusters, GPUs and stacks of a config folder's catalogs.");
  m.def("did_you_mean", &scaletrain::DidYouMean, nb::arg("name"), nb::arg("candidates"),
        "\"; did you mean 'x'?\" for the candidate nearest name, as the planner's errors say it; "
        "'' if none is near.");
  m.def("step_records", &StepRecordLines, nb::arg("path"),
        "The complete step records (JSON lines) of a metrics.jsonl or ranks.jsonl.");
  m.def(
      "build_version", [] { return std::string(scaletrain::ScaletrainVersion()); },
      "`git describe` of the source the module was built from, as `scaletrain --version` prints "
      "it.");
}
