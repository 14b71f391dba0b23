// The published-runs validation: every row predicted, and the error stays
// within the bound this method achieves (docs/planner.md reports the rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/strings.h"
#include "plan/report.h"
#include "plan/validate.h"
#include "plan_stacks.h"

namespace scaletrain::plan {
namespace {

const std::string kRoot = ST_SOURCE_DIR;
// measured: 7.97% (docs/planner.md): 7.55% until an uneven interleaving became
// an error, which leaves Llama 3 405B's 126 layers on 16 stages at vpp 1.
constexpr double kMapeBound = 8.2;
// More runs of the MosaicML tables (tests/plan/mosaicml-more-runs.csv).
constexpr double kMoreRunsBound = 5.3;  // measured: 5.0%
// llm-foundry's micro-batch sweep (tests/plan/mosaicml-microbatch-sweep.csv).
constexpr double kSweepBound = 2.6;  // measured: 2.3%
// Calculon's own validation runs (Korthikanti et al. 2022, Table 5;
// tests/plan/korthikanti-2022.csv), added after the method was fixed.
constexpr double kKorthikantiBound = 3.1;  // measured: 2.8%, worst 6.2%
// Narayanan et al. 2021's Table 1 with the micro-batch sizes and interleaving
// of the authors' script, in fp16 as it runs (tests/plan/narayanan-2021-scripts.csv).
constexpr double kNarayananScriptsBound = 8.4;  // measured: 8.1%
// torchtitan's published FSDP runs (tests/plan/torchtitan-2024.csv), the
// PyTorch stacks' dev set (no constant was fitted to them).
constexpr double kTorchtitanBound = 6.2;  // measured: 5.9% over 17 rows, worst +11.5%
// Nemotron-4 340B and 15B as NVIDIA trained them (tests/plan/nemotron-2024.csv),
// Megatron-Core on up to 6,144 H100, added as a dev set (no constant fitted).
constexpr double kNemotronBound = 4.3;  // measured: 4.0%, worst -10.3% (a 15B row)
// Megatron-Turing NLG 530B on 2,240-3,360 A100 (tests/plan/mt-nlg-2022.csv),
// Megatron-DeepSpeed, a dev set of the stack's known optimism.
// measured: 18.96%, worst -20.7% (18.5% while an unstated ZeRO stage on a
// legacy stack was taken as 0 rather than searched).
constexpr double kMtNlgBound = 19.3;
// NeMo's FP8 performance tables on DGX H100 (tests/plan/nemo-2024-fp8.csv),
// a dev set for FP8 training (no constant fitted).
constexpr double kNemoFp8Bound = 10.7;  // measured: 10.4% over 20 rows, worst +24.1%

// IBM and Meta's fms-fsdp throughput table (tests/plan/fms-fsdp-2024.csv),
// PyTorch FSDP1 with hybrid sharding on AWS A100 instances, added as a dev
// set (no constant fitted).
constexpr double kFmsFsdpBound = 8.6;  // measured: 8.3% over 4 rows, worst +18.8%

// Megatron-LM 2019 and its 2020 release on V100 of DGX-2H
// (tests/plan/megatron-2019-v100.csv), the first V100 runs, added with the
// V100s to the catalog (issue 36); no constant was fitted to them. measured:
// 63.6% over 15 rows, worst +140%: the 2019 paper's software ran the same
// 1.2B model 1.6x slower than its 2020 release (NVIDIA's post), which the
// planner's legacy stack describes (its two rows +2.8%, -1.9%). A regression
// bound at what the file measures, not a claim of accuracy.
constexpr double kMegatron2019Bound = 64.0;

// Validates tests/plan/NAME with the repository's catalog; every row must be
// predicted.
ValidationReport ValidateRepoCsv(const std::string& name, size_t rows) {
  HardwareCatalog cat;
  EXPECT_TRUE(cat.LoadDir(kRoot + "/configs/hardware").ok());
  auto rep = ValidateFile(kRoot + "/tests/plan/" + name, cat, ShippedStacks(), kRoot + "/configs");
  EXPECT_TRUE(rep.ok()) << rep.status().message();
  if (!rep.ok()) return {};
  EXPECT_EQ(rep->rows.size(), rows);
  for (const auto& r : rep->rows) {
    EXPECT_TRUE(r.error.empty()) << r.run.id << ": " << r.error;
    EXPECT_TRUE(std::isfinite(r.error_pct)) << r.run.id;
  }
  return *rep;
}

// Writes `text` to a temporary file NAME; its path.
Result<std::string> WriteTempCsv(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return IoError("cannot write " + path);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

// Writes `csv` to a temporary file NAME and validates it with the
// repository's catalog and `default_stack`.
Result<ValidationReport> ValidateTempCsv(const std::string& name, const std::string& csv,
                                         const std::string& default_stack = "modern") {
  ST_ASSIGN_OR_RETURN(const std::string path, WriteTempCsv(name, csv));
  HardwareCatalog cat;
  ST_RETURN_IF_ERROR(cat.LoadDir(kRoot + "/configs/hardware"));
  return ValidateFile(path, cat, ShippedStacks(), kRoot + "/configs", default_stack);
}

// The columns every CSV has, up to the measured figures.
const std::string kBaseHeader =
    "id,source,model,params_b,layers,hidden,heads,seq,vocab,gpu,num_gpus,tp,pp,dp,vpp,sp,recompute,"
    "micro_batch,global_batch,measured_tflops_per_gpu,measured_mfu,measured_step_s,measured_tokens_per_s";

// Writes `text` to a temporary file NAME and reads its runs.
Result<std::vector<PublishedRun>> ReadTempCsv(const std::string& name, const std::string& text) {
  ST_ASSIGN_OR_RETURN(const std::string path, WriteTempCsv(name, text));
  return ReadPublishedRuns(path);
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

// The same model and sequence at 1, 2 and 4 sequences per micro-batch: the
// measured MFU falls from 62% to 47% as the per-micro-batch FSDP gathers and
// reduce-scatters stop being small next to the compute. The error must not
// follow the micro-batch within a model: while the planner hid that traffic
// under compute it went from +25% (4) to +59% (1); with the traffic charged
// (the gradients reduced in fp32, as the rows' Composer `DEFAULT` asks) it
// moves by under 3 points per model.
TEST(PlanValidate, MicroBatchSweepErrorDoesNotFollowTheMicroBatch) {
  const auto rep = ValidateRepoCsv("mosaicml-microbatch-sweep.csv", 5);
  ASSERT_FALSE(rep.rows.empty());
  std::map<std::string, std::pair<double, double>> range;  // model -> (lowest, highest) error
  for (const auto& r : rep.rows) {
    EXPECT_EQ(r.stack, "modern-triton") << r.run.id;
    EXPECT_EQ(r.prediction.layout.grad_reduce, GradReduce::kFp32) << r.run.id;
    EXPECT_GT(r.prediction.time_s.dp_comm, 0.05 * r.prediction.step_time_s) << r.run.id;
    auto [it, added] = range.try_emplace(r.run.model, r.error_pct, r.error_pct);
    it->second.first = std::min(it->second.first, r.error_pct);
    it->second.second = std::max(it->second.second, r.error_pct);
  }
  EXPECT_EQ(range.size(), 2u);
  for (const auto& [model, lo_hi] : range) {
    EXPECT_LT(lo_hi.second - lo_hi.first, 4.0) << model << ": errors from " << lo_hi.first << "% to " << lo_hi.second
                                               << "%";
  }
  EXPECT_LT(rep.mape, kSweepBound) << "MAPE " << rep.mape;
}

// The step times Calculon validates itself on: Megatron-LM of 2022 on A100
// (22B to 1T, with full recomputation and with sequence parallelism plus
// selective recomputation), judged on step time. The rows ran fp16 (their
// notes), and selective recomputation must cost far less than full.
TEST(PlanValidate, CalculonValidationRunsWithinTheMeasuredBound) {
  const auto rep = ValidateRepoCsv("korthikanti-2022.csv", 8);
  ASSERT_EQ(rep.rows.size(), 8u);
  for (const auto& r : rep.rows) {
    EXPECT_EQ(r.stack, "legacy") << r.run.id;
    EXPECT_EQ(r.metric, "step_s") << r.run.id;
    EXPECT_EQ(r.prediction.layout.precision, Precision::kFP16) << r.run.id;
  }
  for (size_t i = 0; i + 1 < rep.rows.size(); i += 2) {  // rows come as (full, seqsel) pairs
    const auto& full = rep.rows[i].prediction;
    const auto& seqsel = rep.rows[i + 1].prediction;
    EXPECT_LT(seqsel.time_s.recompute, 0.2 * full.time_s.recompute) << rep.rows[i].run.id;
  }
  EXPECT_LT(rep.mape, kKorthikantiBound) << "MAPE " << rep.mape;
  EXPECT_LT(rep.max_abs_error, 6.5) << "worst " << rep.max_abs_error;
}

// Megatron-LM 2021's weak-scaling table as the authors' reproduction script
// runs it: the stated micro-batch sizes and chunks per stage are used, not
// searched, so these rows test the cost model alone.
TEST(PlanValidate, NarayananScriptLayoutsWithinTheMeasuredBound) {
  const auto rep = ValidateRepoCsv("narayanan-2021-scripts.csv", 10);
  ASSERT_EQ(rep.rows.size(), 10u);
  for (const auto& r : rep.rows) {
    EXPECT_EQ(r.stack, "legacy") << r.run.id;
    EXPECT_EQ(r.prediction.layout.micro_batch, r.run.micro_batch) << r.run.id;
    EXPECT_EQ(r.prediction.layout.vpp, r.run.vpp) << r.run.id;
    EXPECT_EQ(r.prediction.layout.precision, Precision::kFP16) << r.run.id;
  }
  EXPECT_LT(rep.mape, kNarayananScriptsBound) << "MAPE " << rep.mape;
}

TEST(PlanValidate, CsvParsingHandlesQuotesAndReportsBadNumbers) {
  auto runs = ReadTempCsv(
      "runs.csv",
      kBaseHeader +
          ",notes\n"
          "a,\"x, \"\"y\"\"\",gpt,1,24,2048,16,2048,50257,a100-80g,8,1,1,8,,,,,64,,,,9000,"
          "\"FULL_SHARD, more\"\n"
          "b,s,gpt,1,24,2048,16,2048,50257,a100-80g,8,1,1,8,,,,,sixty-four,,,,9000,\n");
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].source, "x, \"y\"");
  EXPECT_EQ((*runs)[0].notes, "FULL_SHARD, more");
  EXPECT_TRUE((*runs)[0].error.empty());
  // The bad row is its own error; the file is read on.
  EXPECT_EQ((*runs)[1].id, "b");
  EXPECT_NE((*runs)[1].error.find("global_batch = 'sixty-four' is not a number"), std::string::npos)
      << (*runs)[1].error;
  // A quote left open is no CSV at all.
  auto open = ReadTempCsv("open-quote.csv", kBaseHeader + ",notes\na,\"x,gpt\n");
  ASSERT_FALSE(open.ok());
}

// A typed column holds a value of its type, written as tables write it
// ("yes", "FULL AC", "bfloat16"), or says it is not known ("n/a"); anything
// else is the row's error naming the column and what it may hold, not a
// value guessed.
TEST(PlanValidate, TypedColumnsReadTheirValuesOnly) {
  const std::string row = ",s,gpt,1,24,2048,16,2048,50257,a100-80g,8,1,1,8,,";
  auto runs = ReadTempCsv("typed.csv", kBaseHeader + ",precision,notes\nyes" + row + "yes,full AC,,64,,,,1,bfloat16,\n" +
                                           "na" + row + "n/a,n/a,,64,,,,1,n/a,\nsp" + row +
                                           "maybe,,,64,,,,1,,\nrc" + row + ",sometimes,,64,,,,1,,\n");
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 4u);
  EXPECT_EQ((*runs)[0].sp, true);
  EXPECT_EQ((*runs)[0].recompute, Recompute::kFull);
  EXPECT_EQ((*runs)[0].precision, Precision::kBF16);
  EXPECT_TRUE((*runs)[1].error.empty()) << (*runs)[1].error;
  EXPECT_FALSE((*runs)[1].sp || (*runs)[1].recompute || (*runs)[1].precision);
  EXPECT_NE((*runs)[2].error.find("column sp = 'maybe'; give true or false"), std::string::npos) << (*runs)[2].error;
  EXPECT_NE((*runs)[3].error.find("column recompute = 'sometimes'; give none, selective"), std::string::npos)
      << (*runs)[3].error;
}

// Numbers as tables write them: "~" (approximate), thousands separators,
// spaces and a percentage read as the number; a comma in the wrong place is
// not a number.
TEST(PlanValidate, NumbersAsTablesWriteThem) {
  const std::string head = kBaseHeader + ",notes\n";
  const std::string row = ",s,gpt,1,24,2048,16,2048,50257,a100-80g,8,1,1,8,,,,,64,";
  auto runs = ReadTempCsv("numbers.csv", head + "a" + row + ",,,\"~9,000\",\nb" + row +
                                             ", 41% ,,,\nc" + row + ",,,\" 9000 \",\n");
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 3u);
  EXPECT_EQ((*runs)[0].tokens_per_s, 9000);
  EXPECT_DOUBLE_EQ((*runs)[1].mfu, 0.41);
  EXPECT_EQ((*runs)[2].tokens_per_s, 9000);
  auto bad = ReadTempCsv("numbers-bad.csv", head + "d" + row + ",,,\"90,00\",\n");
  ASSERT_TRUE(bad.ok()) << bad.status().message();
  EXPECT_NE((*bad)[0].error.find("measured_tokens_per_s = '90,00' is not a number"),
            std::string::npos)
      << (*bad)[0].error;
  // A range is its middle; a value not known is not stated.
  auto more = ReadTempCsv("numbers-more.csv",
                          head + "e" + row + ",38-43%,,,\nf" + row + ",n/a,,\"150 to 160\",\ng" +
                              row + ",-,,1.5e+04,\nh" + row + "140 \xe2\x80\x93 150,,,,\n");
  ASSERT_TRUE(more.ok()) << more.status().message();
  ASSERT_EQ(more->size(), 4u);
  for (const PublishedRun& r : *more) EXPECT_TRUE(r.error.empty()) << r.id << ": " << r.error;
  EXPECT_DOUBLE_EQ((*more)[0].mfu, 0.405);
  EXPECT_EQ((*more)[1].mfu, 0.0);
  EXPECT_DOUBLE_EQ((*more)[1].tokens_per_s, 155);
  EXPECT_DOUBLE_EQ((*more)[2].tokens_per_s, 15000);
  EXPECT_DOUBLE_EQ((*more)[3].tflops_per_gpu, 145);
}

