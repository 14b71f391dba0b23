// `scaletrain bench`: measures what this machine does for training (matrix
// multiply throughput, element-wise memory bandwidth, all-reduce bus
// bandwidth and latency) with the trainer's own kernels and communicator,
// and writes a hardware profile in the configs/hardware format that
// `scaletrain plan --hardware FILE --cluster NAME` loads.
//
// A "device" of the profile is one rank with its threads: run the bench
// under the same launch as the training it should predict (e.g. mpirun -np 2
// with 1 thread each), so that ranks share cores and memory bandwidth as
// they will in training. Every rank measures at once; the slowest rank's
// figure is kept. Timings are the median of repeated runs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/spec.h"

namespace scaletrain::hwprofile {

struct BenchOptions {
  std::string name;        // profile entry name (gpu/node/fabric/cluster)
  int threads = 0;         // per rank; 0: the cores / ranks
  double min_seconds = 0.3;  // per measurement
  // Largest all-reduce measured (bytes); sizes go up by 4x from 8 bytes.
  int64_t max_allreduce_bytes = 64 << 20;
  int64_t stream_bytes = 64 << 20;  // per array of the DRAM bandwidth test
};

struct GemmMeasurement {
  std::string what;   // "qkv forward", "square 1024", ...
  int64_t m = 0, n = 0, k = 0;
  double flops = 0;   // per call
  double seconds = 0; // median per call, slowest rank
  double Tflops() const { return seconds > 0 ? flops / seconds / 1e12 : 0; }
};

struct BandwidthMeasurement {
  int64_t bytes_per_array = 0;
  double bytes_moved = 0;  // per call: read two arrays, write one
  double seconds = 0;
  double Gbps() const { return seconds > 0 ? bytes_moved / seconds / 1e9 : 0; }
};

// One of the trainer's other kernels at the model's shapes: its time, and
// the bytes it must move at least (inputs read, outputs written once).
struct KernelMeasurement {
  std::string what;
  double bytes = 0;
  double seconds = 0;
  double Gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

struct AllreduceMeasurement {
  int64_t bytes = 0;
  double seconds = 0;
  // nccl-tests convention: 2 (n-1)/n x bytes / time.
  double bus_gbps = 0;
};

struct BenchResult {
  BenchOptions options;
  int64_t ranks = 1;
  int threads = 1;
  std::string cpu_model;   // /proc/cpuinfo "model name"
  std::string blas;
  double memory_gib_per_rank = 0;
  std::vector<GemmMeasurement> peak_gemms;   // large square GEMMs: the rate the profile records
  std::vector<GemmMeasurement> model_gemms;  // the model's own shapes, as the trainer runs them
  std::vector<KernelMeasurement> model_kernels;  // the model's other kernels (attention recorded, rest reported)
  std::array<int64_t, 4> attention_shape{};      // micro-batch, seq, hidden, heads
  // One micro-batch through the whole model (GPT::Forward, GPT::Backward) at
  // one rank, every rank at once: the kernels as a training step runs them,
  // one after another on cold caches, which the kernel-by-kernel figures
  // above miss. layers = 0: not measured (no model).
  struct ModelStep {
    int64_t batch = 0, seq = 0, hidden = 0, heads = 0, layers = 0, vocab = 0;
    double fwd_s = 0, bwd_s = 0;
  } model_step;
  std::vector<BandwidthMeasurement> bandwidth;  // [0]: DRAM-sized arrays (recorded), [1]: cache-sized
  // On one host: the all-reduce over every rank. Across hosts (ranks learn
  // their host with Communicator::SplitByHost): `allreduce` is among one
  // host's ranks (empty with one rank per host) and `cross_allreduce` among
  // the ranks at one position on every host, all positions at once (they
  // share each host's link, as the hierarchical gradient reduce does).
  std::vector<AllreduceMeasurement> allreduce;
  int64_t hosts = 1, ranks_per_host = 1;
  std::vector<AllreduceMeasurement> cross_allreduce;
  // Across hosts: one message (p2p_bytes) from each rank of an even host to
  // the rank at its position on the next host, all at once, as pipeline
  // stages send; bytes / time of the slowest. 0: not measured.
  int64_t p2p_bytes = 0;
  double p2p_gbps = 0;
  // The round trip of an 8-byte message between two ranks of a host (0:
  // one rank per host) and between ranks of neighbouring hosts (0: one
  // host): twice the one-way latency the planner charges per message.
  double host_round_trip_s = 0, cross_round_trip_s = 0;
};

// The matmuls of one transformer block and of the logits of `spec` at
// micro-batch `micro_batch`, forward and backward, as the trainer's
// MatmulForward / MatmulBackward run them.
struct MatmulShape {
  std::string what;
  int64_t rows = 0, in = 0, out = 0;  // N, C, OC of kernels/cpu/ops.h
};
std::vector<MatmulShape> ModelMatmulShapes(const ModelSpec& spec, int64_t micro_batch);

// Runs every measurement; collective over `world` (every rank calls it).
// `model` may be null (then only the peak GEMMs are measured).
Result<BenchResult> RunBench(Communicator& world, const BenchOptions& opt, const ModelSpec* model,
                             int64_t micro_batch);

// The profile: [gpu.NAME], [node.NAME], [fabric.NAME], [cluster.NAME] with
// every figure's measurement in a comment beside it.
std::string ProfileToToml(const BenchResult& r);
// A human-readable summary of the measurements.
std::string BenchToText(const BenchResult& r);

}  // namespace scaletrain::hwprofile
