// 16-bit floating-point storage: bfloat16 (the top half of a float32: the
// same exponent range, 8 bits of mantissa) and IEEE binary16 ("half": 5
// exponent bits, largest finite value 65504). Conversions from float round to
// nearest, ties to even; NaN stays NaN. The data-parallel gradient reduction
// sends gradients in these (parallel.dp_compress), and the communicator sums
// them (comm/communicator.h, CommDType::kBF16 and kF16).
#pragma once

#include <cstdint>

namespace scaletrain {

// Distinct element types, so templates (CommDTypeOf) can tell them apart.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

bf16 ToBf16(float x);
float FromBf16(bf16 x);
f16 ToF16(float x);  // beyond +-65504 rounds to +-inf
float FromF16(f16 x);

// Bulk forms (n elements); `scale` multiplies before converting to f16 and
// divides after converting back.
void ToBf16(const float* src, bf16* dst, int64_t n);
void FromBf16(const bf16* src, float* dst, int64_t n);
void ToF16(const float* src, f16* dst, int64_t n, float scale);
void FromF16(const f16* src, float* dst, int64_t n, float scale);

}  // namespace scaletrain