// A file as a spreadsheet saves it: a UTF-8 byte-order mark, CRLF line ends
// and spaces after the commas are read as the plain file.
TEST(PlanValidate, SpreadsheetCsvReadsAsThePlainFile) {
  std::string head =
      "\xEF\xBB\xBF";  // the byte-order mark, then the header with ", " between names
  for (char c : kBaseHeader + ",notes") head += c == ',' ? std::string(", ") : std::string(1, c);
  head += "\r\n";
  auto runs = ReadTempCsv("spreadsheet.csv", head +
                                                 "a, s, llama3-8b, , , , , 8192, , h100-sxm, 8, 1, "
                                                 "1, 8, , , full, 2, 16, , , , 46096, x\r\n");
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].id, "a");
  EXPECT_EQ((*runs)[0].model, "llama3-8b");
  EXPECT_EQ((*runs)[0].tokens_per_s, 46096);
  EXPECT_EQ((*runs)[0].micro_batch, 2);
}

// The stack is a column: a row's own value wins, rows without one take the
// default (`plan validate --stack`), and an unknown name is that row's error.
TEST(PlanValidate, StackIsAnExplicitColumnWithADefault) {
  const std::string row = ",x,gpt,1.3,24,2048,16,2048,50257,a100-80g,8,1,1,8,,,,4,64,,,,50000,";
  const std::string csv = kBaseHeader + ",stack,notes\nown" + row + "legacy,\nnone" + row + ",\nbad" + row +
                          "fancy,\nalias" + row + "megatron,\n";
  for (const std::string def : {"modern", "modern-triton"}) {
    auto rep = ValidateTempCsv("stacks.csv", csv, def);
    ASSERT_TRUE(rep.ok()) << rep.status().message();
    ASSERT_EQ(rep->rows.size(), 4u);
    EXPECT_EQ(rep->rows[0].stack, "legacy");
    EXPECT_EQ(rep->rows[1].stack, def);
    EXPECT_EQ(rep->rows[3].stack, "modern");  // Megatron-LM's name for what "modern" models
    EXPECT_NE(rep->rows[2].error.find("unknown software stack 'fancy'"), std::string::npos)
        << rep->rows[2].error;
  }
}

