#include "core/rng.h"

#include <cmath>

namespace scaletrain {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashU64(uint64_t seed, uint64_t a, uint64_t b) {
  return SplitMix64(SplitMix64(SplitMix64(seed) ^ a) ^ b);
}

void Rng::Seed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : s_) {
    x = SplitMix64(x);
    w = x;
  }
}

static inline uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t Rng::NextU64() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

float Rng::Uniform() { return static_cast<float>(NextU64() >> 40) * (1.0f / 16777216.0f); }
double Rng::UniformDouble() { return static_cast<double>(NextU64() >> 11) * (1.0 / 9007199254740992.0); }

float Rng::Normal() {
  double u1 = UniformDouble();
  double u2 = UniformDouble();
  if (u1 < 1e-300) u1 = 1e-300;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

uint64_t Rng::Below(uint64_t n) {
  if (n <= 1) return 0;
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t r;
  do {
    r = NextU64();
  } while (r >= limit);
  return r % n;
}

}  // namespace scaletrain
