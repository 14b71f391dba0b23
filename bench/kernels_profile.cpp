// Per-op timings of the CPU kernels at the two shapes the PyTorch comparison
// uses, and the per-step total they add up to (one forward + backward of a
// GPT-2 style model, llm.c's sequence of ops). Not part of the build; from
// the repository root, as one command:
//   g++ -std=c++20 -O3 -march=native -fopenmp -I src
//     -I /usr/include/x86_64-linux-gnu/openblas-openmp
//     bench/kernels_profile.cpp src/kernels/cpu/*.cpp
//     -L/usr/lib/x86_64-linux-gnu/openblas-openmp
//     -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -o /tmp/kprof
//   OMP_NUM_THREADS=1 /tmp/kprof [vocab_size]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"

namespace {

using scaletrain::cpu::AdamWUpdate;

struct Shape {
  const char* name;
  int64_t L, NH, C, T, B;
};

std::vector<float> Random(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

// With one thread, CPU time of the process: on a shared machine wall time
// mostly measures the neighbours. With more, wall time (CPU time would
// count threads spinning at barriers).
bool g_cpu_clock = false;

double NowMs() {
  if (!g_cpu_clock) {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

// Fastest of `reps` timed runs after one warm-up, in milliseconds.
double TimeMs(const std::function<void()>& f, int reps = 15) {
  f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const double t0 = NowMs();
    f();
    ms.push_back(NowMs() - t0);
  }
  return *std::min_element(ms.begin(), ms.end());
}

void Profile(const Shape& s, int64_t V) {
  namespace k = scaletrain::cpu;
  const int64_t N = s.B * s.T, C = s.C, Vp = (V + 127) / 128 * 128;
  std::printf("\n%s: L=%lld NH=%lld C=%lld T=%lld B=%lld V=%lld (Vp=%lld), %d threads\n", s.name,
              (long long)s.L, (long long)s.NH, (long long)C, (long long)s.T, (long long)s.B,
              (long long)V, (long long)Vp, k::NumThreads());
  auto x = Random(N * C, 1), y = Random(N * C, 2), dx = Random(N * C, 3);
  auto w = Random(4 * C * C, 4, 0.05f), dw = Random(4 * C * C, 5), b = Random(4 * C, 6);
  auto db = Random(4 * C, 7), mean = Random(N, 8), rstd = Random(N, 9, 1.0f);
  auto qkv = Random(N * 3 * C, 10), dqkv = Random(N * 3 * C, 11);
  auto att = Random(s.B * s.NH * s.T * s.T, 12), datt = Random(s.B * s.NH * s.T * s.T, 13);
  auto h = Random(N * 4 * C, 14), dh = Random(N * 4 * C, 15), h2 = Random(N * 4 * C, 16);
  auto wte = Random(Vp * C, 17, 0.05f), dwte = Random(Vp * C, 18), wpe = Random(s.T * C, 19);
  auto dwpe = Random(s.T * C, 20), logits = Random(N * Vp, 21, 3.0f), losses = Random(N, 22);
  std::vector<int32_t> tokens(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) tokens[i] = static_cast<int32_t>((i * 7919) % V);
  const int64_t nparams = Vp * C + s.T * C + s.L * (12 * C * C + 13 * C) + 2 * C;
  auto p = Random(nparams, 23), g = Random(nparams, 24), m = Random(nparams, 25),
       v2 = Random(nparams, 26, 1.0f);
  for (float& e : v2) e = e * e;

  struct Row {
    std::string name;
    double ms;
    int64_t per_step;
  };
  std::vector<Row> rows;
  auto add = [&](const std::string& name, int64_t per_step, const std::function<void()>& f) {
    rows.push_back({name, TimeMs(f), per_step});
  };
  const int64_t L = s.L;
  add("encoder fwd", 1,
      [&] { k::EncoderForward(x.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, C); });
  add("layernorm fwd", 2 * L + 1, [&] {
    k::LayerNormForward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  });
  add("matmul qkv fwd", L,
      [&] { k::MatmulForward(qkv.data(), x.data(), w.data(), b.data(), N, C, 3 * C); });
  add("attention fwd", L,
      [&] { k::AttentionForward(y.data(), att.data(), qkv.data(), s.B, s.T, C, s.NH); });
  add("matmul proj fwd", L,
      [&] { k::MatmulForward(y.data(), x.data(), w.data(), b.data(), N, C, C); });
  add("residual fwd", 2 * L, [&] { k::ResidualForward(y.data(), x.data(), dx.data(), N * C); });
  add("matmul fc fwd", L,
      [&] { k::MatmulForward(h.data(), x.data(), w.data(), b.data(), N, C, 4 * C); });
  add("gelu fwd", L, [&] { k::GeluForward(h2.data(), h.data(), N * 4 * C); });
  add("matmul fcproj fwd", L,
      [&] { k::MatmulForward(y.data(), h2.data(), w.data(), b.data(), N, 4 * C, C); });
  add("matmul lm_head fwd", 1,
      [&] { k::MatmulForward(logits.data(), x.data(), wte.data(), nullptr, N, C, Vp); });
  add("crossentropy fwd", 1, [&] {
    k::CrossEntropyForward(losses.data(), logits.data(), logits.data(), tokens.data(), N, V, Vp);
  });
  add("crossentropy bwd", 1, [&] {
    k::CrossEntropyBackward(logits.data(), logits.data(), tokens.data(), 1.0f / N, N, V, Vp);
  });
  add("matmul lm_head bwd", 1, [&] {
    k::MatmulBackward(dx.data(), dwte.data(), nullptr, logits.data(), x.data(), wte.data(), N, C,
                      Vp);
  });
  add("layernorm bwd", 2 * L + 1, [&] {
    k::LayerNormBackward(dx.data(), dw.data(), db.data(), y.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), N, C);
  });
  add("matmul fcproj bwd", L, [&] {
    k::MatmulBackward(dh.data(), dw.data(), db.data(), y.data(), h2.data(), w.data(), N, 4 * C, C);
  });
  add("gelu bwd", L, [&] { k::GeluBackward(dh.data(), h.data(), h2.data(), N * 4 * C); });
  add("matmul fc bwd", L, [&] {
    k::MatmulBackward(dx.data(), dw.data(), db.data(), dh.data(), x.data(), w.data(), N, C, 4 * C);
  });
  add("residual bwd", 2 * L, [&] { k::ResidualBackward(dx.data(), y.data(), x.data(), N * C); });
  add("matmul proj bwd", L, [&] {
    k::MatmulBackward(dx.data(), dw.data(), db.data(), y.data(), x.data(), w.data(), N, C, C);
  });
  add("attention bwd", L, [&] {
    k::AttentionBackward(dqkv.data(), datt.data(), y.data(), qkv.data(), att.data(), s.B, s.T, C,
                         s.NH);
  });
  add("matmul qkv bwd", L, [&] {
    k::MatmulBackward(dx.data(), dw.data(), db.data(), dqkv.data(), x.data(), w.data(), N, C,
                      3 * C);
  });
  add("encoder bwd", 1,
      [&] { k::EncoderBackward(dwte.data(), dwpe.data(), dx.data(), tokens.data(), s.B, s.T, C); });
  add("sumsquares", 1, [&] {
    volatile double r = k::SumSquares(g.data(), nparams);
    (void)r;
  });
  add("adamw", 1, [&] {
    AdamWUpdate(p.data(), g.data(), m.data(), v2.data(), nparams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f,
                10, 1.0f);
  });

  double total = 0.0;
  for (const Row& r : rows) total += r.ms * static_cast<double>(r.per_step);
  std::printf("%-22s %10s %6s %10s %6s\n", "op", "ms/call", "calls", "ms/step", "share");
  for (const Row& r : rows) {
    const double step = r.ms * static_cast<double>(r.per_step);
    std::printf("%-22s %10.3f %6lld %10.2f %5.1f%%\n", r.name.c_str(), r.ms, (long long)r.per_step,
                step, 100.0 * step / total);
  }
  std::printf("%-22s %10s %6s %10.2f\n", "total", "", "", total);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t V = argc > 1 ? std::atoll(argv[1]) : 65;
  g_cpu_clock = scaletrain::cpu::NumThreads() == 1;
  std::printf("%s; timing by %s\n", scaletrain::cpu::BlasInfo(),
              g_cpu_clock ? "process CPU time" : "wall clock");
  Profile({"small", 4, 4, 128, 128, 16}, V);
  Profile({"medium", 6, 6, 384, 256, 8}, V);
  return 0;
}
