// A parallel layout as the planner sees it, the software stack it runs on,
// and the checks that say, for a bad layout, what to change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"
#include "parallel/schedule.h"
#include "plan/hardware.h"

namespace scaletrain::plan {

enum class Recompute { kNone, kSelective, kFull };
const char* RecomputeName(Recompute r);
Result<Recompute> RecomputeFromName(const std::string& name);

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1, vpp = 1;
  int64_t micro_batch = 1;
  int64_t global_batch = 1;   // sequences per optimizer step
  int zero = 0;               // 0..3
  Recompute recompute = Recompute::kNone;
  bool sp = false;            // sequence parallelism (with tp > 1)
  Precision precision = Precision::kBF16;
  bool gpipe = false;         // run the GPipe schedule instead of 1F1B

  int64_t num_gpus() const { return tp * pp * dp; }
  int64_t micro_batches() const { return global_batch / (dp * micro_batch); }
  ScheduleKind schedule() const {
    if (vpp > 1) return ScheduleKind::kInterleaved;
    return gpipe ? ScheduleKind::kGPipe : ScheduleKind::k1F1B;
  }
};

std::string LayoutToString(const Layout& l);

// The divisors of n, ascending (the candidate sizes of a layout axis).
std::vector<int64_t> Divisors(int64_t n);

// What the training software does beyond the layout. "modern" is the default
// (FlashAttention, gradient reduction overlapped with backward, no dropout);
// "legacy" is Megatron-LM of 2021 / Megatron-DeepSpeed of 2022 (a fused
// softmax kernel over the full s x s scores, attention and hidden dropout,
// gradient all-reduce after the backward pass, not overlapped).
struct Software {
  std::string name = "modern";
  bool flash_attention = true;
  bool dropout = false;
  bool overlap_dp = true;
  // Cross-entropy over the logits as PyTorch's fused log-softmax (true) or as
  // Megatron-LM 2021's vocab-parallel cross-entropy, one kernel per pass.
  bool fused_log_softmax = true;
  // Weight-gradient GEMMs accumulate straight into the fp32 gradient buffer
  // (Megatron's gradient-accumulation fusion, or FSDP's per-micro-batch
  // reduce-scatter) rather than a separate fp32 add per micro-batch
  // (Megatron-LM 2021's main_grad hook, DeepSpeed 2022's bf16 optimizer).
  bool fused_grad_accumulation = true;
};
Result<Software> SoftwareFromName(const std::string& name);

// Checks the layout against the model and the GPU count; each failure names
// the nearest valid values.
Status ValidateLayout(const ModelSpec& model, int64_t num_gpus, const Layout& l);

}  // namespace scaletrain::plan
