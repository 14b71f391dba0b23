#include "hwprofile/bench.h"

#include "core/strings.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <thread>

#include "core/buffer.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "model/gpt.h"

namespace scaletrain::hwprofile {

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Median seconds of each of `phases` on this rank, run in order over and
// over: once to warm up, then until `min_seconds` have passed (at least 3
// rounds).
std::vector<double> MedianPhaseSeconds(const std::vector<std::function<void()>>& phases,
                                       double min_seconds) {
  for (const auto& phase : phases) phase();
  std::vector<std::vector<double>> times(phases.size());
  const auto start = Clock::now();
  while (times[0].size() < 3 || Since(start) < min_seconds) {
    for (size_t i = 0; i < phases.size(); ++i) {
      const auto t0 = Clock::now();
      phases[i]();
      times[i].push_back(Since(t0));
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& t : times) {
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  return medians;
}

// Every rank measures at once (ranks share cores and memory as in training);
// the slowest rank's time of each phase is kept.
Result<std::vector<double>> Concurrent(Communicator& world,
                                       const std::vector<std::function<void()>>& phases,
                                       double min_seconds) {
  ST_RETURN_IF_ERROR(world.Barrier());
  std::vector<double> t = MedianPhaseSeconds(phases, min_seconds);
  ST_RETURN_IF_ERROR(world.Allreduce(t.data(), static_cast<int64_t>(t.size()), ReduceOp::kMax));
  return t;
}

Result<double> Concurrent(Communicator& world, const std::function<void()>& fn,
                          double min_seconds) {
  ST_ASSIGN_OR_RETURN(const std::vector<double> t, Concurrent(world, std::vector{fn}, min_seconds));
  return t[0];
}

void FillRandom(float* p, int64_t n) {
  uint32_t s = 12345;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

std::string Quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

}  // namespace

std::vector<MatmulShape> ModelMatmulShapes(const ModelSpec& spec, int64_t micro_batch) {
  const int64_t N = micro_batch * spec.block_size, h = spec.n_embd, F = spec.ffn_hidden;
  const int64_t kv = spec.n_kv_head * spec.head_dim();
  return {{"qkv", N, h, h + 2 * kv},
          {"attention projection", N, h, h},
          {"mlp up", N, h, F},
          {"mlp down", N, F, h},
          {"logits", N, h, spec.padded_vocab_size}};
}

namespace {

// The machine and the launch: ranks, threads per rank (set for the kernels
// here), CPU, BLAS and memory per rank.
BenchResult DescribeLaunch(const Communicator& world, const BenchOptions& opt) {
  BenchResult r;
  r.options = opt;
  r.ranks = world.size();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.threads = opt.threads > 0 ? opt.threads : std::max(1, cores / static_cast<int>(r.ranks));
  cpu::SetNumThreads(r.threads);
  r.cpu_model = CpuModel();
  r.blas = cpu::BlasInfo();
  const double phys =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  r.memory_gib_per_rank = phys / static_cast<double>(r.ranks) / (1024.0 * 1024.0 * 1024.0);
  return r;
}

// Large square GEMMs: the achievable matrix rate (as MAMF is for a GPU).
Result<std::vector<GemmMeasurement>> MeasurePeakGemms(Communicator& world,
                                                      const BenchOptions& opt) {
  std::vector<GemmMeasurement> gemms;
  for (int64_t n : {512, 1024, 2048}) {
    Buffer a(n * n * 4), b(n * n * 4), c(n * n * 4);
    FillRandom(a.f32(), n * n);
    FillRandom(b.f32(), n * n);
    GemmMeasurement g{"square " + std::to_string(n), n, n, n, 2.0 * n * n * n, 0};
    ST_ASSIGN_OR_RETURN(
        g.seconds,
        Concurrent(
            world,
            [&] { cpu::Sgemm('N', 'T', n, n, n, 1.0f, a.f32(), n, b.f32(), n, 0.0f, c.f32(), n); },
            opt.min_seconds));
    gemms.push_back(g);
  }
  return gemms;
}

// The model's matmuls through the trainer's own kernels (bias included):
// forward, then backward, shape by shape.
Result<std::vector<GemmMeasurement>> MeasureModelGemms(Communicator& world, const BenchOptions& opt,
                                                       const ModelSpec& model,
                                                       int64_t micro_batch) {
  std::vector<GemmMeasurement> gemms;
  for (const MatmulShape& s : ModelMatmulShapes(model, micro_batch)) {
    Buffer inp(s.rows * s.in * 4), w(s.out * s.in * 4), bias(s.out * 4), out(s.rows * s.out * 4);
    Buffer dinp(s.rows * s.in * 4), dw(s.out * s.in * 4), dbias(s.out * 4);
    FillRandom(inp.f32(), s.rows * s.in);
    FillRandom(w.f32(), s.out * s.in);
    FillRandom(out.f32(), s.rows * s.out);
    const double f = 2.0 * static_cast<double>(s.rows) * s.in * s.out;
    const bool has_bias = s.what != "logits";
    GemmMeasurement fwd{s.what + " forward", s.rows, s.out, s.in, f, 0};
    ST_ASSIGN_OR_RETURN(fwd.seconds, Concurrent(
                                         world,
                                         [&] {
                                           cpu::MatmulForward(out.f32(), inp.f32(), w.f32(),
                                                              has_bias ? bias.f32() : nullptr,
                                                              s.rows, s.in, s.out);
                                         },
                                         opt.min_seconds));
    GemmMeasurement bwd{s.what + " backward", s.rows, s.out, s.in, 2.0 * f, 0};
    ST_ASSIGN_OR_RETURN(bwd.seconds, Concurrent(
                                         world,
                                         [&] {
                                           cpu::MatmulBackward(dinp.f32(), dw.f32(),
                                                               has_bias ? dbias.f32() : nullptr,
                                                               out.f32(), inp.f32(), w.f32(),
                                                               s.rows, s.in, s.out);
                                         },
                                         opt.min_seconds));
    gemms.push_back(fwd);
    gemms.push_back(bwd);
  }
  return gemms;
}

// The model's other kernels at its shapes, one layer and the loss, each
// with the bytes it must move at least. Sets r->attention_shape.
Status MeasureModelKernels(Communicator& world, const BenchOptions& opt, const ModelSpec& model,
                           int64_t micro_batch, BenchResult* r) {
  const int64_t B = micro_batch, T = model.block_size, C = model.n_embd, NH = model.n_head;
  const int64_t N = B * T, F = model.ffn_hidden, V = model.vocab_size, Vp = model.padded_vocab_size;
  Buffer x(N * C * 4), y(N * C * 4), dx(N * C * 4), dy(N * C * 4), w(C * 4), bb(C * 4), dw(C * 4),
      db(C * 4);
  Buffer mean(N * 4), rstd(N * 4), h(N * F * 4), g(N * F * 4), dh(N * F * 4);
  Buffer qkv(N * 3 * C * 4), dqkv(N * 3 * C * 4), att(B * NH * T * T * 4), datt(B * NH * T * T * 4);
  Buffer logits(N * Vp * 4), probs(N * Vp * 4), losses(N * 4);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) targets[static_cast<size_t>(i)] = static_cast<int32_t>(i % V);
  for (Buffer* b : {&x, &dy, &w, &h, &qkv, &logits}) {
    FillRandom(b->f32(), static_cast<int64_t>(b->size_bytes() / 4));
  }
  r->attention_shape = {B, T, C, NH};
  cpu::LayerNormForward(y.f32(), mean.f32(), rstd.f32(), x.f32(), w.f32(), bb.f32(), N, C);
  cpu::AttentionForward(y.f32(), att.f32(), qkv.f32(), B, T, C, NH);
  const double nc = static_cast<double>(N * C) * 4, nf = static_cast<double>(N * F) * 4;
  const double scores = static_cast<double>(B * NH) * T * T * 4,
               nv = static_cast<double>(N * Vp) * 4;
  struct K {
    const char* what;
    double bytes;
    std::function<void()> fn;
  };
  const std::vector<K> kernels = {
      {"layernorm forward", 2 * nc,
       [&] {
         cpu::LayerNormForward(y.f32(), mean.f32(), rstd.f32(), x.f32(), w.f32(), bb.f32(), N, C);
       }},
      {"layernorm backward", 3 * nc,
       [&] {
         cpu::LayerNormBackward(dx.f32(), dw.f32(), db.f32(), dy.f32(), x.f32(), w.f32(),
                                mean.f32(), rstd.f32(), N, C);
       }},
      {"gelu forward", 2 * nf, [&] { cpu::GeluForward(g.f32(), h.f32(), N * F); }},
      {"gelu backward", 3 * nf, [&] { cpu::GeluBackward(dh.f32(), h.f32(), g.f32(), N * F); }},
      {"residual forward", 3 * nc,
       [&] { cpu::ResidualForward(y.f32(), x.f32(), dy.f32(), N * C); }},
      {"attention forward", 3 * nc + nc + scores,
       [&] { cpu::AttentionForward(y.f32(), att.f32(), qkv.f32(), B, T, C, NH); }},
      {"attention backward", 3 * nc + nc + scores + 3 * nc,
       [&] {
         cpu::AttentionBackward(dqkv.f32(), datt.f32(), dy.f32(), qkv.f32(), att.f32(), B, T, C,
                                NH);
       }},
      {"cross-entropy forward", 2 * nv,
       [&] {
         cpu::CrossEntropyForward(losses.f32(), probs.f32(), logits.f32(), targets.data(), N, V,
                                  Vp);
       }},
      {"cross-entropy backward", 2 * nv,
       [&] {
         cpu::CrossEntropyBackward(logits.f32(), probs.f32(), targets.data(),
                                   1.0f / static_cast<float>(N), N, V, Vp);
       }},
  };
  for (const K& k : kernels) {
    KernelMeasurement m{k.what, k.bytes, 0};
    ST_ASSIGN_OR_RETURN(m.seconds, Concurrent(world, k.fn, opt.min_seconds));
    r->model_kernels.push_back(m);
  }
  return Status::Ok();
}

// Element-wise bandwidth: the trainer's residual add (read two arrays,
// write one) on arrays far larger than the caches, then on cache-sized ones.
Result<std::vector<BandwidthMeasurement>> MeasureBandwidth(Communicator& world,
                                                           const BenchOptions& opt) {
  std::vector<BandwidthMeasurement> bandwidth;
  for (int64_t bytes : {opt.stream_bytes, int64_t{256} << 10}) {
    const int64_t n = bytes / 4;
    Buffer a(n * 4), b(n * 4), c(n * 4);
    FillRandom(a.f32(), n);
    FillRandom(b.f32(), n);
    BandwidthMeasurement m{bytes, 12.0 * static_cast<double>(n), 0};
    ST_ASSIGN_OR_RETURN(
        m.seconds,
        Concurrent(
            world, [&] { cpu::ResidualForward(c.f32(), a.f32(), b.f32(), n); }, opt.min_seconds));
    bandwidth.push_back(m);
  }
  return bandwidth;
}

// One all-reduce size over the world (`buf` holds at least `bytes`). Every
// rank runs the same number of calls: set from the slowest first call.
Result<AllreduceMeasurement> TimeAllreduce(Communicator& world, Buffer& buf, int64_t bytes,
                                           double min_seconds) {
  const double n = static_cast<double>(world.size());
  const int64_t count = bytes / 4;
  std::fill(buf.f32(), buf.f32() + count, 1.0f);
  ST_RETURN_IF_ERROR(world.Barrier());
  auto t0 = Clock::now();
  ST_RETURN_IF_ERROR(world.Allreduce(buf.f32(), count, ReduceOp::kSum));
  double first = Since(t0);
  ST_RETURN_IF_ERROR(world.Allreduce(&first, 1, ReduceOp::kMax));
  const int64_t reps =
      std::clamp<int64_t>(static_cast<int64_t>(min_seconds / std::max(first, 1e-7)), 5, 2000);
  ST_RETURN_IF_ERROR(world.Barrier());
  t0 = Clock::now();
  for (int64_t i = 0; i < reps; ++i) {
    ST_RETURN_IF_ERROR(world.Allreduce(buf.f32(), count, ReduceOp::kSum));
  }
  double per_call = Since(t0) / static_cast<double>(reps);
  ST_RETURN_IF_ERROR(world.Allreduce(&per_call, 1, ReduceOp::kMax));
  return AllreduceMeasurement{bytes, per_call,
                              2.0 * (n - 1) / n * static_cast<double>(bytes) / per_call / 1e9};
}

// All-reduce over the world, 8 bytes up to the largest size by 4x.
Result<std::vector<AllreduceMeasurement>> MeasureAllreduce(Communicator& world,
                                                           const BenchOptions& opt) {
  std::vector<AllreduceMeasurement> allreduce;
  Buffer buf(std::max<int64_t>(opt.max_allreduce_bytes, 8));
  for (int64_t bytes = 8; bytes <= opt.max_allreduce_bytes; bytes *= 4) {
    ST_ASSIGN_OR_RETURN(AllreduceMeasurement m, TimeAllreduce(world, buf, bytes, opt.min_seconds));
    allreduce.push_back(m);
  }
  return allreduce;
}

// The median of this rank's `times` (the upper of the middle two; 0 for
// none), the largest over `comm`: a transfer is as fast as its slowest pair.
Result<double> SlowestMedian(Communicator& comm, std::vector<double> times) {
  double t = 0;
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    t = times[times.size() / 2];
  }
  ST_RETURN_IF_ERROR(comm.Allreduce(&t, 1, ReduceOp::kMax));
  return t;
}

// The round trip of an 8-byte message between the rank pairs of `comm`
// (ranks 2i and 2i + 1, all pairs at once; a last odd rank idles), through
// the communicator as the trainer uses it: the median of the slowest pair.
// Half of it is the one-way latency the planner charges per message.
Result<double> TimeRoundTrip(Communicator& comm) {
  constexpr int kRoundTrips = 40;  // after one warm-up; both ends make the same calls
  const int me = comm.rank(), peer = me % 2 == 0 ? me + 1 : me - 1;
  const bool active = peer < comm.size();
  double message = 0;
  std::vector<double> times;
  ST_RETURN_IF_ERROR(comm.Barrier());
  for (int i = 0; i <= kRoundTrips && active; ++i) {
    const auto t0 = Clock::now();
    if (me % 2 == 0) {
      ST_RETURN_IF_ERROR(comm.Send(&message, 1, peer));
      ST_RETURN_IF_ERROR(comm.Recv(&message, 1, peer));
    } else {
      ST_RETURN_IF_ERROR(comm.Recv(&message, 1, peer));
      ST_RETURN_IF_ERROR(comm.Send(&message, 1, peer));
    }
    if (i > 0) times.push_back(Since(t0));
  }
  return SlowestMedian(comm, std::move(times));
}

// The all-reduce and the round trip inside a host and, when the ranks span
// several hosts, across them: the node and fabric entries of the profile.
// `p2p_bytes`: the point-to-point message measured across hosts (the
// model's pipeline message where there is a model, so that the rate is the
// one of the size the pipeline sends).
Status MeasureLinks(Communicator& world, const BenchOptions& opt, int64_t p2p_bytes, BenchResult* r) {
  ST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> host, world.SplitByHost("bench_host"));
  int64_t counts[3] = {host->rank() == 0 ? 1 : 0, -host->size(), host->size()};
  ST_RETURN_IF_ERROR(world.Allreduce(counts, 1, ReduceOp::kSum));
  ST_RETURN_IF_ERROR(world.Allreduce(counts + 1, 2, ReduceOp::kMax));
  r->hosts = counts[0];
  r->ranks_per_host = counts[2];
  if (-counts[1] != counts[2]) {
    return FailedPrecondition("the bench needs the same number of ranks on every host; this launch has " +
                              std::to_string(-counts[1]) + " to " + std::to_string(counts[2]) +
                              " (launch a whole number of ranks per host)");
  }
  if (r->hosts == 1) {
    ST_ASSIGN_OR_RETURN(r->allreduce, MeasureAllreduce(world, opt));
    ST_ASSIGN_OR_RETURN(r->host_round_trip_s, TimeRoundTrip(world));
    return Status::Ok();
  }
  if (host->size() > 1) {
    ST_ASSIGN_OR_RETURN(r->allreduce, MeasureAllreduce(*host, opt));
  }
  // Every rank makes the same calls: a host of one rank has no pair.
  ST_ASSIGN_OR_RETURN(r->host_round_trip_s, TimeRoundTrip(*host));
  ST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> cross, world.Split(host->rank(), world.rank(), "bench_cross"));
  ST_ASSIGN_OR_RETURN(r->cross_allreduce, MeasureAllreduce(*cross, opt));
  ST_ASSIGN_OR_RETURN(r->cross_round_trip_s, TimeRoundTrip(*cross));
  // Point to point: host 2i's ranks send to host 2i+1's (a last odd host idles).
  const int64_t bytes = p2p_bytes;
  Buffer msg(static_cast<size_t>(bytes));
  const int me = cross->rank(), peer = me % 2 == 0 ? me + 1 : me - 1;
  const bool active = peer < cross->size();
  // A fixed count of messages (both ends must make the same calls): a
  // warm-up, then the median of kP2pMessages.
  constexpr int kP2pMessages = 5;
  std::vector<double> times;
  ST_RETURN_IF_ERROR(world.Barrier());
  for (int i = 0; i <= kP2pMessages && active; ++i) {
    uint8_t* p = static_cast<uint8_t*>(msg.data());
    const auto t0 = Clock::now();
    ST_RETURN_IF_ERROR(me % 2 == 0 ? cross->Send(p, bytes, peer) : cross->Recv(p, bytes, peer));
    if (i > 0) times.push_back(Since(t0));
  }
  ST_ASSIGN_OR_RETURN(const double t, SlowestMedian(world, std::move(times)));
  r->p2p_bytes = bytes;
  r->p2p_gbps = static_cast<double>(bytes) / t / 1e9;
  return Status::Ok();
}

}  // namespace

