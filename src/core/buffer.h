// An owning, 64-byte aligned, zero-initialised block of memory. Each rank's
// parameters, gradients and optimizer moments are one Buffer each; activations
// are carved out of one Buffer allocated before the first step (llm.c style).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace scaletrain {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t size_bytes) : size_bytes_(size_bytes) {
    if (size_bytes == 0) return;
    size_t rounded = (size_bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, rounded);
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_bytes_(std::exchange(o.size_bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_bytes_ = std::exchange(o.size_bytes_, 0);
    }
    return *this;
  }

  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  size_t size_bytes() const { return size_bytes_; }
  void Zero() {
    if (data_) std::memset(data_, 0, size_bytes_);
  }

 private:
  void* data_ = nullptr;
  size_t size_bytes_ = 0;
};

// Hands out consecutive 64-byte aligned float slices of one Buffer. Used to
// lay out activations: first a dry run counts the bytes, then the real run.
class FloatArena {
 public:
  explicit FloatArena(float* base = nullptr) : base_(base) {}
  float* Take(size_t n) {
    float* p = base_ ? base_ + used_ : nullptr;
    used_ += (n + 15) / 16 * 16;
    return p;
  }
  size_t used_floats() const { return used_; }

 private:
  float* base_;
  size_t used_ = 0;
};

}  // namespace scaletrain
