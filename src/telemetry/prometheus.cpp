#include "telemetry/prometheus.h"

#include <httplib.h>

#include <cstdio>
#include <thread>

namespace scaletrain {

namespace {

// A label value as the exposition format wants it: backslash, double quote
// and newline escaped.
std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

void Family(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Sample(std::string& out, const std::string& name_and_labels, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " %.17g\n", value);
  out += name_and_labels + buf;
}

}  // namespace

std::string PrometheusText(const PrometheusSnapshot& s) {
  std::string out;
  Family(out, "scaletrain_step", "counter", "Optimizer steps done.");
  Sample(out, "scaletrain_step", static_cast<double>(s.step));
  Family(out, "scaletrain_step_seconds", "gauge", "Time of the last training step (rank 0).");
  Sample(out, "scaletrain_step_seconds", s.step_seconds);
  Family(out, "scaletrain_tokens_per_second", "gauge", "Training throughput of the last step.");
  Sample(out, "scaletrain_tokens_per_second", s.tokens_per_second);
  if (s.mfu) {
    Family(out, "scaletrain_mfu", "gauge", "Model FLOPs utilisation (of telemetry.peak_tflops).");
    Sample(out, "scaletrain_mfu", *s.mfu);
  }
  Family(out, "scaletrain_loss", "gauge", "Training loss of the last step.");
  Sample(out, "scaletrain_loss", s.loss);
  Family(out, "scaletrain_grad_norm", "gauge", "Global gradient norm of the last step, before clipping.");
  Sample(out, "scaletrain_grad_norm", s.grad_norm);
  Family(out, "scaletrain_comm_exposed_seconds", "gauge",
         "Time rank 0 was blocked on a group's communication in the last step.");
  Sample(out, "scaletrain_comm_exposed_seconds{group=\"dp\"}", s.dp_exposed_s);
  Sample(out, "scaletrain_comm_exposed_seconds{group=\"tp\"}", s.tp_exposed_s);
  Sample(out, "scaletrain_comm_exposed_seconds{group=\"pp\"}", s.pp_exposed_s);
  Family(out, "scaletrain_rank_step_seconds", "gauge", "Each rank's mean step time over the last window.");
  for (const PrometheusRank& r : s.ranks) {
    Sample(out, "scaletrain_rank_step_seconds{rank=\"" + std::to_string(r.rank) + "\",host=\"" + Escape(r.host) + "\"}",
           r.step_seconds);
  }
  Family(out, "scaletrain_memory_bytes", "gauge",
         "Bytes each rank holds for parameters, gradients, optimizer state and activations.");
  for (const PrometheusRank& r : s.ranks) {
    Sample(out, "scaletrain_memory_bytes{rank=\"" + std::to_string(r.rank) + "\"}", static_cast<double>(r.memory_bytes));
  }
  Family(out, "scaletrain_straggler", "gauge", "1 while the straggler detector flags the rank, else 0.");
  for (const PrometheusRank& r : s.ranks) {
    Sample(out, "scaletrain_straggler{rank=\"" + std::to_string(r.rank) + "\",host=\"" + Escape(r.host) + "\"}",
           r.straggler ? 1.0 : 0.0);
  }
  return out;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::mutex mu;
  std::string text;  // the newest snapshot's exposition text
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address, int64_t port) {
  auto impl = std::make_unique<Impl>();
  Impl* p = impl.get();
  impl->server.Get("/metrics", [p](const httplib::Request&, httplib::Response& res) {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(p->mu);
      text = p->text;
    }
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
  if (port < 1 || port > 65535 || !impl->server.bind_to_port(address.c_str(), static_cast<int>(port))) {
    return FailedPrecondition("cannot serve metrics on " + address + ":" + std::to_string(port) +
                              ": the port is taken or not allowed; set telemetry.metrics_port to a free "
                              "port (0 turns the endpoint off)");
  }
  impl->thread = std::thread([p] { p->server.listen_after_bind(); });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void MetricsServer::Update(PrometheusSnapshot snapshot) {
  std::string text = PrometheusText(snapshot);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->text = std::move(text);
}

}  // namespace scaletrain