// A micro-batch's forward, and forward + backward, through the whole model
// on one rank (GPT), every rank at once.
Status MeasureModelStep(Communicator& world, const BenchOptions& opt, const ModelSpec& model,
                        int64_t micro_batch, BenchResult* r) {
  ST_ASSIGN_OR_RETURN(std::unique_ptr<GPT> gpt, GPT::Create(model, micro_batch));
  gpt->InitWeights(1);
  const int64_t B = micro_batch, T = model.block_size;
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(model.vocab_size));
    targets[i] = static_cast<int32_t>((i * 104729 + 1) % static_cast<size_t>(model.vocab_size));
  }
  // Each backward timed on its own after its forward: a difference of two
  // separately timed medians can come out at or below 0 on a busy machine.
  ST_ASSIGN_OR_RETURN(const std::vector<double> t,
                      Concurrent(world,
                                 {[&] { gpt->Forward(tokens.data(), targets.data(), B, T); },
                                  [&] { gpt->Backward(1.0f); }},
                                 opt.min_seconds));
  r->model_step = {B, T, model.n_embd, model.n_head, model.n_layer, model.vocab_size, t[0], t[1]};
  return Status::Ok();
}

Result<BenchResult> RunBench(Communicator& world, const BenchOptions& opt, const ModelSpec* model,
                             int64_t micro_batch) {
  BenchResult r = DescribeLaunch(world, opt);
  ST_ASSIGN_OR_RETURN(r.peak_gemms, MeasurePeakGemms(world, opt));
  if (model != nullptr) {
    ST_ASSIGN_OR_RETURN(r.model_gemms, MeasureModelGemms(world, opt, *model, micro_batch));
    ST_RETURN_IF_ERROR(MeasureModelKernels(world, opt, *model, micro_batch, &r));
    ST_RETURN_IF_ERROR(MeasureModelStep(world, opt, *model, micro_batch, &r));
  }
  ST_ASSIGN_OR_RETURN(r.bandwidth, MeasureBandwidth(world, opt));
  // The pipeline's message: a micro-batch's residual rows in fp32.
  const int64_t p2p_bytes = model != nullptr ? micro_batch * model->block_size * model->n_embd * 4
                                             : std::min<int64_t>(opt.max_allreduce_bytes, 4 << 20);
  if (r.ranks > 1) ST_RETURN_IF_ERROR(MeasureLinks(world, opt, p2p_bytes, &r));
  return r;
}

