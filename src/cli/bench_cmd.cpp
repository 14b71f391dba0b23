// `scaletrain bench`: measure this machine (matmul, memory bandwidth,
// all-reduce) and write a hardware profile the planner loads.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/train_config_model.h"
#include "comm/communicator.h"
#include "core/config.h"
#include "hwprofile/bench.h"
#include "plan/hardware.h"

namespace scaletrain::cli {

namespace {

struct BenchArgs {
  std::string output, name, config;
  std::vector<std::string> sets;
  std::optional<int64_t> vocab;
  int threads = 0;
  double min_seconds = 0.3;
  double max_allreduce_mb = 64;
  double stream_mb = 64;
};

bool UnderMpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

// Checks everything that can be checked before minutes of measuring.
Status CheckArgs(const BenchArgs& a) {
  if (a.name.empty()) return InvalidArgument("--name must not be empty");
  for (char c : a.name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
      return InvalidArgument("--name '" + a.name + "' may hold only letters, digits, '-' and '_' (it names TOML "
                             "tables); e.g. --name my-cpu");
    }
  }
  if (a.threads < 0) return InvalidArgument("--threads must be >= 0 (0: cores / ranks), got " + std::to_string(a.threads));
  if (!(a.min_seconds > 0)) return InvalidArgument("--min-seconds must be positive");
  if (!(a.max_allreduce_mb > 0)) return InvalidArgument("--max-allreduce-mb must be positive");
  if (!(a.stream_mb >= 1)) return InvalidArgument("--stream-mb must be >= 1 (arrays larger than the caches)");
  if (!a.sets.empty() && a.config.empty()) return InvalidArgument("--set changes a training config; use it with --config FILE");
  if (a.vocab && a.config.empty()) return InvalidArgument("--vocab applies to --config FILE; give one");
  return Status::Ok();
}

Status RunBenchCommand(const BenchArgs& a, Communicator& world) {
  ST_RETURN_IF_ERROR(CheckArgs(a));
  std::optional<ModelSpec> model;
  int64_t micro_batch = 1;
  if (!a.config.empty()) {
    auto cfg = LoadRunConfig(a.config, a.sets);
    if (!cfg.ok()) return cfg.status().WithContext("--config");
    ST_ASSIGN_OR_RETURN(model, TrainConfigModel(*cfg, a.config, a.vocab, cfg->parallel.tp));
    micro_batch = cfg->training.micro_batch_size;
  }
  // The output must be writable before the measuring starts.
  const std::string tmp = a.output + ".tmp";
  if (world.rank() == 0) {
    std::ofstream probe(tmp);
    if (!probe) {
      return IoError("cannot write " + a.output + " (does its folder exist and is it writable?); pass --output to a "
                     "writable path");
    }
  }
  hwprofile::BenchOptions opt;
  opt.name = a.name;
  opt.threads = a.threads;
  opt.min_seconds = a.min_seconds;
  opt.max_allreduce_bytes = static_cast<int64_t>(a.max_allreduce_mb * 1048576.0);
  opt.stream_bytes = static_cast<int64_t>(a.stream_mb * 1048576.0) / 4 * 4;
  auto measured = hwprofile::RunBench(world, opt, model ? &*model : nullptr, micro_batch);
  if (world.rank() != 0) return measured.status();
  if (!measured.ok()) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return measured.status();
  }
  const hwprofile::BenchResult& r = *measured;
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << hwprofile::ProfileToToml(r);
    if (!out) return IoError("error writing " + tmp + " (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, a.output, ec);
  if (ec) return IoError("cannot rename " + tmp + " to " + a.output + ": " + ec.message());
  // The profile must load as the planner will load it.
  plan::HardwareCatalog cat;
  ST_RETURN_IF_ERROR(cat.LoadFile(a.output).WithContext("the profile just written"));
  ST_RETURN_IF_ERROR(cat.Cluster(a.name).status().WithContext("the profile just written"));
  std::printf("%s", hwprofile::BenchToText(r).c_str());
  std::printf("profile written to %s (cluster '%s'); use: scaletrain plan --hardware %s --cluster %s ...\n",
              a.output.c_str(), a.name.c_str(), a.output.c_str(), a.name.c_str());
  return Status::Ok();
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand(
      "bench", "measure this machine's matmul throughput, memory bandwidth and all-reduce bandwidth, and write a "
               "hardware profile for `scaletrain plan --hardware`; run it under the launch you train with "
               "(e.g. mpirun -np 2 ... --threads 1)");
  cmd->add_option("--output", a->output, "profile TOML to write")->required();
  cmd->add_option("--name", a->name, "name of the profile's gpu/node/fabric/cluster entries")
      ->default_str("local-cpu-<ranks>x<threads>t");
  cmd->add_option("--threads", a->threads, "threads per rank (0: cores / ranks)")->capture_default_str();
  cmd->add_option("--config", a->config, "a training config: also measure its model's matmul shapes");
  cmd->add_option("--set", a->sets, "with --config: section.key=value");
  cmd->add_option("--vocab", a->vocab, "with --config: vocabulary size if the config and data do not give it");
  cmd->add_option("--min-seconds", a->min_seconds, "time spent on each measurement")->capture_default_str();
  cmd->add_option("--max-allreduce-mb", a->max_allreduce_mb, "largest all-reduce measured")->capture_default_str();
  cmd->add_option("--stream-mb", a->stream_mb, "array size of the memory bandwidth test")->capture_default_str();
  cmd->callback([a, exit_code] {
    auto world = CreateWorldCommunicator(UnderMpirun() ? "mpi" : "self");
    if (!world.ok()) {
      std::fprintf(stderr, "error: %s\n", world.status().message().c_str());
      *exit_code = 1;
      return;
    }
    BenchArgs args = *a;
    if (args.name.empty()) {
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      const int threads = args.threads > 0 ? args.threads : std::max(1, cores / (*world)->size());
      args.name = "local-cpu-" + std::to_string((*world)->size()) + "x" + std::to_string(threads) + "t";
    }
    Status st = RunBenchCommand(args, **world);
    if (!st.ok()) {
      // Argument errors are the same on every rank: rank 0 reports them.
      // The others hold back their exit so that mpirun does not end the
      // job before rank 0 has printed (as train does).
      if ((*world)->rank() == 0) {
        std::fprintf(stderr, "error: %s\n", st.message().c_str());
        std::fflush(stderr);
      } else {
        std::this_thread::sleep_for(std::chrono::seconds(5));
      }
      *exit_code = 1;
    }
  });
}

}  // namespace scaletrain::cli
