// The published-runs validation: every row predicted, and the error stays
// within the bound this method achieves (docs/planner.md reports the rows).
#include <gtest/gtest.h>

#include <cmath>

#include "plan/validate.h"

namespace scaletrain::plan {
namespace {

const std::string kRoot = ST_SOURCE_DIR;
constexpr double kMapeBound = 23.5;  // measured: 23.1% (docs/planner.md)
// More runs of the MosaicML tables (tests/plan/mosaicml-more-runs.csv).
constexpr double kMoreRunsBound = 20.5;  // measured: 20.0%

// Validates tests/plan/NAME with the repository's catalog; every row must be
// predicted.
ValidationReport ValidateRepoCsv(const std::string& name, size_t rows) {
  HardwareCatalog cat;
  EXPECT_TRUE(cat.LoadDir(kRoot + "/configs/hardware").ok());
  auto rep = ValidateFile(kRoot + "/tests/plan/" + name, cat, kRoot + "/configs");
  EXPECT_TRUE(rep.ok()) << rep.status().message();
  if (!rep.ok()) return {};
  EXPECT_EQ(rep->rows.size(), rows);
  for (const auto& r : rep->rows) {
    EXPECT_TRUE(r.error.empty()) << r.run.id << ": " << r.error;
    EXPECT_TRUE(std::isfinite(r.error_pct)) << r.run.id;
  }
  return *rep;
}

TEST(PlanValidate, PublishedRunsWithinTheMeasuredBound) {
  const auto rep = ValidateRepoCsv("published-runs.csv", 26);
  ASSERT_FALSE(rep.rows.empty());
  // The MAPE this method reaches on these rows (see docs/planner.md); a
  // change to the model that makes it worse fails here.
  EXPECT_LT(rep.mape, kMapeBound) << "MAPE " << rep.mape;
}

TEST(PlanValidate, MoreMosaicRunsWithinTheMeasuredBound) {
  const auto rep = ValidateRepoCsv("mosaicml-more-runs.csv", 34);
  ASSERT_FALSE(rep.rows.empty());
  for (const auto& r : rep.rows) {
    EXPECT_EQ(r.stack, "modern-triton") << r.run.id;  // llm-foundry trains MPT with Triton attention
  }
  EXPECT_LT(rep.mape, kMoreRunsBound) << "MAPE " << rep.mape;
}

TEST(PlanValidate, CsvParsingHandlesQuotesAndReportsBadNumbers) {
  const std::string path = ::testing::TempDir() + "/runs.csv";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("id,source,model,params_b,layers,hidden,heads,seq,vocab,gpu,num_gpus,tp,pp,dp,vpp,sp,recompute,"
             "micro_batch,global_batch,measured_tflops_per_gpu,measured_mfu,measured_step_s,measured_tokens_per_s,"
             "notes\n"
             "a,\"x, \"\"y\"\"\",gpt,1,24,2048,16,2048,50257,a100-80g,8,1,1,8,,,,,64,,,,9000,\"FULL_SHARD, more\"\n"
             "b,s,gpt,1,24,2048,16,2048,50257,a100-80g,8,1,1,8,,,,,sixty-four,,,,9000,\n",
             f);
  std::fclose(f);
  auto runs = ReadPublishedRuns(path);
  ASSERT_FALSE(runs.ok());
  EXPECT_NE(runs.status().message().find("global_batch = 'sixty-four' is not a number"), std::string::npos)
      << runs.status().message();
}

}  // namespace
}  // namespace scaletrain::plan
