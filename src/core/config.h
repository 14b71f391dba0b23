// The run configuration: one TOML file with sections [model], [data],
// [training], [parallel], [checkpoint]. Parsing is strict: an unknown section
// or key, or a value of the wrong type, is an error that names the key, what
// was expected and what the valid keys are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace scaletrain {

struct ModelConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;  // context length (tokens)
  int64_t vocab_size = 0;    // 0: taken from the data's vocabulary
  // The embedding's rows are padded to a multiple of vocab_multiple x
  // parallel.tp (tensor parallelism splits them evenly); padding is never scored.
  int64_t vocab_multiple = 1;
  // Block style: "gpt2" (LayerNorm, GELU MLP, learned positions, biases) or
  // "llama" (RMSNorm, SwiGLU MLP, rotary positions, grouped-query attention,
  // no biases). The keys below default to GPT-2's shape.
  std::string arch = "gpt2";
  int64_t n_kv_head = 0;   // key/value heads (llama); 0: n_head
  int64_t ffn_hidden = 0;  // MLP width; 0: 4 x n_embd (gpt2), 8/3 x n_embd rounded up to 8 (llama)
  double rope_theta = 10000.0;  // llama: rotary base
  double norm_eps = 1e-5;       // llama: RMSNorm epsilon
  bool tied_embeddings = true;  // head shares the token embedding (gpt2: must be true)
};

struct DataConfig {
  std::string train;  // llm.c .bin shard, or a glob pattern of shards
  std::string val;    // same, for validation
  std::string vocab;  // vocab.json written by `data prepare`; empty: bytes/ids
};

struct TrainingConfig {
  int64_t steps = 200;
  int64_t global_batch_size = 16;  // sequences per optimizer step
  int64_t micro_batch_size = 16;   // sequences per forward/backward
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 20;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global-norm clip; 0 disables
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  int64_t seed = 1337;
  int64_t eval_interval = 50;  // steps between validation; 0: only at the end
  int64_t eval_steps = 10;     // micro-batches per validation
  int64_t threads = 0;         // 0: all cores
  int64_t sample_tokens = 200; // text generated at the end; 0: none
  std::string device = "cpu";
  std::string precision = "fp32";
  // Activation recomputation (model/gpt.h ActivationRecompute): "none",
  // "selective" (the attention probabilities are recomputed in backward) or
  // "full" (each block's forward is rerun before its backward).
  std::string recompute = "none";
  // A checkpoint (directory, or a run directory's newest) whose weights
  // start this run: step 0, a fresh optimizer (fine-tuning, e.g. from
  // `scaletrain import`). Empty: random initial weights. A resumed run
  // (--resume) continues its checkpoint instead.
  std::string init_from;
};

struct ParallelConfig {
  int64_t dp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  // Context parallelism: each sequence split over cp ranks (the load-
  // balanced chunks r and 2 cp - 1 - r), causal attention as a ring passing
  // key/value blocks; gradients reduced (and ZeRO sharded) over dp x cp.
  int64_t cp = 1;
  // "ring" (above) or "ulysses": an all-to-all from sequence to heads before
  // attention (each rank then attends the whole sequence with n_head / tp /
  // cp of the heads) and back after it (DeepSpeed-Ulysses, Jacobs et al. 2023).
  std::string cp_impl = "ring";
  int64_t vpp = 1;
  int64_t zero = 0;
  bool sp = false;
  std::string schedule = "1f1b";
  // zb-v places a stage's two chunks in a V (model/param_layout.h ModelShard).
  bool chunks_in_v() const { return schedule == "zb-v"; }
  double bucket_mb = 25.0;        // gradient bucket size (MiB) for DP reduction
  double comm_timeout_s = 300.0;  // watchdog: a collective taking longer ends the job
  // Each DP rank's share of a step's micro-batches follows its measured
  // speed (every telemetry.rank_interval steps); the update stays the
  // uniform one. Needs pp = 1 and ZeRO <= 1.
  bool rebalance = false;
  // The DP gradient all-reduce: "flat" (one all-reduce over the DP group),
  // "hierarchical" (reduce-scatter inside each host, all-reduce across hosts,
  // all-gather inside each host) or "auto" (hierarchical where it applies:
  // ZeRO-0, the DP group on several hosts with the same number of ranks >= 2
  // on each).
  std::string dp_reduce = "auto";
  // What ZeRO-0's gradient all-reduce sends (parallel/grad_compression.h):
  // "none" (fp32), "bf16", "fp16" (with a scale) or "sign" (1 bit per element
  // with error feedback); with the hierarchical reduction only the part across
  // hosts is compressed.
  std::string dp_compress = "none";
};

struct CheckpointConfig {
  int64_t interval = 0;  // steps between checkpoints; 0: only at the end
  // How many of the newest checkpoints to keep; older ones are removed only
  // after a newer one has been written and verified.
  int64_t keep_last = 2;
};

struct TelemetryConfig {
  int64_t rank_interval = 10;  // steps per window of per-rank records (ranks.jsonl); 0: none
  // A rank whose compute per step exceeds its pipeline stage's median by
  // this fraction for straggler_windows windows in a row is a straggler.
  double straggler_threshold = 0.2;
  int64_t straggler_windows = 2;
  double straggler_min_ms = 2.0;  // and by at least this many milliseconds per step
  // A rank's peak matrix rate (TFLOP/s), for MFU in the summary; 0: unknown.
  double peak_tflops = 0;
  // Rank 0 serves Prometheus metrics on http://metrics_address:metrics_port/metrics; 0: off.
  int64_t metrics_port = 0;
  std::string metrics_address = "0.0.0.0";
  // Each rank keeps its last flight_records collectives and writes them to
  // RUN_DIR/flight/rank-R.json when the watchdog fires, on a fatal signal or
  // on SIGTERM; 0: off.
  int64_t flight_records = 256;
  // The lead writes RUN_DIR/tb/events.out.tfevents.* (TensorBoard) beside metrics.jsonl.
  bool tensorboard = true;
};

// Fault injection, for tests and benchmarks of the failure handling.
struct FaultsConfig {
  int64_t slow_rank = -1;  // this world rank computes slower; -1: none
  double slow_ms = 0;      // extra milliseconds of compute per micro-batch on it
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  TelemetryConfig telemetry;
  FaultsConfig faults;
};

// Parses `path`, then applies `overrides` ("section.key=value", the value in
// TOML syntax, or a bare word taken as a string), then validates.
Result<RunConfig> LoadRunConfig(const std::string& path,
                                const std::vector<std::string>& overrides);
Result<RunConfig> ParseRunConfig(const std::string& toml_text,
                                 const std::vector<std::string>& overrides,
                                 const std::string& source_name);
// Checks values and their relations (batch divisibility, head divisibility...).
Status ValidateRunConfig(const RunConfig& cfg);
// The full config, every key, as TOML (written to config.resolved.toml).
std::string RunConfigToToml(const RunConfig& cfg);

}  // namespace scaletrain
