// The software stacks as files (configs/stacks/*.toml, plan/stacks.h): the
// shipped ones, a user's own built on one of them, and every way a file can
// be wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "plan/cost_model.h"
#include "plan/model_preset.h"
#include "plan/stacks.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kRoot = ST_SOURCE_DIR;

bool Has(const Status& st, const std::string& text) {
  return st.message().find(text) != std::string::npos;
}

// Writes a stack file NAME.toml with `text` to folder DIR (under the test's
// temporary folder); its path.
std::string WriteStack(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string folder = ::testing::TempDir() + "/" + dir;
  std::filesystem::create_directories(folder);
  const std::string path = folder + "/" + name + ".toml";
  std::ofstream(path) << text;
  return path;
}

// The shipped stacks and a user's file on top of them.
Status LoadWithUserFile(const std::string& name, const std::string& text, StackCatalog* c) {
  ST_RETURN_IF_ERROR(c->LoadDir(kRoot + "/configs/stacks"));
  return c->LoadFile(WriteStack("user-stacks", name, text));
}

// A stack built on another equals it but for the keys its file states:
// pytorch-compile is pytorch with fused element-wise ops, pytorch-fsdp1 is
// pytorch without FSDP2's copy-out.
TEST(PlanStacks, DerivedStackIsItsBaseButForWhatItStates) {
  const Software eager = *ShippedStack("pytorch");
  Software compiled = *ShippedStack("pytorch-compile"), fsdp1 = *ShippedStack("pytorch-fsdp1");
  EXPECT_EQ(compiled.name, "pytorch-compile");
  EXPECT_TRUE(eager.unfused_elementwise);
  EXPECT_FALSE(compiled.unfused_elementwise);
  EXPECT_TRUE(eager.gather_copy_out);
  EXPECT_FALSE(fsdp1.gather_copy_out);
  compiled.unfused_elementwise = fsdp1.unfused_elementwise;
  fsdp1.gather_copy_out = compiled.gather_copy_out;
  compiled.name = fsdp1.name;
  // Every other field the same: the same prediction.
  auto preset = LoadModel("llama3-8b", kRoot + "/configs");
  HardwareCatalog hw;
  ASSERT_TRUE(hw.LoadDir(kRoot + "/configs/hardware").ok());
  Layout l;
  l.dp = 8, l.micro_batch = 1, l.global_batch = 16, l.zero = 3;
  CostModel a(preset->spec, *hw.Cluster("dgx-h100"), compiled),
      b(preset->spec, *hw.Cluster("dgx-h100"), fsdp1);
  EXPECT_DOUBLE_EQ(a.Predict(l)->step_time_s, b.Predict(l)->step_time_s);
  EXPECT_EQ(ShippedStacks().Names().size(), 8u);
}

// docs/planner.md's worked example: a fork of Megatron-Core without TP
// overlap, in a file of four lines. It is `modern` in everything else: the
// same step without sequence parallelism (where the overlap does not apply),
// more exposed TP time with it.
TEST(PlanStacks, UserStackFileBuiltOnAShippedOne) {
  StackCatalog c;
  const Status st = LoadWithUserFile("my-megatron",
                                     "description = \"our Megatron-Core fork: no TP overlap\"\n"
                                     "aliases = [\"Our Megatron\"]\n"
                                     "base = \"modern\"\n"
                                     "tp_comm_overlap = false\n",
                                     &c);
  ASSERT_TRUE(st.ok()) << st.message();
  auto fork = c.Find("our_megatron");
  ASSERT_TRUE(fork.ok()) << fork.status().message();
  EXPECT_EQ(fork->name, "my-megatron");
  EXPECT_FALSE(fork->tp_comm_overlap);
  EXPECT_EQ(fork->max_searched_zero, 2);  // modern's
  auto preset = LoadModel("llama3-70b", kRoot + "/configs");
  HardwareCatalog hw;
  ASSERT_TRUE(hw.LoadDir(kRoot + "/configs/hardware").ok());
  const ClusterSpec cluster = *hw.Cluster("dgx-h100");
  CostModel mine(preset->spec, cluster, *fork), modern(preset->spec, cluster, *c.Find("modern"));
  Layout l;
  l.tp = 8, l.pp = 4, l.dp = 2, l.micro_batch = 1, l.global_batch = 64, l.zero = 1,
  l.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(mine.Predict(l)->step_time_s, modern.Predict(l)->step_time_s);
  l.sp = true;
  EXPECT_GT(mine.Predict(l)->time_s.tp_comm, 1.5 * modern.Predict(l)->time_s.tp_comm);
}

