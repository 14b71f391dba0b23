// A non-owning view of a contiguous tensor: pointer, dtype, shape. Layers hold
// views into the flat parameter/gradient/optimizer buffers (DESIGN principle 2).
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace scaletrain {

using Shape = std::vector<int64_t>;

inline int64_t NumElements(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<int64_t>());
}
std::string ShapeToString(const Shape& s);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;

  int64_t numel() const { return NumElements(shape); }
  size_t size_bytes() const { return static_cast<size_t>(numel()) * DTypeSizeBytes(dtype); }
  float* f32() const { return static_cast<float*>(data); }
};

}  // namespace scaletrain
