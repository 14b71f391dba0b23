// The range of a prediction. A step time rests on figures measured
// elsewhere than on the run it predicts: a GEMM library's rate (another
// version of the library), the clock a GPU holds (another room, another
// power cap), a link's bus bandwidth (another topology, another message
// size). Each such input has a span its sources give (docs/planner.md, "The
// range"); the range is the step time with each input at either end of its
// span, one at a time, the effects combined as independent errors
// (root-sum-square). The spans are constants read from the sources, never
// fitted to a run.
#pragma once

#include <optional>
#include <utility>

#include "core/status.h"
#include "model/spec.h"
#include "plan/hardware.h"
#include "plan/layout.h"

namespace scaletrain::plan {

// How far an input may lie below and above the value the cost model takes,
// as fractions of that value.
struct Span {
  double down = 0, up = 0;
};

// The uncertain inputs of a prediction and the span of each.
struct Uncertainty {
  // The training software's version: every kernel rate (matmul, attention,
  // HBM-bound) together, as one release of a stack runs all its kernels
  // faster or slower than another.
  Span software;
  Span matmul;      // GpuSpec::matmul_efficiency (and fp8_matmul_efficiency)
  Span attention;   // GpuSpec::attention_efficiency
  Span hbm;         // GpuSpec::hbm_efficiency
  Span clock;       // GpuSpec::sustained_clock_ratio (under a power cap: the capped clock)
  Span intra_link;  // NodeSpec::intra_efficiency
  Span fabric;      // FabricSpec::efficiency
};

// The spans, each with its source in docs/planner.md ("The range").
// The stack's version: Megatron-LM 2022 ran the 2021 paper's tp 8 / pp 35 and
// tp 8 / pp 64 layouts on the same Selene at 180 and 177 TFLOP/s where 2021's
// ran 163 (+10.4%, +8.6%); a year of cuBLAS moved a large H100 bf16 GEMM
// from 742.7 to 792.1 TFLOP/s (+6.7%). A run's software may be a release
// older or newer than the factors': +-9.5%.
inline constexpr Span kStackVersionSpan{0.095, 0.095};
// A factor measured for the part: the spread of the measurements it comes
// from (a measured MAMF has none beyond the clock's and the version's).
// FlashAttention-2's rates the attention factor is read from: 190-200
// TFLOP/s on A100 (FA2 paper), forward 335 / backward 322 on H100 (FA3 paper).
inline constexpr Span kFlashAttentionSpan{0.04, 0.04};
// Streaming kernels reach 80-92% of peak HBM bandwidth; the catalog takes 85%.
inline constexpr Span kStreamSpan{0.059, 0.082};
// The clock held at the power limit: 40 soaked all-busy runs span 4.5% (half
// below the mean); a card not soaked hot read 8.1% higher (755 / 698.6), and
// the A100's boost is 8.0% above its clock under HPL.
inline constexpr Span kSustainedClockSpan{0.0225, 0.081};
// nccl-tests all-reduce bus bandwidth: DGX A100 230-240 GB/s of 300 (0.78
// taken), DGX H100 360-370 of 450 (0.80 taken).
inline constexpr Span kNvlinkBusSpan{0.017, 0.028};
// nccl-tests bus bandwidth across DGX A100 nodes: 180-190 GB/s of 200 (0.90 taken).
inline constexpr Span kInfinibandSpan{0.0, 0.056};
// Under a power cap the clock follows (cap - idle) / (tdp - idle) to the
// power 1/3 (PowerCapped); the same GA100 die at 250 W (A100 PCIe) against
// 400 W (SXM) kept 256.4 / 267.9 of its MAMF, a power of 0.0814 (the card's
// power is not stated: at 300 W it would be 0.134; the flatter is taken):
// the capped clock may be as high as that exponent gives.
inline constexpr double kCappedClockExponentLow = 0.0814;
// A factor the catalog marks assumed: anything the measured parts reach,
// half their span over its middle.
// Measured MAMF shares: 0.58 (MI300X) .. 0.859 (A100).
inline constexpr double kAssumedMatmulSpan = 0.194;
// Measured FlashAttention-2 shares: 0.335 (H100) .. 0.62 (A100).
inline constexpr double kAssumedAttentionSpan = 0.298;
// Measured sustained clock ratios: 0.838 (H200) .. 0.926 (A100).
inline constexpr double kAssumedClockSpan = 0.05;
// NCCL over TCP sockets (0.70 of line rate) .. InfiniBand's best (0.95).
inline constexpr double kAssumedLinkSpan = 0.152;

// The spans of the inputs a prediction on `c` rests on: the measured spans,
// the assumed ones for the figures its GPU, node or fabric marks assumed,
// and a capped clock's. No version span where the GPU's rates were measured
// on the software itself (a `scaletrain bench` profile's shapes or model step).
Uncertainty SourcedUncertainty(const ClusterSpec& c);

// `plan --kernel-uncertainty K --fabric-uncertainty F`: every kernel
// efficiency (matmul, attention, HBM) +-K, one input each, with no version
// span, and every link efficiency (in-node, fabric) +-F, in place of the
// sourced spans; each in [0, 1), else an error naming the flag.
struct UncertaintyOverride {
  std::optional<double> kernel, fabric;
};
Result<Uncertainty> UncertaintyFor(const ClusterSpec& c, const UncertaintyOverride& o);

// The layout's step time with each input of `u` at either end of its span,
// one at a time (efficiencies capped at 1), the slowdowns and speedups each
// combined as root-sum-square: {fastest, slowest}. Both are the prediction
// where every span is 0.
Result<std::pair<double, double>> StepTimeRange(const ModelSpec& spec, const ClusterSpec& cluster,
                                                const Software& sw, const Layout& l,
                                                const Uncertainty& u);

}  // namespace scaletrain::plan