// Names as runs write them reach the stack their words name; a stack built
// on another wins over it; words naming two unrelated stacks, or none, are
// one error.
TEST(PlanStacks, NamesReadByTheirWords) {
  const StackCatalog& c = ShippedStacks();
  EXPECT_EQ(c.Find("FSDP2 + torch.compile")->name, "pytorch-compile");
  EXPECT_EQ(c.Find("HF Accelerate FSDP")->name, "pytorch-fsdp1");
  EXPECT_EQ(c.Find("NeMo Megatron (2022)")->name, "legacy");
  EXPECT_EQ(c.Find("Megatron-LM 2023")->name, "modern");
  EXPECT_EQ(c.Find("DeepSpeed ZeRO-3")->name, "megatron-deepspeed");
  const Status both = c.Find("NeMo on PyTorch").status();
  EXPECT_TRUE(Has(both,
                  "software stack 'NeMo on PyTorch' names several stacks: modern ('nemo'), pytorch "
                  "('pytorch')"))
      << both.message();
  const Status typo = c.Find("modren").status();
  EXPECT_TRUE(Has(typo, "unknown software stack 'modren'; did you mean 'modern'?"))
      << typo.message();
}

struct BadFile {
  const char* what;
  std::string text;
  std::string message;  // what the error must say
};

// Every way a stack file can be wrong: one error naming the file, the line,
// the key and what is valid.
TEST(PlanStacks, BadFilesAreOneErrorNamingFileLineAndFix) {
  const std::vector<BadFile> cases = {
      {"unknown key", "base = \"modern\"\ntp_overlap = false\n",
       ":2: unknown key 'tp_overlap'; valid keys: description, aliases, base, flash_attention"},
      {"wrong type", "base = \"modern\"\n\ndropout = \"yes\"\n",
       ":3: key 'dropout' must be true or false"},
      {"not a choice", "base = \"modern\"\nbuckets = \"huge\"\n",
       ":2: buckets = 'huge' is not one of its choices: fixed-25mib, megatron-core, whole-buffer, "
       "deepspeed"},
      {"out of range", "base = \"modern\"\nmax_searched_zero = 4\n",
       ":2: max_searched_zero = 4 must be in [0, 3] (a ZeRO stage)"},
      {"no base, a key missing", "description = \"x\"\nflash_attention = true\n",
       "missing required key 'dropout'; a stack file without `base` states every key; or add base "
       "= \"NAME\""},
      {"unknown base", "base = \"modrn\"\n",
       ":1: unknown base stack 'modrn'; did you mean 'modern'?"},
      {"alias taken", "base = \"modern\"\naliases = [\"FSDP\"]\n",
       ":2: alias 'FSDP' already names stack 'pytorch' (" + kRoot +
           "/configs/stacks/pytorch.toml)"},
      {"syntax", "base = \"modern\nx", ":1:"}};
  for (const BadFile& b : cases) {
    StackCatalog c;
    const Status st = LoadWithUserFile("mine", b.text, &c);
    ASSERT_FALSE(st.ok()) << b.what;
    EXPECT_TRUE(Has(st, "/mine.toml")) << b.what << ": " << st.message();
    EXPECT_TRUE(Has(st, b.message)) << b.what << ": " << st.message();
  }
}

// A stack defined twice, and bases that loop, are errors naming both files.
TEST(PlanStacks, DuplicateNamesAndLoopingBases) {
  StackCatalog c;
  const Status twice = LoadWithUserFile("modern", "base = \"legacy\"\n", &c);
  EXPECT_TRUE(
      Has(twice, "stack 'modern' is already defined by " + kRoot + "/configs/stacks/modern.toml"))
      << twice.message();
  EXPECT_TRUE(Has(twice, "give the file another name (base = \"modern\" takes that stack's keys)"))
      << twice.message();
  WriteStack("looping-stacks", "a", "base = \"b\"\n");
  WriteStack("looping-stacks", "b", "base = \"a\"\n");
  StackCatalog loop;
  const Status st = loop.LoadDir(::testing::TempDir() + "/looping-stacks");
  EXPECT_TRUE(Has(st, "base = \"a\" makes a loop (a -> b -> a)")) << st.message();
}

}  // namespace
}  // namespace scaletrain::plan
