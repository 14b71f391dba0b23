// Deterministic random numbers. Two kinds:
//  - Rng: a stream (xoshiro256**), whose 4-word state is saved in checkpoints.
//  - HashU64: counter-based; the value for (seed, a, b) depends on nothing
//    else, which is how batch k's sequences stay the same at any layout
//    (DESIGN principle 4).
#pragma once

#include <array>
#include <cstdint>

namespace scaletrain {

uint64_t SplitMix64(uint64_t x);
// A well-mixed 64-bit value of (seed, a, b).
uint64_t HashU64(uint64_t seed, uint64_t a, uint64_t b);

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { Seed(seed); }
  void Seed(uint64_t seed);
  uint64_t NextU64();
  // Uniform in [0, 1), 24 random bits (float) or 53 (double).
  float Uniform();
  double UniformDouble();
  // Standard normal (Box-Muller; no cached spare, so the state alone defines the stream).
  float Normal();
  // Uniform integer in [0, n), unbiased.
  uint64_t Below(uint64_t n);

  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_{};
};

}  // namespace scaletrain