// A row without a stack runs on --stack where given, else on modern, and the
// table marks it; the software its source or notes mention is a hint, never
// the stack it runs on.
TEST(PlanValidate, StackFromTheColumnOrTheDefaultNeverTheNotes) {
  const std::string row = ",gpt,1.3,24,2048,16,2048,50257,a100-80g,8,1,1,8,,,,4,64,,,,50000,";
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> cases = {
      // id, source, notes, hint
      {"foundry", "mosaicml/llm-foundry benchmarks", "Composer FSDP, prec=amp_bf16",
       "'mosaicml' (modern-triton), 'fsdp' (pytorch)"},
      {"titan", "pytorch/torchtitan", "FSDP2 + compile + Float8", "'pytorch' (pytorch), 'compile' (pytorch-compile)"},
      {"nemo", "a report", "NeMo 2.0", ""},
      {"prose", "a paper", "we trained it", ""}};
  std::string csv = kBaseHeader + ",stack,notes\n";
  for (const auto& [id, source, notes, hint] : cases) {
    for (const std::string& part :
         {id, std::string(","), source, row, std::string(",\""), notes, std::string("\"\n")})
      csv += part;
  }
  for (const std::string& part : {std::string("column,mosaicml"), row, std::string("legacy,FSDP\n")})
    csv += part;
  auto plain = ValidateTempCsv("stack-default.csv", csv, "");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_EQ(plain->rows.size(), cases.size() + 1);
  for (size_t i = 0; i < cases.size(); ++i) {
    const ValidationRow& r = plain->rows[i];
    EXPECT_EQ(r.stack, "modern") << r.run.id;
    EXPECT_EQ(r.stack_from, "default") << r.run.id;
    EXPECT_DOUBLE_EQ(r.predicted, plain->rows[2].predicted) << r.run.id;  // the notes change nothing
  }
  EXPECT_EQ(plain->rows.back().stack, "legacy");
  EXPECT_EQ(plain->rows.back().stack_from, "column");
  EXPECT_TRUE(plain->rows.back().stack_hint.empty());  // a stated stack needs no hint
  const std::string text = ValidationToText(*plain);
  EXPECT_NE(text.find("modern?"), std::string::npos) << text;
  EXPECT_NE(text.find("hint: foundry: its source or notes mention 'mosaicml' (modern-triton)"), std::string::npos)
      << text;
  // --stack is taken where the column is empty, not over it; the hint names
  // what differs from it.
  auto given = ValidateTempCsv("stack-given.csv", csv, "pytorch");
  ASSERT_TRUE(given.ok()) << given.status().message();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(given->rows[i].stack, "pytorch") << given->rows[i].run.id;
    EXPECT_EQ(given->rows[i].stack_from, "--stack");
  }
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(plain->rows[i].stack_hint, std::get<3>(cases[i]));
  EXPECT_EQ(given->rows[0].stack_hint, "'mosaicml' (modern-triton)");
  EXPECT_EQ(given->rows[1].stack_hint, "'compile' (pytorch-compile)");
  EXPECT_EQ(given->rows.back().stack, "legacy");
  EXPECT_NE(ValidationToText(*given).find("pytorch*"), std::string::npos);
}

// The zero column as tables write a stage: a number, ZeRO-n, "stage n", FSDP's
// sharding strategies, Megatron's distributed optimizer; anything else in it
// (prose included) is the row's error, not a stage guessed from its words.
TEST(PlanValidate, ZeroColumnAsTablesWriteIt) {
  const std::string row = ",x,gpt,1.3,24,2048,16,2048,50257,a100-80g,8,1,1,8,,,,4,64,,,,50000,megatron-deepspeed,";
  const std::vector<std::pair<std::string, int>> cases = {
      {"2", 2},           {"ZeRO-1", 1},           {"zero3", 3},    {"ZeRO stage 2", 2},
      {"stage 1", 1},     {"FULL_SHARD", 3},       {"HSDP", 3},     {"SHARD_GRAD_OP", 2},
      {"NO_SHARD", 0},    {"distributed optimizer", 1}, {"ZeRO-1, later ZeRO-3", -1}, {"FSDP FULL_SHARD", -1}};
  std::string csv = kBaseHeader + ",stack,zero,notes\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    csv += 'z';
    csv += std::to_string(i);
    for (const std::string& part : {row, std::string("\""), cases[i].first, std::string("\",\n")}) csv += part;
  }
  auto rep = ValidateTempCsv("zero-column.csv", csv);
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const ValidationRow& r = rep->rows[i];
    if (cases[i].second < 0) {
      EXPECT_NE(r.error.find("column zero = '" + cases[i].first + "' is not a ZeRO stage"), std::string::npos)
          << r.error;
      continue;
    }
    ASSERT_TRUE(r.error.empty()) << cases[i].first << ": " << r.error;
    EXPECT_EQ(r.prediction.layout.zero, cases[i].second) << cases[i].first;
  }
}

