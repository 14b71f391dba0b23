#include <gtest/gtest.h>

#include "core/config.h"

namespace scaletrain {
namespace {

const char* kGood = R"(
[model]
n_layer = 2
n_head = 2
n_embd = 16
block_size = 8
[training]
steps = 5
global_batch_size = 8
micro_batch_size = 4
lr = 0.01
)";

TEST(Config, ParsesAndFillsDefaults) {
  auto c = ParseRunConfig(kGood, {}, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.n_layer, 2);
  EXPECT_EQ(c->training.micro_batch_size, 4);
  EXPECT_DOUBLE_EQ(c->training.lr, 0.01);
  EXPECT_EQ(c->parallel.dp, 1);             // default
  EXPECT_EQ(c->training.seed, 1337);        // default
}

TEST(Config, OverridesApplyWithTypes) {
  auto c = ParseRunConfig(kGood, {"training.steps=42", "parallel.schedule=gpipe", "training.lr=3e-4",
                                  "data.train=\"a b.bin\""}, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->training.steps, 42);
  EXPECT_EQ(c->parallel.schedule, "gpipe");
  EXPECT_DOUBLE_EQ(c->training.lr, 3e-4);
  EXPECT_EQ(c->data.train, "a b.bin");
}

TEST(Config, IntegerAcceptedWhereNumberExpected) {
  auto c = ParseRunConfig(kGood, {"training.lr=1"}, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->training.lr, 1.0);
}

TEST(Config, UnknownKeyNamesKeyAndValidKeys) {
  auto c = ParseRunConfig(std::string(kGood) + "n_layers = 3\n", {}, "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("training.n_layers"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("valid keys"), std::string::npos);
}

// The message of parsing kGood + `extra` with `overrides`; "" where it parses.
std::string ConfigError(const std::string& extra, const std::vector<std::string>& overrides) {
  auto c = ParseRunConfig(std::string(kGood) + extra, overrides, "t.toml");
  return c.ok() ? "" : c.status().message();
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(Config, UnknownKeySuggestsTheNearestAndBlamesItsSource) {
  // In the file: the file is named, and the nearest key suggested.
  std::string m = ConfigError("stepz = 3\n", {});
  EXPECT_TRUE(
      StartsWith(m, "t.toml: unknown config key 'training.stepz'; did you mean 'training.steps'?"))
      << m;
  // From --set: the flag is named, not the file it did not come from.
  m = ConfigError("", {"training.steps=2", "model.n_layr=2"});
  EXPECT_TRUE(StartsWith(
      m, "--set model.n_layr: unknown config key 'model.n_layr'; did you mean 'model.n_layer'?"))
      << m;
  // A key of another section: that section's key, however far the names are.
  m = ConfigError("", {"training.zero=1"});
  EXPECT_NE(m.find("did you mean 'parallel.zero'?"), std::string::npos) << m;
  // Nothing near: no suggestion, the valid keys still listed.
  m = ConfigError("", {"training.qqqqqqqqqqqq=1"});
  EXPECT_EQ(m.find("did you mean"), std::string::npos) << m;
  EXPECT_NE(m.find("'training.qqqqqqqqqqqq'; valid keys in [training] are"), std::string::npos)
      << m;
  // A section misspelt on the command line.
  m = ConfigError("", {"trainin.steps=3"});
  EXPECT_TRUE(StartsWith(
      m, "--set trainin.steps: unknown config section 'trainin'; did you mean 'training'?"))
      << m;
}

TEST(Config, UnknownSection) {
  auto c = ParseRunConfig(std::string(kGood) + "[optim]\nlr = 1\n", {}, "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'optim'"), std::string::npos) << c.status().message();
}

TEST(Config, WrongTypeNamesKeyAndTypes) {
  auto c = ParseRunConfig(kGood, {"model.n_layer=\"four\""}, "t.toml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("model.n_layer"), std::string::npos) << m;
  EXPECT_NE(m.find("integer"), std::string::npos) << m;
  EXPECT_NE(m.find("string"), std::string::npos) << m;
}

TEST(Config, FloatForIntegerIsAnError) {
  auto c = ParseRunConfig(kGood, {"training.steps=5.5"}, "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("training.steps"), std::string::npos);
}

TEST(Config, HeadsMustDivideWidth) {
  auto c = ParseRunConfig(kGood, {"model.n_head=3"}, "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not divisible by model.n_head"), std::string::npos)
      << c.status().message();
}

TEST(Config, BatchMustDivideIntoMicroBatchesAndSuggestsValues) {
  auto c = ParseRunConfig(kGood, {"training.global_batch_size=10"}, "t.toml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("multiple of micro_batch_size x dp"), std::string::npos) << m;
  EXPECT_NE(m.find("8 or 12"), std::string::npos) << m;
}

TEST(Config, BadOverrideSyntax) {
  auto c = ParseRunConfig(kGood, {"steps=3"}, "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("section.key=value"), std::string::npos);
}

TEST(Config, TomlSyntaxErrorHasLine) {
  auto c = ParseRunConfig("[model]\nn_layer = = 2\n", {}, "bad.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad.toml:2"), std::string::npos) << c.status().message();
}

TEST(Config, MissingFile) {
  auto c = LoadRunConfig("/nonexistent/x.toml", {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

TEST(Config, ResolvedTomlRoundTrips) {
  auto c = ParseRunConfig(kGood, {"parallel.sp=true", "data.val=\"v.bin\""}, "t.toml");
  ASSERT_TRUE(c.ok());
  auto again = ParseRunConfig(RunConfigToToml(*c), {}, "resolved.toml");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(RunConfigToToml(*again), RunConfigToToml(*c));
  EXPECT_TRUE(again->parallel.sp);
  EXPECT_EQ(again->data.val, "v.bin");
}

}  // namespace
}  // namespace scaletrain
