// End-to-end tests of the training loop on a slice of Tiny Shakespeare.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "data/tokenizer.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace scaletrain {
namespace {

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("st_trainer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    PrepareOptions p;
    p.input = std::string(ST_SOURCE_DIR) + "/data/tinyshakespeare.txt";
    p.output_dir = (dir_ / "data").string();
    p.val_fraction = 0.1;
    auto r = PrepareTextData(p);
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunConfig Tiny(std::vector<std::string> extra = {}) {
    std::vector<std::string> sets = {
        "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.block_size=32",
        "training.steps=20", "training.global_batch_size=8", "training.micro_batch_size=4",
        "training.lr=3e-3", "training.min_lr=3e-4", "training.warmup_steps=5",
        "training.eval_interval=10", "training.eval_steps=2", "training.threads=1",
        "training.sample_tokens=0", "checkpoint.interval=10", "checkpoint.keep_last=5",
        "data.train=\"" + (dir_ / "data/train.bin").string() + "\"",
        "data.val=\"" + (dir_ / "data/val.bin").string() + "\""};
    sets.insert(sets.end(), extra.begin(), extra.end());
    auto c = ParseRunConfig("", sets, "test");
    EXPECT_TRUE(c.ok()) << c.status().message();
    return *c;
  }

  static TrainOptions Opts(RunConfig config, std::string run_dir, std::string resume) {
    TrainOptions o;
    o.config = std::move(config);
    o.run_dir = std::move(run_dir);
    o.resume = std::move(resume);
    o.quiet = true;
    return o;
  }

  static std::vector<nlohmann::json> Metrics(const fs::path& run) {
    std::vector<nlohmann::json> out;
    std::ifstream in(run / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  fs::path dir_;
};

TEST_F(TrainerTest, WritesRunDirectory) {
  TrainOptions o = Opts(Tiny(), (dir_ / "run").string(), "");
  auto r = RunTraining(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->steps_run, 20);
  EXPECT_TRUE(fs::exists(dir_ / "run/config.resolved.toml"));
  auto m = Metrics(dir_ / "run");
  ASSERT_EQ(m.size(), 20u);
  for (const char* k : {"step", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s"}) {
    EXPECT_TRUE(m[0].contains(k)) << k;
  }
  EXPECT_EQ(m[19]["step"], 20);
  EXPECT_TRUE(m[9].contains("val_loss"));
  EXPECT_FALSE(m[8].contains("val_loss"));
  // Sharded checkpoints (one file per rank), the manifest written last.
  EXPECT_TRUE(fs::exists(dir_ / "run/checkpoints/step_00000010/shard-00000.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "run/checkpoints/step_00000020/manifest.json"));
  std::ifstream manifest(dir_ / "run/checkpoints/step_00000020/manifest.json");
  const nlohmann::json mf = nlohmann::json::parse(manifest);
  EXPECT_EQ(mf["version"], 2);
  EXPECT_EQ(mf["step"], 20);
  EXPECT_EQ(mf["files"]["shard-00000.safetensors"]["sha256"].get<std::string>().size(), 64u);
  // The resolved config parses back to the same config.
  auto again = LoadRunConfig((dir_ / "run/config.resolved.toml").string(), {});
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(RunConfigToToml(*again), RunConfigToToml(o.config));
}

// DESIGN: a resumed run reproduces the straight run exactly.
TEST_F(TrainerTest, ResumeReproducesStraightRunBitwise) {
  TrainOptions straight = Opts(Tiny(), (dir_ / "a").string(), "");
  ASSERT_TRUE(RunTraining(straight).ok());
  TrainOptions resumed = Opts(Tiny(), (dir_ / "b").string(),
                       (dir_ / "a/checkpoints/step_00000010").string());
  auto r = RunTraining(resumed);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->steps_run, 10);
  auto a = Metrics(dir_ / "a"), b = Metrics(dir_ / "b");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(b[i]["step"], 11 + i);
    EXPECT_EQ(b[i]["loss"].get<double>(), a[10 + i]["loss"].get<double>()) << "step " << 11 + i;
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[10 + i]["grad_norm"].get<double>());
  }
  EXPECT_EQ(b[9]["val_loss"].get<double>(), a[19]["val_loss"].get<double>());
}

TEST_F(TrainerTest, ResumeFromRunDirectoryContinuesInPlace) {
  TrainOptions first = Opts(Tiny({"training.steps=10"}), (dir_ / "run").string(), "");
  ASSERT_TRUE(RunTraining(first).ok());
  TrainOptions more = Opts(Tiny({"training.steps=20"}), "", (dir_ / "run").string());
  auto r = RunTraining(more);
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto m = Metrics(dir_ / "run");
  ASSERT_EQ(m.size(), 20u);
  EXPECT_EQ(m[10]["step"], 11);
}

TEST_F(TrainerTest, RefusesToOverwriteARun) {
  TrainOptions o = Opts(Tiny({"training.steps=2"}), (dir_ / "run").string(), "");
  ASSERT_TRUE(RunTraining(o).ok());
  const auto before = fs::file_size(dir_ / "run/metrics.jsonl");
  auto r = RunTraining(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("already holds a run"), std::string::npos);
  EXPECT_EQ(fs::file_size(dir_ / "run/metrics.jsonl"), before);
}

TEST_F(TrainerTest, CheckpointOfOtherModelIsRefusedAndLeftIntact) {
  TrainOptions o = Opts(Tiny({"training.steps=10"}), (dir_ / "run").string(), "");
  ASSERT_TRUE(RunTraining(o).ok());
  const fs::path ck = dir_ / "run/checkpoints/step_00000010/shard-00000.safetensors";
  const auto size = fs::file_size(ck);
  const auto mtime = fs::last_write_time(ck);
  TrainOptions other = Opts(Tiny({"model.n_embd=64"}), (dir_ / "other").string(), (dir_ / "run").string());
  auto r = RunTraining(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("different model"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("config the checkpoint was trained with"), std::string::npos);
  EXPECT_EQ(fs::file_size(ck), size);
  EXPECT_EQ(fs::last_write_time(ck), mtime);
  EXPECT_FALSE(fs::exists(dir_ / "other/metrics.jsonl"));
}

TEST_F(TrainerTest, TensorParallelNotDividingHeadsListsValidSizes) {
  // n_head = 2: tp 3 cannot split the heads; the message lists 1 and 2.
  TrainOptions o = Opts(Tiny({"parallel.tp=3"}), (dir_ / "run").string(), "");
  auto r = RunTraining(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("use tp in {1, 2}"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

TEST_F(TrainerTest, PipelineDeeperThanTheModelIsRefused) {
  TrainOptions o = Opts(Tiny({"parallel.pp=4"}), (dir_ / "run").string(), "");
  auto r = RunTraining(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pp x vpp <= 2"), std::string::npos) << r.status().message();
}

TEST_F(TrainerTest, WorldSizeMismatchSaysHowToLaunch) {
  TrainOptions o = Opts(Tiny({"parallel.dp=2"}), (dir_ / "run").string(), "");
  o.backend = "self";
  auto r = RunTraining(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mpirun -np 2"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(dir_ / "run/metrics.jsonl"));
}

TEST_F(TrainerTest, MissingShardNamesFileAndFix) {
  auto cfg = Tiny({"data.train=\"" + (dir_ / "nope/train.bin").string() + "\""});
  auto r = RunTraining(Opts(cfg, (dir_ / "run").string(), ""));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nope/train.bin"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("data prepare"), std::string::npos) << r.status().message();
}

// Training learns: a tiny model for 500 steps must get well below the loss
// of guessing among 65 characters (ln 65 = 4.17) and of the unigram
// distribution of Shakespeare's characters (about 3.3 nats), and below 2.3
// (measured: 2.108 with 1 thread, OpenBLAS, this seed).
TEST_F(TrainerTest, LearnsShakespeare) {
  auto cfg = Tiny({"training.steps=500", "training.lr=1e-2", "training.eval_interval=0", "training.eval_steps=8",
                   "checkpoint.interval=0", "model.n_embd=64", "model.n_head=4",
                   "model.block_size=64", "training.global_batch_size=16",
                   "training.micro_batch_size=16", "training.warmup_steps=20"});
  auto r = RunTraining(Opts(cfg, (dir_ / "run").string(), ""));
  ASSERT_TRUE(r.ok()) << r.status().message();
  RecordProperty("final_val_loss", std::to_string(r->final_val_loss));
  std::printf("validation loss after 500 steps: %.4f\n", r->final_val_loss);
  EXPECT_LT(r->final_val_loss, 2.3);
}

}  // namespace
}  // namespace scaletrain
