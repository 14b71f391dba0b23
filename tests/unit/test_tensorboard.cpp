// TensorBoard's record framing (telemetry/tensorboard.h) against values
// computed another way; the files themselves are read back by TensorBoard's
// own reader in tests/cli/test_tensorboard.sh.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "telemetry/tensorboard.h"

namespace scaletrain {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValues) {
  // RFC 3720 (iSCSI) B.4 and the CRC catalogue's check value of "123456789".
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(TfRecord, FramesLengthAndPayloadWithMaskedChecksums) {
  const std::string payload = "hello";
  const std::string r = TfRecord(payload);
  ASSERT_EQ(r.size(), 8 + 4 + payload.size() + 4);
  uint64_t length = 0;
  std::memcpy(&length, r.data(), 8);
  EXPECT_EQ(length, payload.size());
  uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 12 + payload.size(), 4);
  // The mask: rotate right by 15, add 0xa282ead8.
  const uint32_t c = Crc32c(payload.data(), payload.size());
  EXPECT_EQ(data_crc, ((c >> 15) | (c << 17)) + 0xa282ead8u);
  EXPECT_EQ(length_crc, MaskedCrc32c(r.data(), 8));
  EXPECT_EQ(r.substr(12, payload.size()), payload);
}

TEST(StepScalars, HoldOptionalFiguresOnlyWhereTheRecordHasThem) {
  StepRecord rec;
  rec.step = 3;
  rec.loss = 2.5;
  auto has = [](const std::vector<std::pair<std::string, double>>& s, const std::string& tag) {
    for (const auto& [t, v] : s)
      if (t == tag) return true;
    return false;
  };
  EXPECT_TRUE(has(StepScalars(rec), "train/loss"));
  EXPECT_FALSE(has(StepScalars(rec), "val/loss"));
  EXPECT_FALSE(has(StepScalars(rec), "comm/dp_bytes"));
  rec.val_loss = 2.0;
  rec.groups_used[static_cast<int>(CommGroup::kDp)] = true;
  EXPECT_TRUE(has(StepScalars(rec), "val/loss"));
  EXPECT_TRUE(has(StepScalars(rec), "comm/dp_bytes"));
}

}  // namespace
}  // namespace scaletrain
