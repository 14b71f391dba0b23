// Where a CPU training step's time goes: every kernel of one GPT-2 step
// (forward, backward, grad norm, AdamW) called in the order GPT::Forward /
// GPT::Backward call them, each timed, summed per op over layers and steps.
// A benchmark aid (perf is not available everywhere), not a test.
//
// Build by hand against a Release build's kernel library (the default oneDNN
// build; an -DSCALETRAIN_BLAS=openblas build needs no -ldnnl), one command:
//   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build --target st_kernels
//   g++ -O3 -march=native -std=c++20 -fopenmp -Isrc bench/profile_ops.cpp
//       build/src/libst_kernels.a build/src/libst_core.a
//       -L/usr/lib/x86_64-linux-gnu/openblas-openmp
//       -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl
//       -o build/profile_ops
// Run: build/profile_ops n_layer n_head n_embd block_size batch threads steps
//   e.g. build/profile_ops 6 6 384 256 8 2 5
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/ops.h"

namespace cpu = scaletrain::cpu;
using Clock = std::chrono::steady_clock;

namespace {

struct OpStat {
  double s = 0.0;
  double flops = 0.0;
  int64_t calls = 0;
};

std::map<std::string, OpStat> g_stats;
bool g_record = false;

template <typename F>
void Timed(const std::string& name, double flops, F&& f) {
  const auto t0 = Clock::now();
  f();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (g_record) {
    OpStat& st = g_stats[name];
    st.s += s;
    st.flops += flops;
    st.calls++;
  }
}

std::vector<float> Randn(int64_t n, float std, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s n_layer n_head n_embd block_size batch threads steps\n", argv[0]);
    return 2;
  }
  const int64_t L = std::atol(argv[1]), NH = std::atol(argv[2]), C = std::atol(argv[3]);
  const int64_t T = std::atol(argv[4]), B = std::atol(argv[5]);
  const int threads = std::atoi(argv[6]);
  const int steps = std::atoi(argv[7]);
  const int64_t V = 65, Vp = 65, F = 4 * C, N = B * T;
  cpu::SetNumThreads(threads);

