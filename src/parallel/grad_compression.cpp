#include "parallel/grad_compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"

namespace scaletrain {

namespace {

// fp16's scale puts the largest reduced magnitude here: 2^12, 16x under 65504.
constexpr float kF16Target = 4096.0f;

float F16ScaleFor(const float* sum, int64_t count) {
  float m = 0;
  for (int64_t i = 0; i < count; ++i) m = std::fmax(m, std::fabs(sum[i]));
  if (!(m > 0) || !std::isfinite(m)) return 1.0f;
  const int k = static_cast<int>(std::floor(std::log2(kF16Target / m)));
  return std::ldexp(1.0f, std::max(-100, std::min(100, k)));
}

bool AllFinite(const float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}

}  // namespace

GradCompressor::GradCompressor(DpCompression c, int64_t padded_numel) : c_(c) {
  if (c == DpCompression::kBf16 || c == DpCompression::kFp16) {
    half_ = Buffer(static_cast<size_t>(padded_numel) * 2);
  } else if (c == DpCompression::kSign) {
    residual_ = Buffer(static_cast<size_t>(padded_numel) * sizeof(float));
  }
}

GradCompressor::Region& GradCompressor::RegionAt(int64_t offset, int64_t count, int64_t group_size) {
  Region& r = regions_[offset];
  if (c_ == DpCompression::kSign && r.send.size_bytes() == 0) {
    const size_t bytes = static_cast<size_t>(SignMessageBytes(count));
    r.send = Buffer(bytes);
    r.recv = Buffer(bytes * static_cast<size_t>(group_size));
  }
  return r;
}

CommHandle GradCompressor::Start(Communicator* group, float* buf, int64_t count, int64_t offset) {
  switch (c_) {
    case DpCompression::kNone:
      return group->IAllreduce(buf, count, ReduceOp::kSum);
    case DpCompression::kBf16: {
      bf16* h = static_cast<bf16*>(half_.data()) + offset;
      ToBf16(buf, h, count);
      return group->IAllreduce(h, count, ReduceOp::kSum);
    }
    case DpCompression::kFp16: {
      const Region& r = regions_[offset];
      if (r.scale == 0) return group->IAllreduce(buf, count, ReduceOp::kSum);  // sets the scale
      f16* h = static_cast<f16*>(half_.data()) + offset;
      ToF16(buf, h, count, r.scale);
      return group->IAllreduce(h, count, ReduceOp::kSum);
    }
    case DpCompression::kSign:
      return StartSign(group, RegionAt(offset, count, group->size()), buf, count, offset);
  }
  return CommHandle();
}

Status GradCompressor::Finish(Communicator* group, float* buf, int64_t count, int64_t offset) {
  switch (c_) {
    case DpCompression::kNone:
      return Status::Ok();
    case DpCompression::kBf16:
      FromBf16(static_cast<const bf16*>(half_.data()) + offset, buf, count);
      return Status::Ok();
    case DpCompression::kFp16: {
      Region& r = regions_.at(offset);
      if (r.scale != 0) {
        // buf still holds this rank's fp32 gradients until the sum is accepted.
        const f16* h = static_cast<const f16*>(half_.data()) + offset;
        bool finite = true;
        for (int64_t i = 0; i < count && finite; ++i) finite = std::isfinite(FromF16(h[i]));
        if (finite) {
          FromF16(h, buf, count, r.scale);
          r.scale = F16ScaleFor(buf, count);
          return Status::Ok();
        }
        // Every rank sees the same sum, so every rank comes here.
        ST_RETURN_IF_ERROR(group->Allreduce(buf, count, ReduceOp::kSum));
      }
      ++fallbacks_;
      r.scale = F16ScaleFor(buf, count);
      return AllFinite(buf, count) ? Status::Ok()
                                   : Internal("the fp32 gradient sum is not finite (the loss diverged)");
    }
    case DpCompression::kSign:
      FinishSign(group, regions_.at(offset), buf, count);
      return Status::Ok();
  }
  return Status::Ok();
}

CommHandle GradCompressor::StartSign(Communicator* group, Region& r, const float* buf, int64_t count,
                                     int64_t offset) {
  float* e = residual_.f32() + offset;
  uint32_t* bits = static_cast<uint32_t*>(r.send.data());
  float* scales = reinterpret_cast<float*>(bits + (count + 31) / 32);
  std::memset(bits, 0, static_cast<size_t>((count + 31) / 32) * 4);
  for (int64_t b0 = 0; b0 < count; b0 += kSignBlock) {
    const int64_t b1 = std::min(count, b0 + kSignBlock);
    // p = g + e, kept in e for now; its mean magnitude is the block's scale.
    double l1 = 0;
    for (int64_t i = b0; i < b1; ++i) {
      e[i] += buf[i];
      l1 += std::fabs(e[i]);
    }
    const float scale = static_cast<float>(l1 / static_cast<double>(b1 - b0));
    scales[b0 / kSignBlock] = scale;
    // Send sign(p) x scale; keep p - sign(p) x scale.
    for (int64_t i = b0; i < b1; ++i) {
      const bool neg = e[i] < 0;
      if (neg) bits[i / 32] |= 1u << (i % 32);
      e[i] -= neg ? -scale : scale;
    }
  }
  const int64_t bytes = SignMessageBytes(count);
  return group->IAllgather(static_cast<const uint8_t*>(r.send.data()), static_cast<uint8_t*>(r.recv.data()),
                           bytes);
}

void GradCompressor::FinishSign(Communicator* group, const Region& r, float* buf, int64_t count) const {
  const int64_t bytes = SignMessageBytes(count);
  std::memset(buf, 0, static_cast<size_t>(count) * sizeof(float));
  for (int64_t k = 0; k < group->size(); ++k) {
    const uint8_t* msg = static_cast<const uint8_t*>(r.recv.data()) + k * bytes;
    const uint32_t* bits = reinterpret_cast<const uint32_t*>(msg);
    const float* scales = reinterpret_cast<const float*>(bits + (count + 31) / 32);
    for (int64_t i = 0; i < count; ++i) {
      const float s = scales[i / kSignBlock];
      buf[i] += (bits[i / 32] >> (i % 32)) & 1u ? -s : s;
    }
  }
}

}  // namespace scaletrain
