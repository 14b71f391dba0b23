// The Prometheus endpoint: with telemetry.metrics_port set, rank 0 serves
// GET /metrics in the Prometheus text exposition format (0.0.4) from an HTTP
// server thread of cpp-httplib (Debian's libcpp-httplib-dev). The trainer
// hands it a snapshot after every step; a scrape reads the newest one.
//
// Names follow the DCGM exporter's style (a scaletrain_ prefix, units in the
// name, labels for the dimension):
//   scaletrain_step                               counter  steps done
//   scaletrain_step_seconds                       gauge    the last step's time
//   scaletrain_tokens_per_second                  gauge
//   scaletrain_mfu                                gauge    (when telemetry.peak_tflops is set)
//   scaletrain_loss, scaletrain_grad_norm         gauge
//   scaletrain_comm_exposed_seconds{group}        gauge    time blocked on dp / tp / pp
//   scaletrain_rank_step_seconds{rank,host}       gauge    each rank's mean over the last window
//   scaletrain_memory_bytes{rank}                 gauge    parameters, gradients, optimizer, activations
//   scaletrain_straggler{rank,host}               gauge    1 while the detector flags the rank
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace scaletrain {

struct PrometheusRank {
  int64_t rank = 0;
  std::string host;
  double step_seconds = 0;  // mean over the last window (0 before the first)
  int64_t memory_bytes = 0;
  bool straggler = false;
};

struct PrometheusSnapshot {
  int64_t step = 0;
  double step_seconds = 0, tokens_per_second = 0, loss = 0, grad_norm = 0;
  std::optional<double> mfu;
  double dp_exposed_s = 0, tp_exposed_s = 0, pp_exposed_s = 0;
  std::vector<PrometheusRank> ranks;
};

// The exposition text of a snapshot (HELP and TYPE lines, then the samples).
std::string PrometheusText(const PrometheusSnapshot& s);

class MetricsServer {
 public:
  // Binds address:port and starts serving. A port that is taken or not
  // allowed is one error naming it and the fix.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& address, int64_t port);
  ~MetricsServer();  // stops the server and joins its thread

  void Update(PrometheusSnapshot snapshot);

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace scaletrain