  std::mt19937 rng(1);
  // Parameters (one layer set per block) and their gradients.
  std::vector<float> wte = Randn(Vp * C, 0.02f, rng), wpe = Randn(T * C, 0.02f, rng);
  std::vector<float> dwte(Vp * C), dwpe(T * C);
  struct Layer {
    std::vector<float> ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcpw, fcpb;
    std::vector<float> g[12];
    std::vector<float> ln1, ln1m, ln1r, qkv, atty, att, attproj, res2, ln2, ln2m, ln2r, fch, fchg,
        fcproj, res3;
  };
  std::vector<Layer> layers(L);
  int64_t nparams = 2 * Vp * C + T * C;
  for (auto& l : layers) {
    l.ln1w.assign(C, 1.0f); l.ln1b.assign(C, 0.0f); l.ln2w.assign(C, 1.0f); l.ln2b.assign(C, 0.0f);
    l.qkvw = Randn(3 * C * C, 0.02f, rng); l.qkvb.assign(3 * C, 0.0f);
    l.projw = Randn(C * C, 0.02f, rng); l.projb.assign(C, 0.0f);
    l.fcw = Randn(F * C, 0.02f, rng); l.fcb.assign(F, 0.0f);
    l.fcpw = Randn(C * F, 0.02f, rng); l.fcpb.assign(C, 0.0f);
    const std::vector<float>* p[12] = {&l.ln1w, &l.ln1b, &l.qkvw, &l.qkvb, &l.projw, &l.projb,
                                       &l.ln2w, &l.ln2b, &l.fcw, &l.fcb, &l.fcpw, &l.fcpb};
    for (int i = 0; i < 12; ++i) {
      l.g[i].assign(p[i]->size(), 0.0f);
      nparams += static_cast<int64_t>(p[i]->size());
    }
    l.ln1.resize(N * C); l.ln1m.resize(N); l.ln1r.resize(N); l.qkv.resize(N * 3 * C);
    l.atty.resize(N * C); l.att.resize(B * NH * T * T); l.attproj.resize(N * C); l.res2.resize(N * C);
    l.ln2.resize(N * C); l.ln2m.resize(N); l.ln2r.resize(N); l.fch.resize(N * F); l.fchg.resize(N * F);
    l.fcproj.resize(N * C); l.res3.resize(N * C);
  }
  std::vector<float> lnfw(C, 1.0f), lnfb(C, 0.0f), dlnfw(C), dlnfb(C);
  std::vector<float> encoded(N * C), lnf(N * C), lnfm(N), lnfr(N), logits(N * Vp), probs(N * Vp),
      losses(N);
  std::vector<float> dres(N * C), dln(N * C), dqkv(N * 3 * C), datty(N * C), datt(B * NH * T * T),
      dfch(N * F), dfchg(N * F);
  // The optimizer's view: one flat buffer of the same size as all parameters.
  std::vector<float> flat_p = Randn(nparams, 0.02f, rng), flat_g = Randn(nparams, 1e-3f, rng),
                     flat_m(nparams), flat_v(nparams);
  std::vector<int32_t> tokens(N), targets(N);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % V);
    targets[i] = static_cast<int32_t>(rng() % V);
  }

  auto mm = [](int64_t n, int64_t k, int64_t m) { return 2.0 * n * k * m; };
  const double att_flops = 2.0 * B * NH * T * T * (C / NH);  // QK^T + AV (causal: half used)
  auto zero = [](std::vector<float>& v) { std::fill(v.begin(), v.end(), 0.0f); };

  double step_sum = 0.0;
  for (int step = 0; step < steps + 1; ++step) {
    g_record = step > 0;  // the first step warms caches and thread pools
    const auto s0 = Clock::now();
    // ---- forward
    Timed("encoder fwd", 0, [&] { cpu::EncoderForward(encoded.data(), tokens.data(), wte.data(), wpe.data(), B, T, C); });
    const float* res = encoded.data();
    for (auto& l : layers) {
      Timed("layernorm fwd", 0, [&] { cpu::LayerNormForward(l.ln1.data(), l.ln1m.data(), l.ln1r.data(), res, l.ln1w.data(), l.ln1b.data(), N, C); });
      Timed("matmul qkv fwd", mm(N, C, 3 * C), [&] { cpu::MatmulForward(l.qkv.data(), l.ln1.data(), l.qkvw.data(), l.qkvb.data(), N, C, 3 * C); });
      Timed("attention fwd", att_flops, [&] { cpu::AttentionForward(l.atty.data(), l.att.data(), l.qkv.data(), B, T, C, NH); });
      Timed("matmul attproj fwd", mm(N, C, C), [&] { cpu::MatmulForward(l.attproj.data(), l.atty.data(), l.projw.data(), l.projb.data(), N, C, C); });
      Timed("residual fwd", 0, [&] { cpu::ResidualForward(l.res2.data(), res, l.attproj.data(), N * C); });
      Timed("layernorm fwd", 0, [&] { cpu::LayerNormForward(l.ln2.data(), l.ln2m.data(), l.ln2r.data(), l.res2.data(), l.ln2w.data(), l.ln2b.data(), N, C); });
      Timed("matmul fc fwd", mm(N, C, F), [&] { cpu::MatmulForward(l.fch.data(), l.ln2.data(), l.fcw.data(), l.fcb.data(), N, C, F); });
      Timed("gelu fwd", 0, [&] { cpu::GeluForward(l.fchg.data(), l.fch.data(), N * F); });
      Timed("matmul fcproj fwd", mm(N, F, C), [&] { cpu::MatmulForward(l.fcproj.data(), l.fchg.data(), l.fcpw.data(), l.fcpb.data(), N, F, C); });
      Timed("residual fwd", 0, [&] { cpu::ResidualForward(l.res3.data(), l.res2.data(), l.fcproj.data(), N * C); });
      res = l.res3.data();
    }
    Timed("layernorm fwd", 0, [&] { cpu::LayerNormForward(lnf.data(), lnfm.data(), lnfr.data(), res, lnfw.data(), lnfb.data(), N, C); });
    Timed("matmul lmhead fwd", mm(N, C, Vp), [&] { cpu::MatmulForward(logits.data(), lnf.data(), wte.data(), nullptr, N, C, Vp); });
    Timed("crossentropy fwd", 0, [&] { cpu::CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp); });
    // ---- backward
    Timed("crossentropy bwd", 0, [&] { cpu::CrossEntropyBackward(probs.data(), probs.data(), targets.data(), 1.0f / N, N, V, Vp); });
    Timed("zero scratch", 0, [&] { zero(dln); });
    Timed("matmul lmhead bwd", 2 * mm(N, C, Vp), [&] { cpu::MatmulBackward(dln.data(), dwte.data(), nullptr, probs.data(), lnf.data(), wte.data(), N, C, Vp); });
    Timed("zero scratch", 0, [&] { zero(dres); });
    Timed("layernorm bwd", 0, [&] { cpu::LayerNormBackward(dres.data(), dlnfw.data(), dlnfb.data(), dln.data(), res, lnfw.data(), lnfm.data(), lnfr.data(), N, C); });
    for (int64_t li = L - 1; li >= 0; --li) {
      Layer& l = layers[li];
      const float* rin = li == 0 ? encoded.data() : layers[li - 1].res3.data();
      Timed("zero scratch", 0, [&] { zero(dfchg); });
      Timed("matmul fcproj bwd", 2 * mm(N, F, C), [&] { cpu::MatmulBackward(dfchg.data(), l.g[10].data(), l.g[11].data(), dres.data(), l.fchg.data(), l.fcpw.data(), N, F, C); });
      Timed("zero scratch", 0, [&] { zero(dfch); });
      Timed("gelu bwd", 0, [&] { cpu::GeluBackward(dfch.data(), l.fch.data(), dfchg.data(), N * F); });
      Timed("zero scratch", 0, [&] { zero(dln); });
      Timed("matmul fc bwd", 2 * mm(N, C, F), [&] { cpu::MatmulBackward(dln.data(), l.g[8].data(), l.g[9].data(), dfch.data(), l.ln2.data(), l.fcw.data(), N, C, F); });
      Timed("layernorm bwd", 0, [&] { cpu::LayerNormBackward(dres.data(), l.g[6].data(), l.g[7].data(), dln.data(), l.res2.data(), l.ln2w.data(), l.ln2m.data(), l.ln2r.data(), N, C); });
      Timed("zero scratch", 0, [&] { zero(datty); });
      Timed("matmul attproj bwd", 2 * mm(N, C, C), [&] { cpu::MatmulBackward(datty.data(), l.g[4].data(), l.g[5].data(), dres.data(), l.atty.data(), l.projw.data(), N, C, C); });
      Timed("zero scratch", 0, [&] { zero(dqkv); });
      Timed("attention bwd", 2 * att_flops, [&] { cpu::AttentionBackward(dqkv.data(), datt.data(), datty.data(), l.qkv.data(), l.att.data(), B, T, C, NH); });
      Timed("zero scratch", 0, [&] { zero(dln); });
      Timed("matmul qkv bwd", 2 * mm(N, C, 3 * C), [&] { cpu::MatmulBackward(dln.data(), l.g[2].data(), l.g[3].data(), dqkv.data(), l.ln1.data(), l.qkvw.data(), N, C, 3 * C); });
      Timed("layernorm bwd", 0, [&] { cpu::LayerNormBackward(dres.data(), l.g[0].data(), l.g[1].data(), dln.data(), rin, l.ln1w.data(), l.ln1m.data(), l.ln1r.data(), N, C); });
    }
    Timed("encoder bwd", 0, [&] { cpu::EncoderBackward(dwte.data(), dwpe.data(), dres.data(), tokens.data(), B, T, C); });
    // ---- optimizer
    Timed("grad norm", 0, [&] { volatile double n = cpu::SumSquares(flat_g.data(), nparams); (void)n; });
    Timed("adamw", 0, [&] { cpu::AdamWUpdate(flat_p.data(), flat_g.data(), flat_m.data(), flat_v.data(), nparams, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1, 1.0f); });
    Timed("zero grads", 0, [&] { zero(flat_g); });
    if (g_record) step_sum += std::chrono::duration<double>(Clock::now() - s0).count();
  }

  std::vector<std::pair<std::string, OpStat>> rows(g_stats.begin(), g_stats.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.s > b.second.s; });
  double total = 0.0;
  for (const auto& r : rows) total += r.second.s;
  std::printf("shape: %lld layers, %lld heads, %lld wide, ctx %lld, batch %lld; %d threads; %d steps timed\n",
              (long long)L, (long long)NH, (long long)C, (long long)T, (long long)B, cpu::NumThreads(), steps);
  std::printf("%s\n", cpu::BlasInfo());
  std::printf("step %.1f ms (%.0f tok/s); per step:\n", step_sum / steps * 1e3, N / (step_sum / steps));
  std::printf("%-22s %10s %7s %9s\n", "op", "ms/step", "share", "GFLOP/s");
  for (const auto& [name, st] : rows) {
    const double ms = st.s / steps * 1e3;
    if (st.flops > 0) {
      std::printf("%-22s %10.2f %6.1f%% %9.1f\n", name.c_str(), ms, 100.0 * st.s / total, st.flops / st.s / 1e9);
    } else {
      std::printf("%-22s %10.2f %6.1f%% %9s\n", name.c_str(), ms, 100.0 * st.s / total, "");
    }
  }
  return 0;
}
