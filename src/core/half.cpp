#include "core/half.h"

#include <cmath>
#include <cstring>

namespace scaletrain {

namespace {

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace

bf16 ToBf16(float x) {
  const uint32_t u = Bits(x);
  if (std::isnan(x)) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};  // stays a quiet NaN
  // Round to nearest even on the 16 bits dropped.
  const uint32_t rounded = u + 0x7FFF + ((u >> 16) & 1);
  return bf16{static_cast<uint16_t>(rounded >> 16)};
}

float FromBf16(bf16 x) { return FromBits(static_cast<uint32_t>(x.bits) << 16); }

f16 ToF16(float x) {
  const uint32_t u = Bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7FFFFFFF;
  if (abs > 0x7F800000) return f16{static_cast<uint16_t>(sign | 0x7E00)};  // NaN
  if (abs >= 0x477FF000) return f16{static_cast<uint16_t>(sign | 0x7C00)};  // rounds past 65504: inf
  if (abs < 0x38800000) {
    // Below the smallest normal half (2^-14): a subnormal, in units of 2^-24.
    // The float adds 0.5 in that unit's scale, so its hardware rounding (to
    // nearest even) does the work.
    const float scaled = FromBits(abs) + 0.5f;
    return f16{static_cast<uint16_t>(sign | static_cast<uint16_t>(Bits(scaled) - Bits(0.5f)))};
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits.
  const uint32_t mant_odd = (abs >> 13) & 1;
  const uint32_t r = abs + 0xC8000FFF + mant_odd;  // - (112 << 23) + 0xFFF
  return f16{static_cast<uint16_t>(sign | static_cast<uint16_t>(r >> 13))};
}

float FromF16(f16 x) {
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000) << 16;
  const uint32_t exp = (x.bits >> 10) & 0x1F, mant = x.bits & 0x3FF;
  if (exp == 0x1F) return FromBits(sign | 0x7F800000 | (mant << 13));  // inf, NaN
  if (exp == 0) {
    // Zero or subnormal: mant x 2^-24.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

void ToBf16(const float* src, bf16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ToBf16(src[i]);
}

void FromBf16(const bf16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FromBf16(src[i]);
}

void ToF16(const float* src, f16* dst, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ToF16(src[i] * scale);
}

void FromF16(const f16* src, float* dst, int64_t n, float scale) {
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i) dst[i] = FromF16(src[i]) * inv;
}

}  // namespace scaletrain
