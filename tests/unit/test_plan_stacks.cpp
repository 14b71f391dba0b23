// The software stacks as files (configs/stacks/*.toml, plan/stacks.h).
#include <gtest/gtest.h>

#include <fstream>

#include "plan/stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kRoot = ST_SOURCE_DIR;

StackCatalog Shipped() {
  StackCatalog c;
  const Status st = c.LoadDir(kRoot + "/configs/stacks");
  EXPECT_TRUE(st.ok()) << st.message();
  return c;
}

// Every field of two stacks, compared one by one so that a difference names it.
void ExpectSameStack(const Software& a, const Software& b) {
#define ST_SAME(field) EXPECT_EQ(a.field, b.field) << a.name << "." #field
  ST_SAME(name);
  ST_SAME(flash_attention);
  ST_SAME(attention_fwd_slowdown);
  ST_SAME(attention_bwd_slowdown);
  ST_SAME(dropout);
  ST_SAME(overlap_dp);
  ST_SAME(fused_log_softmax);
  ST_SAME(fused_grad_accumulation);
  ST_SAME(separate_optimizer_passes);
  ST_SAME(causal_block_rows);
  ST_SAME(pp_scatter_gather);
  ST_SAME(interleaved_schedule);
  ST_SAME(legacy_conventions);
  ST_SAME(pp_async_sends);
  ST_SAME(unfused_elementwise);
  ST_SAME(separate_projections);
  ST_SAME(attention_layout_copies);
  ST_SAME(tp_comm_overlap);
  ST_SAME(buckets);
  ST_SAME(nccl_collectives);
  ST_SAME(overlap_slowdown);
  ST_SAME(fully_sharded);
  ST_SAME(partial_recompute);
  ST_SAME(max_searched_zero);
  ST_SAME(fsdp_gathers_once_under_pp);
  ST_SAME(gather_copy_out);
  ST_SAME(fp8_dynamic_scaling);
  ST_SAME(selective_is_op);
  ST_SAME(launch_us);
  ST_SAME(framework_gib);
  ST_SAME(trainer_activation_buffer);
#undef ST_SAME
}

// TEMPORARY (removed with SoftwareFromName's table): the shipped files
// reproduce the C++ table exactly, every stack and every name it took.
TEST(PlanStacks, ShippedFilesEqualTheCppTable) {
  const StackCatalog c = Shipped();
  EXPECT_EQ(c.Names().size(), 8u);
  for (const char* name : {"modern", "modern-triton", "legacy", "megatron-deepspeed", "pytorch", "pytorch-compile",
                           "pytorch-fsdp1", "cpu", "megatron", "megatron-lm", "megatron-core", "mcore", "nemo",
                           "nemo-megatron", "transformer-engine", "megatron-2021", "megatron-lm-2021",
                           "megatron-2022", "megatron-lm-2022", "deepspeed-megatron", "deepspeed", "composer",
                           "llm-foundry", "mosaicml", "pytorch-eager", "pytorch-fsdp", "fsdp", "fsdp2", "torchtitan",
                           "eager", "fsdp1", "huggingface", "hugging-face", "hf", "accelerate", "torch-compile",
                           "torchtitan-compile", "compile", "inductor", "Megatron-LM", "NeMo", "Megatron_DeepSpeed",
                           "DeepSpeed", "megatron 2021", "NeMo Megatron (2022)", "Megatron-LM 2023", "Composer",
                           "FSDP1", "Hugging Face", "FSDP2", "NeMo 2.0", "Megatron-Core 0.8",
                           "FSDP2 + torch.compile", "torchtitan (compile)", "torch.compile", "HF Accelerate FSDP",
                           "MosaicML Composer", "DeepSpeed ZeRO-3", "fsdp 2", "PyTorch FSDP2 (eager)",
                           "Megatron-LM (2021)"}) {
    auto file = c.Find(name);
    auto cpp = SoftwareFromName(name);
    ASSERT_TRUE(cpp.ok()) << name;
    ASSERT_TRUE(file.ok()) << name << ": " << file.status().message();
    ExpectSameStack(*file, *cpp);
  }
}

}  // namespace
}  // namespace scaletrain::plan