namespace {

// The best rate any Sgemm reached, the model's own shapes included: a thin
// model GEMM that beats the squares (timing noise, cache fits) must not make
// the planner's MFU exceed 1.
double BestGemmTflops(const BenchResult& r) {
  double peak = 0;
  for (const auto* list : {&r.peak_gemms, &r.model_gemms}) {
    for (const auto& g : *list) peak = std::max(peak, g.Tflops());
  }
  return peak;
}

std::string ProfileIntro(const BenchResult& r) {
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string o;
  o += "# Hardware profile written by `scaletrain bench` on " + std::string(date) + ".\n";
  o += Fmt("# Machine: %s; %lld rank(s) x %d thread(s); %s.\n", r.cpu_model.c_str(),
           static_cast<long long>(r.ranks), r.threads, r.blas.c_str());
  o += "# A \"gpu\" here is one training rank with its threads; a \"node\" is the ranks "
       "that ran the\n"
       "# bench together. Each figure is the slowest rank's median while every rank "
       "measured at once.\n"
       "# Use: scaletrain plan --hardware THIS_FILE --cluster " +
       r.options.name + " --train-config CONFIG\n\n";
  return o;
}

// [gpu.NAME]: one rank's matrix rate, memory and memory bandwidth.
std::string GpuTable(const BenchResult& r) {
  const std::string& name = r.options.name;
  const BandwidthMeasurement& dram = r.bandwidth.at(0);
  std::string o = "[gpu." + name + "]\n";
  o += "description = " +
       Quote(Fmt("%s, %d thread(s) per rank (measured)", r.cpu_model.c_str(), r.threads)) + "\n";
  o += "bf16_tflops = 0.0   # not measured: the CPU trainer computes in fp32\n";
  o += Fmt(
      "fp32_tflops = %.6g   # best Sgemm measured (the model's shapes below included); squares:",
      BestGemmTflops(r));
  for (const auto& g : r.peak_gemms) o += Fmt(" %s %.4g", g.what.c_str(), g.Tflops());
  o += " TFLOP/s\n";
  o += Fmt("hbm_gib = %.4g   # physical memory / ranks\n", r.memory_gib_per_rank);
  o +=
      Fmt("hbm_tbps = %.6g   # element-wise kernel (residual add: read 2, write 1) on %lld MiB "
          "arrays: %.4g GB/s\n",
          dram.Gbps() / 1000.0, static_cast<long long>(dram.bytes_per_array >> 20), dram.Gbps());
  o += "tdp_w = 0.0   # not measured (energy figures will read 0)\n";
  o +=
      "matmul_efficiency = 1.0   # fp32_tflops is itself an achieved rate (as MAMF is for a GPU)\n";
  o += "hbm_efficiency = 1.0   # hbm_tbps is itself an achieved rate\n";
  o += "attention_efficiency = 1.0   # unused by the cpu stack (no FlashAttention)\n";
  o += "sm_count = 0   # no tile/wave quantization on a CPU\n";
  o += "reference_cluster = " + Quote(name) + "\n";
  return o;
}

// measured_gemms: a row per model matmul shape; empty without a model.
std::string MeasuredGemmsToml(const BenchResult& r) {
  if (r.model_gemms.empty()) return "";
  // Forward and backward entries alternate, shape by shape.
  std::string o =
      "# The model's matmuls through the trainer's kernels (MatmulForward / MatmulBackward, bias\n"
      "# included): [M tokens, N out, K in, forward TFLOP/s, backward TFLOP/s]; "
      "the planner uses a\n"
      "# row where a GEMM it charges has exactly this shape.\n";
  o += "measured_gemms = [\n";
  for (size_t i = 0; i + 1 < r.model_gemms.size(); i += 2) {
    const auto& f = r.model_gemms[i];
    const auto& b = r.model_gemms[i + 1];
    o += Fmt("  [%lld, %lld, %lld, %.6g, %.6g],   # %s\n", static_cast<long long>(f.m),
             static_cast<long long>(f.n), static_cast<long long>(f.k), f.Tflops(), b.Tflops(),
             f.what.substr(0, f.what.rfind(' ')).c_str());
  }
  o += "]\n";
  return o;
}

// measured_model_step: a micro-batch through the whole model at one rank.
std::string MeasuredModelStepToml(const BenchResult& r) {
  const BenchResult::ModelStep& s = r.model_step;
  if (s.layers == 0) return "";
  return "# A micro-batch through the whole model (GPT::Forward, GPT::Backward) at one rank, every\n"
         "# rank at once: [micro-batch, seq, hidden, heads, layers, vocab, forward s, backward s]. The\n"
         "# planner scales its kernel-by-kernel compute for this model by measured / predicted.\n" +
         Fmt("measured_model_step = [[%lld, %lld, %lld, %lld, %lld, %lld, %.6g, %.6g]]\n",
             static_cast<long long>(s.batch), static_cast<long long>(s.seq), static_cast<long long>(s.hidden),
             static_cast<long long>(s.heads), static_cast<long long>(s.layers), static_cast<long long>(s.vocab),
             s.fwd_s, s.bwd_s);
}

// measured_attention: the attention kernel's forward and backward times.
std::string MeasuredAttentionToml(const BenchResult& r) {
  std::string o;
  for (const auto& k : r.model_kernels) {
    if (k.what != "attention forward") continue;
    const auto& bwd =
        *std::find_if(r.model_kernels.begin(), r.model_kernels.end(),
                      [](const KernelMeasurement& x) { return x.what == "attention backward"; });
    o += "# The attention kernel (scores, causal softmax, weighted sum) at the model's shape:\n"
         "# [micro-batch, seq, hidden, heads, forward s, backward s].\n";
    o += Fmt("measured_attention = [[%lld, %lld, %lld, %lld, %.6g, %.6g]]\n",
             static_cast<long long>(r.attention_shape[0]),
             static_cast<long long>(r.attention_shape[1]),
             static_cast<long long>(r.attention_shape[2]),
             static_cast<long long>(r.attention_shape[3]), k.seconds, bwd.seconds);
  }
  return o;
}

// Comments on what was measured but is not a figure the planner reads.
std::string UnusedMeasurementsComments(const BenchResult& r) {
  std::string o;
  if (r.bandwidth.size() > 1) {
    o +=
        Fmt("# Not used by the planner: the same kernel on %lld KiB arrays (in cache) "
            "reaches %.4g GB/s.\n",
            static_cast<long long>(r.bandwidth[1].bytes_per_array >> 10), r.bandwidth[1].Gbps());
  }
  if (!r.model_kernels.empty()) {
    o +=
        "# Not used by the planner: the model's element-wise kernels (least bytes moved / time):\n";
    for (const auto& k : r.model_kernels) {
      if (k.what.rfind("attention", 0) == 0) continue;
      o += Fmt("#   %-24s %.4g ms  %.4g GB/s\n", k.what.c_str(), k.seconds * 1e3, k.Gbps());
    }
  }
  return o;
}

// [node.NAME]: the ranks that ran the bench and the all-reduce among them;
// with one rank, the memory bandwidth stands in.
std::string NodeTable(const BenchResult& r) {
  const BandwidthMeasurement& dram = r.bandwidth.at(0);
  std::string o = "\n[node." + r.options.name + "]\n";
  o += r.hosts > 1 ? Fmt("gpus_per_node = %lld   # ranks per host (%lld hosts)\n",
                        static_cast<long long>(r.ranks_per_host), static_cast<long long>(r.hosts))
                   : Fmt("gpus_per_node = %lld   # ranks that ran the bench\n", static_cast<long long>(r.ranks));
  if (!r.allreduce.empty()) {
    const AllreduceMeasurement& big = r.allreduce.back();
    const AllreduceMeasurement& small = r.allreduce.front();
    o += "intra_kind = \"mpi\"\n";
    o += Fmt(
        "intra_gbps = %.6g   # all-reduce bus bandwidth at %lld MiB (2(n-1)/n x bytes / time)\n",
        big.bus_gbps, static_cast<long long>(big.bytes >> 20));
    o += "intra_efficiency = 1.0   # intra_gbps is itself achieved\n";
    o += Fmt("intra_latency_us = %.4g   # one way: half the median round trip of an 8-byte message between two "
             "ranks of a host (%.4g us); an 8-byte all-reduce took %.4g us\n",
             r.host_round_trip_s / 2 * 1e6, r.host_round_trip_s * 1e6, small.seconds * 1e6);
    o += "# all-reduce (bytes: us, bus GB/s):";
    for (const auto& a : r.allreduce) {
      o += Fmt(" %lld: %.4g, %.3g;", static_cast<long long>(a.bytes), a.seconds * 1e6, a.bus_gbps);
    }
    o += "\n";
  } else {
    o += "intra_kind = \"none\"\n";
    o += Fmt(r.hosts > 1 ? "intra_gbps = %.6g   # one rank per host: no collective inside a host measured; the "
                           "memory bandwidth stands in.\n"
                         : "intra_gbps = %.6g   # one rank: no collective measured; the memory bandwidth stands in.\n"
                           "# Plans with more than one device need a profile from `mpirun -np N scaletrain bench`.\n",
             dram.Gbps());
    o += "intra_efficiency = 1.0\nintra_latency_us = 0.0\n";
  }
  o += "max_power_kw = 0.0   # not measured\n";
  return o;
}

// [fabric.NAME]: measured across hosts: one NIC per host carrying the
// cross-host all-reduces of all the host's ranks at once.
std::string MeasuredFabricTable(const BenchResult& r) {
  const AllreduceMeasurement& big = r.cross_allreduce.back();
  const AllreduceMeasurement& small = r.cross_allreduce.front();
  const double h = static_cast<double>(r.hosts), per_host = big.bus_gbps * static_cast<double>(r.ranks_per_host);
  std::string o = "\n[fabric." + r.options.name + "]\n";
  o += "kind = \"measured\"\n";
  o += "nics_per_node = 1\n";
  o += Fmt("nic_gbit = %.6g   # %lld ranks per host x all-reduce bus bandwidth across %lld hosts at %lld MiB "
           "(%.4g GB/s each, all positions at once) x 8\n",
           per_host * 8.0, static_cast<long long>(r.ranks_per_host), static_cast<long long>(r.hosts),
           static_cast<long long>(big.bytes >> 20), big.bus_gbps);
  o += "efficiency = 1.0   # nic_gbit is itself achieved\n";
  if (r.p2p_gbps > 0) {
    o += Fmt("p2p_gbit = %.6g   # one rank's %lld-byte message (the model's pipeline message) to the next host, "
             "every position at once (%.4g GB/s)\n",
             r.p2p_gbps * 8.0, static_cast<long long>(r.p2p_bytes), r.p2p_gbps);
  }
  o += Fmt("latency_us = %.4g   # one way: half the median round trip of an 8-byte message to the next host "
           "(%.4g us, every pair at once); an 8-byte all-reduce across %.0f hosts took %.4g us\n",
           r.cross_round_trip_s / 2 * 1e6, r.cross_round_trip_s * 1e6, h, small.seconds * 1e6);
  o += "# all-reduce across hosts (bytes: us, bus GB/s):";
  for (const auto& a : r.cross_allreduce) {
    o += Fmt(" %lld: %.4g, %.3g;", static_cast<long long>(a.bytes), a.seconds * 1e6, a.bus_gbps);
  }
  return o + "\n";
}

// [fabric.NAME]: not measured (one host); it repeats the node's figures.
std::string FabricTable(const BenchResult& r) {
  if (!r.cross_allreduce.empty()) return MeasuredFabricTable(r);
  std::string o = "\n[fabric." + r.options.name + "]\n";
  o += "# Not measured: the bench ran on one node. This repeats the node's figures, "
       "so plans that span\n"
       "# more than gpus_per_node devices are not predictions.\n";
  o += "kind = \"unmeasured\"\n";
  const double intra = r.allreduce.empty() ? r.bandwidth.at(0).Gbps() : r.allreduce.back().bus_gbps;
  o += Fmt("nics_per_node = %lld\nnic_gbit = %.6g\nefficiency = 1.0\n",
           static_cast<long long>(r.ranks), intra * 8.0);
  return o;
}

std::string ClusterTable(const std::string& name) {
  std::string o = "\n[cluster." + name + "]\n";
  o += "gpu = " + Quote(name) + "\nnode = " + Quote(name) + "\nfabric = " + Quote(name) + "\n";
  o += "usd_per_gpu_hour = 0.0\npue = 1.0\n";
  return o;
}

}  // namespace

