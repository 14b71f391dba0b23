// Compressed gradient sums for slow links (parallel.dp_compress; the wire
// formats and their byte counts are dp_layout.h's DpCompression). Data
// parallelism hands it a region of the flat gradient buffer (a bucket, or
// with the hierarchical reduce this rank's block of a bucket) and a group;
// it sends the region in the compressed form and writes the group's sum of
// the regions back as fp32.
//
//   bf16  convert, all-reduce in bf16 (each partial sum rounded), widen.
//   fp16  as bf16 with a scale: the region times 2^k before the cast, where
//         k puts the previous step's reduced maximum at 2^12 (a 16x margin
//         under fp16's 65504 for ranks whose gradients exceed the sum); every
//         rank computes it from the same reduced values, so they agree
//         without talking. A region's first reduction, and any whose sum
//         overflows, runs again in fp32 (the fp32 gradients are kept until
//         the sum is back), and sets the scale.
//   sign  each rank sends, for its region plus its error-feedback residual
//         p = g + e, the signs of p and per block of kSignBlock elements the
//         mean |p|; the residual keeps e = p - (what was sent). Every rank
//         all-gathers the messages and sums the decoded values in rank order,
//         so all ranks hold the same gradients. EF-SignSGD (Karimireddy,
//         Rebjock, Stich, Jaggi 2019, "Error Feedback Fixes SignSGD and other
//         Gradient Compression Schemes", Alg. 2), with the per-block scale of
//         Zheng, Huang, Kwok 2019 ("Communication-Efficient Distributed
//         Blockwise Momentum SGD with Error-Feedback").
//
// Regions recur step after step at the same offsets: their scratch buffers
// are allocated on first use and reused. The residual is not checkpointed: a
// resumed run starts it at zero.
#pragma once

#include <cstdint>
#include <map>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/status.h"
#include "parallel/dp_layout.h"

namespace scaletrain {

class GradCompressor {
 public:
  // `padded_numel`: the flat gradient buffer's elements (the offsets below
  // index it).
  GradCompressor(DpCompression c, int64_t padded_numel);

  DpCompression compression() const { return c_; }

  // Starts the sum over `group` of buf[0, count), the region at flat offset
  // `offset`. `buf` must not change until Finish.
  CommHandle Start(Communicator* group, float* buf, int64_t count, int64_t offset);
  // After Start's handle finished: writes the group's sum into buf.
  Status Finish(Communicator* group, float* buf, int64_t count, int64_t offset);

  // The fp16 regions redone in fp32 so far (first reductions and overflows).
  int64_t fp32_fallbacks() const { return fallbacks_; }

 private:
  struct Region {
    Buffer send, recv;  // sign: this rank's message, every rank's
    float scale = 0;    // fp16: 0 until a reduction has set it
  };
  // The sign region at `offset`, its message buffers allocated on first use.
  Region& RegionAt(int64_t offset, int64_t count, int64_t group_size);
  CommHandle StartSign(Communicator* group, Region& r, const float* buf, int64_t count, int64_t offset);
  void FinishSign(Communicator* group, const Region& r, float* buf, int64_t count) const;

  DpCompression c_;
  std::map<int64_t, Region> regions_;  // fp16 and sign only, by offset
  Buffer half_;      // bf16 / fp16: the 16-bit copy of every region, by offset
  Buffer residual_;  // sign: error feedback, by offset
  int64_t fallbacks_ = 0;
};

}  // namespace scaletrain