// The architecture columns define a modern model without a preset: Llama 3
// 8B from its dimensions, GQA, FFN width and SwiGLU predicts as the preset.
TEST(PlanValidate, ArchitectureColumnsDefineTheModel) {
  auto rep = ValidateTempCsv(
      "arch.csv",
      kBaseHeader + ",kv_heads,ffn_hidden,activation,tied_embeddings,notes\n"
      "cols,x,gpt,8,32,4096,32,8192,128256,h100-sxm,64,1,1,64,,,,1,512,,0.4,,,8,14336,swiglu,false,\n"
      "preset,x,llama3-8b,,,,,8192,,h100-sxm,64,1,1,64,,,,1,512,,0.4,,,,,,,\n"
      "badact,x,gpt,8,32,4096,32,8192,128256,h100-sxm,64,1,1,64,,,,1,512,,0.4,,,8,14336,tanh,,\n"
      "badtie,x,gpt,8,32,4096,32,8192,128256,h100-sxm,64,1,1,64,,,,1,512,,0.4,,,8,14336,swiglu,maybe,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 4u);
  ASSERT_TRUE(rep->rows[0].error.empty()) << rep->rows[0].error;
  EXPECT_DOUBLE_EQ(rep->rows[0].predicted, rep->rows[1].predicted);
  EXPECT_NE(rep->rows[2].error.find("column activation = 'tanh'; give gelu, swiglu or squared_relu"), std::string::npos)
      << rep->rows[2].error;
  EXPECT_NE(rep->rows[3].error.find("tied_embeddings = 'maybe'"), std::string::npos) << rep->rows[3].error;
}

// Fewer KV heads than query heads make a row's blocks Llama-style (GPT-2's
// fused QKV has no grouped-query form), its activation staying GeLU unless
// the row gives one: the same parameters as the row that says GeLU, fewer
// than with a KV head per query head.
TEST(PlanValidate, KvHeadsColumnAloneGivesGroupedQueryAttention) {
  const std::string dims = ",x,gpt,8,32,4096,32,8192,128256,h100-sxm,64,1,1,64,,,,1,512,,0.4,,,";
  auto rep = ValidateTempCsv("gqa.csv", kBaseHeader + ",kv_heads,activation,tied_embeddings,notes\ngqa" + dims +
                                            "8,,false,\ngelu" + dims + "8,gelu,false,\nmha" + dims +
                                            "32,,false,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 3u);
  for (const auto& r : rep->rows) ASSERT_TRUE(r.error.empty()) << r.run.id << ": " << r.error;
  const auto params = [&](size_t i) { return rep->rows[i].prediction.memory.params; };
  EXPECT_DOUBLE_EQ(params(0), params(1));
  EXPECT_DOUBLE_EQ(rep->rows[0].predicted, rep->rows[1].predicted);
  EXPECT_LT(params(0), params(2));
}

// Columns under the names other tables give them (Hugging Face config keys,
// Megatron flags) read as the format's; a column nothing reads is named.
TEST(PlanValidate, ColumnSynonymsAndColumnsNotRead) {
  const std::string dims = ",x,gpt,8,32,4096,32,8192,128256,h100-sxm,64,1,1,64,,,,1,512,,0.4,,,";
  const std::string own =
      kBaseHeader + ",stack,kv_heads,ffn_hidden,zero,notes\nrow" + dims + "pytorch,8,14336,1,\n";
  const std::string other =
      kBaseHeader + ",framework,num_key_value_heads,intermediate_size,zero_stage,url,notes\nrow" +
      dims + "torchtitan,8,14336,ZeRO-1,https://x,\n";
  auto a = ValidateTempCsv("own-names.csv", own), b = ValidateTempCsv("other-names.csv", other);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().message() << b.status().message();
  ASSERT_TRUE(b->rows[0].error.empty()) << b->rows[0].error;
  EXPECT_EQ(b->rows[0].stack, "pytorch");
  EXPECT_EQ(b->rows[0].stack_from, "column");
  EXPECT_EQ(b->rows[0].prediction.layout.zero, 1);
  EXPECT_DOUBLE_EQ(b->rows[0].predicted, a->rows[0].predicted);
  EXPECT_DOUBLE_EQ(b->rows[0].prediction.memory.params, a->rows[0].prediction.memory.params);
  EXPECT_TRUE(a->ignored_columns.empty());
  EXPECT_EQ(b->ignored_columns, std::vector<std::string>{"url"});
  EXPECT_NE(ValidationToText(*b).find("columns not read: url"), std::string::npos);
}

// GPU-variant columns: a power-capped run predicts slower, a bigger memory
// leaves the rates alone (at one layout: with the recomputation held, the
// search cannot trade the memory for less of it); a cap below idle is that
// row's error.
TEST(PlanValidate, GpuVariantColumns) {
  const std::string row = ",x,llama3-8b,,,,,8192,,h100-sxm,64,1,1,64,,,full,1,512,,0.4,,,";
  std::string named = row;
  named.replace(named.find("h100-sxm"), 8, "H100 94GB");
  auto rep =
      ValidateTempCsv("variants.csv", kBaseHeader + ",power_cap_w,hbm_gib,notes\nfull" + row +
                                          ",,\ncap" + row + "500,,\nmem" + row + ",87.5,\nlow" +
                                          row + "30,,\nnamed" + named + ",,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 5u);
  EXPECT_LT(rep->rows[1].predicted, rep->rows[0].predicted);  // MFU under a 500 W cap
  EXPECT_DOUBLE_EQ(rep->rows[2].predicted, rep->rows[0].predicted);
  EXPECT_NEAR(rep->rows[2].prediction.capacity_gib, 87.5, 0.01);
  EXPECT_NE(rep->rows[3].error.find("idle power"), std::string::npos) << rep->rows[3].error;
  // The memory the GPU's name states, as the column would give it.
  EXPECT_NEAR(rep->rows[4].prediction.capacity_gib, 87.5, 0.05);
  EXPECT_NEAR(rep->rows[0].prediction.capacity_gib, 79.6, 0.01);
}

TEST(PlanValidate, TorchtitanRunsOnThePyTorchStacks) {
  const auto rep = ValidateRepoCsv("torchtitan-2024.csv", 17);
  ASSERT_EQ(rep.rows.size(), 17u);
  for (const auto& r : rep.rows) {
    EXPECT_EQ(r.prediction.layout.zero, 3) << r.run.id;
    EXPECT_NE(r.prediction.layout.recompute, Recompute::kSelective) << r.run.id;  // read as op
  }
  // torch.compile's fused element-wise ops are faster than eager's.
  EXPECT_GT(rep.rows[1].predicted, rep.rows[0].predicted);
  EXPECT_LT(rep.mape, kTorchtitanBound) << "MAPE " << rep.mape;
}

// Nemotron-4's rows: predicted on its own architecture (squared ReLU, GQA,
// untied 256k vocabulary), the 340B rows within 6% in step time.
TEST(PlanValidate, NemotronRunsAtScale) {
  const auto rep = ValidateRepoCsv("nemotron-2024.csv", 6);
  ASSERT_EQ(rep.rows.size(), 6u);
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(std::abs(rep.rows[i].error_pct), 6.0) << rep.rows[i].run.id;
  EXPECT_LT(rep.mape, kNemotronBound) << "MAPE " << rep.mape;
}

// Megatron-DeepSpeed's runs: DeepSpeed's pipeline engine has no interleaved
// schedule, so none is searched.
TEST(PlanValidate, MegatronDeepSpeedRunsOneFOneB) {
  const auto rep = ValidateRepoCsv("mt-nlg-2022.csv", 3);
  EXPECT_TRUE(std::all_of(rep.rows.begin(), rep.rows.end(), [](const ValidationRow& r) {
    return r.stack == "megatron-deepspeed" && r.prediction.layout.vpp == 1;
  }));
  EXPECT_LT(rep.mape, kMtNlgBound) << "MAPE " << rep.mape;
}

// NeMo's FP8 runs: every row predicted at the table's layout, including
// Llama 2 70B's 20 chunks per stage (beyond the interleaving the search tries
// on its own); FP8 makes the same layout faster than bf16 would, not twice as
// fast (attention and the head stay bf16).
TEST(PlanValidate, NemoFp8RunsAtTheirTablesLayouts) {
  const auto rep = ValidateRepoCsv("nemo-2024-fp8.csv", 20);
  ASSERT_EQ(rep.rows.size(), 20u);
  for (const auto& r : rep.rows) {
    EXPECT_EQ(r.prediction.layout.precision, Precision::kFP8) << r.run.id;
    if (r.run.vpp > 0) {
      EXPECT_EQ(r.prediction.layout.vpp, r.run.vpp) << r.run.id;
    }
    // The context-parallel rows (CP 2 to 32) run at their table's cp.
    EXPECT_EQ(r.prediction.layout.cp, r.run.cp) << r.run.id;
    EXPECT_EQ(r.prediction.layout.num_gpus(), r.run.num_gpus) << r.run.id;
  }
  EXPECT_EQ(rep.rows.back().run.id, "nemo-llama2-7b-seq1024k-1024-cp32");
  EXPECT_EQ(rep.rows.back().prediction.layout.cp, 32);
  EXPECT_EQ(rep.rows[6].run.id, "nemo-llama2-70b-64");
  EXPECT_EQ(rep.rows[6].prediction.layout.vpp, 20);
  EXPECT_LT(rep.mape, kNemoFp8Bound) << "MAPE " << rep.mape;
}

// Stack names: the PyTorch stack's aliases, FSDP's ZeRO-3 unless a `zero`
// column says otherwise, and a bandwidth variant (slower for the eager stack's
// memory-bound ops); a zero that is no stage is an error of the file.
TEST(PlanValidate, StackZeroAndBandwidthColumns) {
  const std::string row = ",x,llama3-8b,,,,,8192,,h100-sxm,8,1,1,8,,,selective,1,64,,,,1,";
  auto rep = ValidateTempCsv("pytorch-stacks.csv", kBaseHeader + ",stack,zero,hbm_tbps,notes\nfsdp" + row +
                                                       "fsdp,,,\nz1" + row + "torchtitan,1,,\nslow" + row +
                                                       "pytorch,,2.4,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 3u);
  EXPECT_EQ(rep->rows[0].stack, "pytorch");
  EXPECT_EQ(rep->rows[0].prediction.layout.zero, 3);
  EXPECT_EQ(rep->rows[0].prediction.layout.recompute, Recompute::kOp);
  EXPECT_EQ(rep->rows[1].prediction.layout.zero, 1);
  EXPECT_LT(rep->rows[2].predicted, rep->rows[0].predicted);
  auto bad = ValidateTempCsv("bad-zero.csv", kBaseHeader + ",stack,zero,notes\nbad" + row + "pytorch,5,\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is not a ZeRO stage"), std::string::npos) << bad.status().message();
}

// Names as runs write them: the model, the GPU and the stack of a row, in
// any case and with spaces, give the same prediction as the catalog's names.
TEST(PlanValidate, NamesAsRunsWriteThem) {
  const std::string tail = ",,,,,8192,,";
  const std::string rest = ",8,1,1,8,,,selective,1,64,,,,1,";
  auto rep = ValidateTempCsv(
      "names.csv", kBaseHeader + ",stack,notes\nours,x,llama3-8b" + tail + "h100-sxm" + rest +
                       "pytorch,\ntheirs,x,Llama 3.1 8B" + tail + "H100 SXM5" + rest +
                       "FSDP2,\nhf,x,Meta-Llama-3-8B-hf" + tail + "NVIDIA H100" + rest +
                       "PyTorch FSDP2 (eager),\nnone,x,GPT3-5B" + tail + "H100" + rest +
                       "NeMo 2.0,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 4u);
  for (size_t i : {1, 2}) {
    EXPECT_TRUE(rep->rows[i].error.empty()) << rep->rows[i].error;
    EXPECT_EQ(rep->rows[i].predicted, rep->rows[0].predicted);
    EXPECT_EQ(rep->rows[i].stack, "pytorch");
  }
  // No preset of that name and no dimension columns: one error saying both.
  EXPECT_NE(rep->rows[3].error.find("unknown model preset 'GPT3-5B'"), std::string::npos)
      << rep->rows[3].error;
  EXPECT_NE(rep->rows[3].error.find(
                "or define the model by the row's layers, hidden, heads and vocab columns"),
            std::string::npos)
      << rep->rows[3].error;
}

// A published batch the stated layout cannot split (500 sequences over 32
// data-parallel ranks) runs at the nearest it can (512), its step time
// scaled back to 500; a layout that does not multiply to the GPUs is the
// row's error, named.
TEST(PlanValidate, BatchTheStatedLayoutCannotSplit) {
  const std::string head = ",x,gpt,7.5,36,4096,32,2048,51200,a100-80g,128,4,1,";
  auto rep = ValidateTempCsv(
      "batch.csv", kBaseHeader + ",stack,notes\nodd" + head + "32,,,,1,500,,,10,,modern,\n" +
                       "even" + head + "32,,,,1,512,,,10,,modern,\nimplied" + head +
                       ",,,,1,500,,,10,,modern,\nbad" + head + "16,,,,1,512,,,10,,modern,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 4u);
  for (size_t i : {0, 1, 2}) ASSERT_TRUE(rep->rows[i].error.empty()) << rep->rows[i].error;
  EXPECT_EQ(rep->rows[0].prediction.layout.global_batch, 512);
  EXPECT_NEAR(rep->rows[0].predicted, rep->rows[1].predicted * 500.0 / 512.0, 1e-9);
  EXPECT_EQ(rep->rows[2].predicted, rep->rows[0].predicted);  // dp = 128 / (4 x 1)
  EXPECT_NE(rep->rows[3].error.find(
                "tp x cp x pp x dp = 4 x 1 x 1 x 16 = 64, not the row's num_gpus 128"),
            std::string::npos)
      << rep->rows[3].error;
  const std::string text = ValidationToText(*rep);
  EXPECT_NE(text.find("over 3 rows, worst"), std::string::npos) << text;
  EXPECT_NE(text.find("; 1 of 4 rows not predicted (errors above)"), std::string::npos) << text;
}

// Dimensions far beyond any model (a typo: 1e18 layers, a sequence of 1e12)
// are the row's error, not an allocation that ends the program.
TEST(PlanValidate, AbsurdDimensionsAreTheRowsError) {
  const std::string tail = ",a100-80g,8,1,1,8,,,,4,512,,,,9000,\n";
  auto rep =
      ValidateTempCsv("absurd.csv", kBaseHeader + ",notes\nlayers,s,gpt,1,1e18,2048,16,2048,50257" +
                                        tail + "seq,s,llama3-8b,8,,,,1000000000000," + tail +
                                        "fine,s,gpt,1,24,2048,16,2048,50257" + tail);
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 3u);
  EXPECT_NE(rep->rows[0].error.find("model layers = 1000000000000000000 is beyond any model"),
            std::string::npos)
      << rep->rows[0].error;
  EXPECT_NE(rep->rows[1].error.find("model seq = 1000000000000 is beyond any model"),
            std::string::npos)
      << rep->rows[1].error;
  EXPECT_TRUE(rep->rows[2].error.empty()) << rep->rows[2].error;
}

// A row without a global batch: tokens/s x step time / sequence where both
// are measured, else the batch its model preset was trained with, else that
// row's error.
TEST(PlanValidate, GlobalBatchLeftOut) {
  const std::string gpt = ",x,gpt,7.5,36,4096,32,2048,51200,a100-80g,128,4,1,32,,,,1,";
  auto rep = ValidateTempCsv(
      "no-batch.csv",
      kBaseHeader + ",stack,notes\nmeasured" + gpt + ",,,2.0,524288,modern,\nstated" + gpt +
          "512,,,2.0,,modern,\npreset,x,llama3-8b,,,,,8192,,h100-sxm,64,1,1,64,,,,1,,,0.4,,,modern,"
          "\n"
          "preset-stated,x,llama3-8b,,,,,8192,,h100-sxm,64,1,1,64,,,,1,512,,0.4,,,modern,\nnone" +
          gpt + ",,0.4,,,modern,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 5u);
  for (size_t i : {0, 1, 2, 3}) ASSERT_TRUE(rep->rows[i].error.empty()) << rep->rows[i].error;
  // 524,288 tokens/s x 2 s / 2,048 = 512 sequences: compared on step time, as the stated row.
  EXPECT_EQ(rep->rows[0].prediction.layout.global_batch, 512);
  EXPECT_EQ(rep->rows[0].metric, "step_s");
  EXPECT_DOUBLE_EQ(rep->rows[0].predicted, rep->rows[1].predicted);
  EXPECT_EQ(rep->rows[2].prediction.layout.global_batch, 512);  // llama3-8b's preset
  EXPECT_DOUBLE_EQ(rep->rows[2].predicted, rep->rows[3].predicted);
  EXPECT_NE(rep->rows[4].error.find("global_batch is empty; give it"), std::string::npos)
      << rep->rows[4].error;
}

// Release names of a preset's model (Hugging Face's -hf, -Base, -v0.1) are
// that preset.
TEST(PlanValidate, ReleaseNamesAreThePreset) {
  const std::string rest = ",,,,,4096,,h100-sxm,512,8,,,,,full,1,512,,0.4,,,";
  std::string csv = kBaseHeader + ",notes\n";
  const std::vector<std::pair<std::string, std::string>> names = {
      {"Mistral-7B-v0.1", "mistral-7b"},
      {"Nemotron-4-340B-Base", "nemotron-4-340b"},
      {"Qwen 2 72B", "qwen2-72b"},
      {"Llama-2-70b-hf", "llama2-70b"}};
  for (const auto& [given, preset] : names) {
    for (const std::string& part : {std::string("given,x,"), given, rest, std::string("\n")})
      csv += part;
    for (const std::string& part : {std::string("preset,x,"), preset, rest, std::string("\n")})
      csv += part;
  }
  auto rep = ValidateTempCsv("release-names.csv", csv);
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 2 * names.size());
  for (size_t i = 0; i < rep->rows.size(); i += 2) {
    EXPECT_TRUE(rep->rows[i].error.empty()) << rep->rows[i].error;
    EXPECT_EQ(rep->rows[i].predicted, rep->rows[i + 1].predicted) << rep->rows[i].run.model;
  }
}

// The optional precision column: FP8 GEMMs run at the FP8 rate; a value that
// is no precision is an error of the file.
TEST(PlanValidate, PrecisionColumn) {
  const std::string row = ",x,llama3-70b,,,,,8192,,h100-sxm,64,4,4,4,,true,full,1,128,,,,1,modern,";
  auto rep = ValidateTempCsv(
      "precision.csv", kBaseHeader + ",stack,precision,notes\nbf16" + row + "bf16,\nfp8" + row +
                           "FP8,\nnone" + row + ",\nwords" + row +
                           "\"FP8 (Transformer Engine, E4M3)\",\namp" + row + "amp_bf16,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 5u);
  EXPECT_EQ(rep->rows[1].prediction.layout.precision, Precision::kFP8);
  EXPECT_GT(rep->rows[1].predicted, 1.2 * rep->rows[0].predicted);  // tokens/s
  EXPECT_EQ(rep->rows[2].predicted, rep->rows[0].predicted);        // bf16 unless stated
  EXPECT_EQ(rep->rows[3].predicted, rep->rows[1].predicted);        // as tables write it
  EXPECT_EQ(rep->rows[4].predicted, rep->rows[0].predicted);
  auto bad = ValidateTempCsv("bad-precision.csv", kBaseHeader + ",stack,precision,notes\nbad" + row + "int4,\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("column precision = 'int4'; give bf16, fp16, fp8"), std::string::npos)
      << bad.status().message();
}

// The optional cp column: a row with cp > 1 runs its sequences split over cp
// GPUs (tp x cp x pp x dp = its GPUs), not read as data parallelism; cp 1 or
// empty is the plain run; a cp the stack lacks, or a sequence that 2 cp
// chunks do not divide, is the row's own error.
TEST(PlanValidate, ContextParallelColumn) {
  // tp 4 x pp 4 x dp 2 x cp 2 and tp 4 x pp 4 x dp 4 on 64 GPUs.
  const std::string row = ",x,llama3-70b,,,,,8192,,h100-sxm,64,4,4,2,,true,full,1,128,,,,1,modern,";
  const std::string dp4 = ",x,llama3-70b,,,,,8192,,h100-sxm,64,4,4,4,,true,full,1,128,,,,1,modern,";
  const std::string legacy = ",x,llama3-70b,,,,,8192,,h100-sxm,64,4,4,2,,true,full,1,128,,,,1,legacy,";
  const std::string odd = ",x,llama3-70b,,,,,8190,,h100-sxm,64,4,4,2,,true,full,1,128,,,,1,modern,";
  auto rep = ValidateTempCsv("cp.csv", kBaseHeader + ",stack,cp,notes\ncp2" + row + "2,\ncp1" + dp4 +
                                           "1,\nnone" + dp4 + ",\nlegacy" + legacy + "2,\nodd" + odd + "2,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 5u);
  EXPECT_TRUE(rep->rows[0].error.empty()) << rep->rows[0].error;
  EXPECT_EQ(rep->rows[0].prediction.layout.cp, 2);
  EXPECT_EQ(rep->rows[0].prediction.layout.dp, 2);
  EXPECT_GT(rep->rows[0].prediction.time_s.cp_comm, 0.0);
  // The same GPUs and work: context parallelism runs each GEMM on half the
  // rows and adds the ring's transfers, so it is slower here, not faster.
  EXPECT_LT(rep->rows[0].predicted, rep->rows[1].predicted);
  EXPECT_GT(rep->rows[0].predicted, 0.8 * rep->rows[1].predicted);
  EXPECT_TRUE(rep->rows[1].error.empty()) << rep->rows[1].error;
  EXPECT_EQ(rep->rows[1].predicted, rep->rows[2].predicted);
  EXPECT_NE(rep->rows[3].error.find("the legacy stack has no context parallelism"), std::string::npos)
      << rep->rows[3].error;
  EXPECT_NE(rep->rows[4].error.find("cp=2 cuts each sequence into 2 x cp = 4 chunks"), std::string::npos)
      << rep->rows[4].error;
  auto bad = ValidateTempCsv("bad-cp.csv", kBaseHeader + ",stack,cp,notes\nbad" + row + "0,\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("column cp = 0 is not a rank count"), std::string::npos)
      << bad.status().message();
}

// The optional `cluster` column names the catalog cluster a run used (its
// node and fabric); it must hold the row's GPU. Jean Zay's four 100 Gb/s links
// a node make a DP-heavy run slower than the A100's reference DGX cluster.
TEST(PlanValidate, ClusterColumnPicksTheRunsFabric) {
  const std::string row = ",x,gpt3-6.7b,,,,,2048,,a100-80g,64,1,1,64,,,none,2,512,,,,1,modern,";
  auto rep = ValidateTempCsv("cluster.csv", kBaseHeader + ",stack,cluster,notes\nref" + row +
                                                ",\njz" + row + "jean-zay-a100,\nh100" + row +
                                                "dgx-h100,\nnone" + row + "no-such-cluster,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 4u);
  ASSERT_TRUE(rep->rows[0].error.empty()) << rep->rows[0].error;
  ASSERT_TRUE(rep->rows[1].error.empty()) << rep->rows[1].error;
  EXPECT_LT(rep->rows[1].predicted, rep->rows[0].predicted);  // tokens/s
  EXPECT_GT(rep->rows[1].prediction.time_s.dp_comm, rep->rows[0].prediction.time_s.dp_comm);
  EXPECT_NE(
      rep->rows[2].error.find("cluster 'dgx-h100' has GPU 'h100-sxm', not the row's 'a100-80g'"),
      std::string::npos)
      << rep->rows[2].error;
  EXPECT_NE(rep->rows[3].error.find("no-such-cluster"), std::string::npos) << rep->rows[3].error;
}

// A row with only the GPU count and the global batch: the layout is searched.
TEST(PlanValidate, LayoutLessRowsAreSearched) {
  auto rep = ValidateTempCsv("layoutless.csv",
                             kBaseHeader + ",notes\nbare,x,llama3-8b,,,,,8192,,h100-sxm,64,,,,,,,,512,,0.4,,,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 1u);
  ASSERT_TRUE(rep->rows[0].error.empty()) << rep->rows[0].error;
  const Layout& l = rep->rows[0].prediction.layout;
  EXPECT_EQ(l.tp * l.pp * l.dp, 64);
  EXPECT_EQ(l.global_batch, 512);
}

// Hybrid sharding is the shard_group column's: a group of 8 ranks (a DGX
// A100 node) shards the state and all-reduces across the 4 groups; FSDP's
// ZeRO-3 unless the row says otherwise; notes naming HSDP change nothing.
TEST(PlanValidate, HybridShardingFromItsColumn) {
  const std::string row =
      ",x,llama2-7b,,,,,4096,,a100-80g,32,1,1,32,,,none,2,64,,,,1,pytorch-fsdp1,";
  auto rep = ValidateTempCsv("hsdp.csv", kBaseHeader + ",stack,shard_group,notes\nnode" + row +
                                             "8,\ncol" + row + "16,\nfull" + row + ",HSDP across nodes\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 3u);
  for (const auto& r : rep->rows) ASSERT_TRUE(r.error.empty()) << r.run.id << ": " << r.error;
  const Prediction& hsdp = rep->rows[0].prediction;
  EXPECT_EQ(hsdp.layout.zero, 3);
  EXPECT_EQ(hsdp.layout.shard_group, 8);
  EXPECT_EQ(hsdp.shard_replicas, 4);
  EXPECT_EQ(rep->rows[1].prediction.layout.shard_group, 16);
  EXPECT_EQ(rep->rows[1].prediction.shard_replicas, 2);
  EXPECT_EQ(rep->rows[2].prediction.shard_replicas, 1);
  // Sharded over 8 ranks instead of 32: more memory per GPU.
  EXPECT_GT(hsdp.memory.optimizer, rep->rows[2].prediction.memory.optimizer);
  auto bad =
      ValidateTempCsv("bad-hsdp.csv", kBaseHeader + ",stack,shard_group,notes\nbad" + row + "1,\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("column shard_group = 1 is not a sharding group"),
            std::string::npos)
      << bad.status().message();
}

// The recompute_layers column: full recomputation of that many layers of each
// model chunk; with another policy, or not a count, one error.
TEST(PlanValidate, RecomputeLayersColumn) {
  const std::string row = ",x,llama3-8b,,,,,8192,,h100-sxm,8,2,2,2,2,,";
  auto rep = ValidateTempCsv("rcl.csv", kBaseHeader + ",stack,recompute_layers,notes\nk2" + row +
                                            ",1,32,,,,1,modern,2,\nall" + row +
                                            "full,1,32,,,,1,modern,,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 2u);
  ASSERT_TRUE(rep->rows[0].error.empty()) << rep->rows[0].error;
  EXPECT_EQ(rep->rows[0].prediction.layout.recompute, Recompute::kFull);
  EXPECT_EQ(rep->rows[0].prediction.layout.recompute_layers, 2);
  EXPECT_EQ(rep->rows[1].prediction.layout.recompute_layers, 0);  // a stated "full": every layer
  EXPECT_GT(rep->rows[0].predicted, rep->rows[1].predicted);      // fewer layers rerun: faster
  auto sel = ValidateTempCsv("rcl-sel.csv", kBaseHeader + ",stack,recompute_layers,notes\nsel" +
                                                row + "selective,1,32,,,,1,modern,2,\n");
  ASSERT_FALSE(sel.ok());  // its one row: nothing could be predicted
  EXPECT_NE(sel.status().message().find("but recompute is selective"), std::string::npos)
      << sel.status().message();
  auto bad = ValidateTempCsv("rcl-bad.csv", kBaseHeader + ",stack,recompute_layers,notes\nbad" +
                                                row + ",1,32,,,,1,modern,0,\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("column recompute_layers = 0 is not a layer count"),
            std::string::npos)
      << bad.status().message();
}

// Issue 20 (g): a row `plan` accepts is predicted. tp 8 x pp 8 on 64 GPUs
// leaves dp 1, so the batch of 1,024 runs as 1,024 micro-batches; a stated
// ZeRO-1 (the distributed optimizer) has nothing to shard over and runs as
// ZeRO-0. A row no layout can hold says why, as `plan` would.
TEST(PlanValidate, StatedZeroWithOneDataParallelRankIsPredicted) {
  const std::string row = ",x,gpt3-175b,,,,,2048,,a100-80g,64,8,8,1,,,none,1,1024,,0.5,,,modern,";
  auto rep = ValidateTempCsv("g.csv",
                             kBaseHeader + ",stack,zero,notes\nz1" + row + "1,\nz0" + row + "0,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 2u);
  ASSERT_TRUE(rep->rows[0].error.empty()) << rep->rows[0].error;
  EXPECT_EQ(rep->rows[0].prediction.layout.zero, 1);
  EXPECT_EQ(rep->rows[0].prediction.layout.micro_batches(), 1024);
  EXPECT_DOUBLE_EQ(rep->rows[0].predicted, rep->rows[1].predicted);
  auto vpp = ValidateTempCsv("g-vpp.csv",
                             kBaseHeader +
                                 ",stack,notes\nds,x,gpt3-175b,,,,,2048,,a100-80g,1024,8,8,16,2,,"
                                 ",1,16384,,0.5,,,megatron-deepspeed,\n");
  ASSERT_FALSE(vpp.ok());
  EXPECT_NE(vpp.status().message().find(
                "the megatron-deepspeed stack has no interleaved pipeline schedule"),
            std::string::npos)
      << vpp.status().message();
}

// The grad_reduce column (or FSDP's name for it, reduce_dtype): fp32, or the
// compute precision's 16 bits as bf16 or compute; fp16 beside a bf16 run is
// the row's error, naming what it may be.
TEST(PlanValidate, GradReduceColumn) {
  const std::string row =
      ",x,llama2-7b,,,,,4096,,a100-80g,32,1,1,32,,,none,2,64,,,,1,pytorch-fsdp1,";
  auto rep = ValidateTempCsv("reduce.csv", kBaseHeader + ",stack,reduce_dtype,notes\nbf16" + row +
                                               "torch.bfloat16,\nfp32" + row + "float32,\ncompute" + row +
                                               "compute,\nauto" + row + "auto,\nfp16" + row + "fp16,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 5u);
  EXPECT_EQ(rep->rows[0].prediction.layout.grad_reduce, GradReduce::kCompute);
  EXPECT_EQ(rep->rows[1].prediction.layout.grad_reduce, GradReduce::kFp32);
  EXPECT_LT(rep->rows[0].prediction.memory.grads, rep->rows[1].prediction.memory.grads);
  EXPECT_DOUBLE_EQ(rep->rows[2].predicted, rep->rows[0].predicted);
  EXPECT_DOUBLE_EQ(rep->rows[3].predicted, rep->rows[1].predicted);  // the stack's default: fp32
  EXPECT_NE(rep->rows[4].error.find("column grad_reduce = 'fp16'; give fp32, or the compute precision's 16 "
                                    "bits (bf16 or compute), or auto"),
            std::string::npos)
      << rep->rows[4].error;
}

// Every knob the row leaves to the search is named beside the layout, a
// recomputation above all (it changes what TFLOP/s count); a legacy stack's
// conventions are named as such; a stated knob is not named. An unstated
// ZeRO stage is searched up to what the stack has, not taken as 0.
TEST(PlanValidate, UnstatedKnobsAreNamed) {
  const std::string gpt = ",x,gpt3-6.7b,,,,,2048,,a100-80g,64,2,2,16,";
  auto rep = ValidateTempCsv("unstated.csv", kBaseHeader + ",stack,zero,notes\nbare" + gpt + ",,,,256,,,,1,,,\nstated" +
                                                 gpt + "2,true,none,1,256,,,,1,,0,\nold" + gpt +
                                                 ",,,1,256,,,,1,legacy,,\n");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 3u);
  for (const auto& r : rep->rows) ASSERT_TRUE(r.error.empty()) << r.run.id << ": " << r.error;
  EXPECT_EQ(rep->rows[0].searched, (std::vector<std::string>{"vpp", "mb", "zero", "rc", "sp"}));
  EXPECT_TRUE(rep->rows[0].assumed.empty());
  EXPECT_TRUE(rep->rows[1].searched.empty());
  EXPECT_EQ(rep->rows[2].searched, (std::vector<std::string>{"vpp", "zero"}));
  EXPECT_EQ(rep->rows[2].assumed, (std::vector<std::string>{"rc", "sp"}));
  // legacy offers ZeRO-1 (Megatron-LM's distributed optimizer) to a row that
  // does not say, and the search takes it.
  const Prediction& old = rep->rows[2].prediction;
  EXPECT_EQ(old.layout.zero, 1);
  const std::string text = ValidationToText(*rep);
  EXPECT_NE(text.find("[searched: vpp mb zero rc sp]"), std::string::npos) << text;
  EXPECT_NE(text.find("[searched: vpp zero]  [legacy's convention: rc sp]"), std::string::npos) << text;
}

// No input comes from a row's notes: every file of tests/plan predicts the
// same with its notes emptied, and with notes that name every word the
// notes were once read for (fp16, HSDP, FULL_SHARD, /PURE, reduce_dtype,
// ZeRO stages, software).
TEST(PlanValidate, NotesNeverFeedAnInput) {
  const std::string loud =
      "fp16; HSDP HYBRID_SHARD FULL_SHARD SHARD_GRAD_OP ZeRO-1 zero2 distributed optimizer; prec=amp_fp16/PURE "
      "/DEFAULT; reduce_dtype=bf16 reduce_dtype=fp32; Megatron-LM (2021) DeepSpeed FSDP torchtitan compile";
  for (const char* file : {"published-runs", "korthikanti-2022", "mosaicml-microbatch-sweep", "mosaicml-more-runs",
                           "mt-nlg-2022", "narayanan-2021-scripts", "nemo-2024-fp8", "nemotron-2024",
                           "torchtitan-2024", "fms-fsdp-2024"}) {
    auto runs = ReadPublishedRuns(kRoot + "/tests/plan/" + file + ".csv");
    ASSERT_TRUE(runs.ok()) << runs.status().message();
    const ValidationReport as_is = ValidateRepoCsv(std::string(file) + ".csv", runs->size());
    for (const std::string& notes : {std::string(), loud}) {
      std::vector<PublishedRun> changed = *runs;
      HardwareCatalog cat;
      ASSERT_TRUE(cat.LoadDir(kRoot + "/configs/hardware").ok());
      for (size_t i = 0; i < changed.size(); ++i) {
        changed[i].notes = notes;
        auto r = ValidateRun(changed[i], cat, ShippedStacks(), kRoot + "/configs");
        ASSERT_TRUE(r.ok()) << changed[i].id << ": " << r.status().message();
        EXPECT_EQ(r->predicted, as_is.rows[i].predicted) << file << " " << changed[i].id;
        EXPECT_EQ(LayoutToString(r->prediction.layout), LayoutToString(as_is.rows[i].prediction.layout));
      }
    }
  }
}

// IBM and Meta's fms-fsdp runs (tests/plan/fms-fsdp-2024.csv): FSDP1 on 128
// A100, two of them hybrid-sharded within a node.
TEST(PlanValidate, FmsFsdpRunsWithinTheMeasuredBound) {
  const auto rep = ValidateRepoCsv("fms-fsdp-2024.csv", 4);
  ASSERT_EQ(rep.rows.size(), 4u);
  EXPECT_EQ(rep.rows[0].prediction.shard_replicas, 16);
  EXPECT_EQ(rep.rows[2].prediction.shard_replicas, 1);
  EXPECT_LT(rep.mape, kFmsFsdpBound) << "MAPE " << rep.mape;
}

}  // namespace
}  // namespace scaletrain::plan

namespace scaletrain::plan {
namespace {

// The range of every row of every tests/plan file holds the row's
// prediction, in the units of its metric.
TEST(PlanValidate, EveryRowsRangeHoldsItsPrediction) {
  for (const auto& [file, rows] :
       std::vector<std::pair<std::string, size_t>>{{"published-runs.csv", 26},
                                                   {"korthikanti-2022.csv", 8},
                                                   {"megatron-2019-v100.csv", 15}}) {
    const ValidationReport rep = ValidateRepoCsv(file, rows);
    for (const ValidationRow& r : rep.rows) {
      EXPECT_LT(r.predicted_lo, r.predicted) << file << " " << r.run.id;
      EXPECT_GT(r.predicted_hi, r.predicted) << file << " " << r.run.id;
      EXPECT_EQ(r.in_range, r.predicted_lo <= r.measured && r.measured <= r.predicted_hi)
          << r.run.id;
    }
  }
}

// On a small CSV whose measured figures are placed against the range the
// planner gives them: coverage is the share inside, the half-width the mean
// of each row's, and a step time's range is the throughput's inverted.
TEST(PlanValidate, RangeCoverageOfASmallCsv) {
  const std::string head = kBaseHeader + ",notes,stack\n";
  const std::string row = ",test,llama3-8b,8,,,,8192,,h100-sxm,8,1,1,8,,false,full,1,32,";
  auto first = ValidateTempCsv("range-first.csv", head + "a" + row + ",,,1000,,modern\n");
  ASSERT_TRUE(first.ok()) << first.status().message();
  const ValidationRow& r = first->rows[0];
  ASSERT_TRUE(r.error.empty()) << r.error;
  const double tps = r.predicted, lo = r.predicted_lo, hi = r.predicted_hi,
               step = r.prediction.step_time_s;
  auto csv = [&](const char* id, const std::string& measured) {
    return std::string(id) + row + measured + ",,modern\n";
  };
  auto rep = ValidateTempCsv("range.csv", head + csv("in", Fmt(",,,%.10g", tps)) +
                                              csv("below", Fmt(",,,%.10g", lo * 0.95)) +
                                              csv("above", Fmt(",,,%.10g", hi * 1.05)) +
                                              csv("step-in", Fmt(",,%.10g,", step)));
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->rows.size(), 4u);
  const std::vector<bool> inside = {true, false, false, true};
  double half_widths = 0;
  for (size_t i = 0; i < 4; ++i) {
    const ValidationRow& v = rep->rows[i];
    EXPECT_EQ(v.in_range, inside[i])
        << v.run.id << ": " << v.measured << " in " << v.predicted_lo << " - " << v.predicted_hi;
    half_widths += 100 * (v.predicted_hi - v.predicted_lo) / 2 / v.predicted;
  }
  EXPECT_DOUBLE_EQ(rep->coverage, 0.5);
  EXPECT_NEAR(rep->mean_half_width_pct, half_widths / 4, 1e-9);
  // The step time's range is the throughput's, inverted.
  const ValidationRow& s = rep->rows[3];
  EXPECT_EQ(s.metric, "step_s");
  EXPECT_NEAR(s.predicted_lo / s.predicted, tps / hi, 1e-9);
  EXPECT_NEAR(s.predicted_hi / s.predicted, tps / lo, 1e-9);
  const std::string text = ValidationToText(*rep);
  EXPECT_NE(text.find("coverage 50% (2 of 4 measured figures in their range)"), std::string::npos)
      << text;
  const auto json = ValidationToJson(*rep);
  EXPECT_DOUBLE_EQ(json["coverage"].get<double>(), 0.5);
  EXPECT_EQ(json["rows"][1]["predicted_range"][0].get<double>(), rep->rows[1].predicted_lo);
  EXPECT_FALSE(json["rows"][1]["in_range"].get<bool>());
}

// Megatron-LM on V100 of DGX-2H: every row predicted in fp16 on the legacy
// stack, on the cluster it names. The 2020 release's two step times (the
// same models a year of software later) are predicted within what they
// measure, +2.8% and -1.9%; the 2019 paper's rows are 1.6x slower software.
TEST(PlanValidate, Megatron2019V100Runs) {
  const ValidationReport rep = ValidateRepoCsv("megatron-2019-v100.csv", 15);
  for (const ValidationRow& r : rep.rows) {
    EXPECT_EQ(r.stack, "legacy") << r.run.id;
    EXPECT_EQ(r.prediction.layout.precision, Precision::kFP16) << r.run.id;
    if (r.run.id.starts_with("mlm20")) {
      EXPECT_LT(std::fabs(r.error_pct), 3.0) << r.run.id;
      EXPECT_TRUE(r.in_range) << r.run.id;
    }
  }
  EXPECT_LT(rep.mape, kMegatron2019Bound) << "MAPE " << rep.mape;
}

}  // namespace
}  // namespace scaletrain::plan