std::string ProfileToToml(const BenchResult& r) {
  return ProfileIntro(r) + GpuTable(r) + MeasuredGemmsToml(r) + MeasuredAttentionToml(r) + MeasuredModelStepToml(r) +
         UnusedMeasurementsComments(r) + NodeTable(r) + FabricTable(r) +
         ClusterTable(r.options.name);
}

std::string BenchToText(const BenchResult& r) {
  std::string o = Fmt("%s; %lld rank(s) x %d thread(s); %s\n", r.cpu_model.c_str(), static_cast<long long>(r.ranks),
                      r.threads, r.blas.c_str());
  o += "matmul (M x N x K: TFLOP/s, slowest rank, median)\n";
  for (const auto* list : {&r.peak_gemms, &r.model_gemms}) {
    for (const auto& g : *list) {
      o += Fmt("  %-28s %6lld x %6lld x %6lld  %.4g TFLOP/s  (%.3g ms)\n", g.what.c_str(), static_cast<long long>(g.m),
               static_cast<long long>(g.n), static_cast<long long>(g.k), g.Tflops(), g.seconds * 1e3);
    }
  }
  if (!r.model_kernels.empty()) {
    o += "the model's other kernels (least bytes moved / time)\n";
    for (const auto& k : r.model_kernels) {
      o += Fmt("  %-28s %8.3f ms  %.4g GB/s\n", k.what.c_str(), k.seconds * 1e3, k.Gbps());
    }
  }
  o += "element-wise (residual add)\n";
  for (const auto& b : r.bandwidth) {
    o += Fmt("  %8lld KiB arrays  %.4g GB/s\n", static_cast<long long>(b.bytes_per_array >> 10), b.Gbps());
  }
  const auto list = [&o](const char* what, const std::vector<AllreduceMeasurement>& all) {
    if (all.empty()) return;
    o += what;
    for (const auto& a : all) {
      o += Fmt("  %10lld bytes  %9.1f us  bus %.3g GB/s\n", static_cast<long long>(a.bytes), a.seconds * 1e6, a.bus_gbps);
    }
  };
  list(r.hosts > 1 ? "all-reduce inside a host\n" : "all-reduce over the world\n", r.allreduce);
  list("all-reduce across hosts (every position at once)\n", r.cross_allreduce);
  if (r.host_round_trip_s > 0) o += Fmt("8-byte round trip inside a host: %.1f us\n", r.host_round_trip_s * 1e6);
  if (r.cross_round_trip_s > 0) o += Fmt("8-byte round trip to the next host: %.1f us\n", r.cross_round_trip_s * 1e6);
  return o;
}

}  // namespace scaletrain::hwprofile
