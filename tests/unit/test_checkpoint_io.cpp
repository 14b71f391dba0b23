// Safetensors files and checkpoint directories: exact bytes on disk, strict
// rejection of damaged files, and the atomic write / resolve / prune rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "core/sha256.h"
#include "test_files.h"

namespace scaletrain {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "st_ckpt_io_XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed for " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

using test_files::ReadBytes;
using test_files::WriteBytes;

std::string U64Le(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

// A safetensors file built by hand: length field, header as given (padded
// with spaces to `pad_to` when pad_to > 0), then the data bytes.
std::string RawFile(std::string header, const std::string& data, size_t pad_to = 8) {
  if (pad_to > 0) {
    while ((8 + header.size()) % pad_to != 0) header.push_back(' ');
  }
  return U64Le(header.size()) + header + data;
}

std::string FloatBytes(const std::vector<float>& v) {
  std::string out(v.size() * sizeof(float), '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<float> Floats(const NamedTensor& t) {
  const auto* p = static_cast<const float*>(t.data);
  return std::vector<float>(p, p + NumElements(t.shape));
}

// Opens `path` expecting failure with `code`, and checks the message names
// the file and contains `needle`.
void ExpectOpenFails(const std::string& path, StatusCode code, const std::string& needle) {
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok()) << "opened a damaged file: " << path;
  EXPECT_EQ(f.status().code(), code) << f.status().message();
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find(needle), std::string::npos)
      << "expected '" << needle << "' in: " << f.status().message();
}

TEST(Safetensors, RoundTripsDtypesShapesAndMetadata) {
  TempDir dir;
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f, 1e-7f, -1e30f};
  const std::vector<double> f64 = {3.141592653589793, -1.0 / 3.0, 1e300, 0.5};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc020, 0x3e20};  // 1.0, -2.5, 0.15625
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000};           // 1.0, -2.0
  const std::vector<int32_t> i32 = {7, -8, 2147483647, -2147483647 - 1};
  const int64_t scalar = -1234567890123;
  const std::vector<uint8_t> u8 = {0, 1, 254, 255, 128};
  const std::vector<NamedTensor> tensors = {
      {"layer.0.w", DType::kF32, {2, 3}, f32.data()}, {"f64", DType::kF64, {4}, f64.data()},
      {"bf16", DType::kBF16, {3}, bf16.data()},       {"f16", DType::kF16, {1, 2}, f16.data()},
      {"i32", DType::kI32, {2, 2}, i32.data()},       {"scalar", DType::kI64, {}, &scalar},
      {"empty", DType::kF32, {0, 4}, nullptr},        {"u8", DType::kU8, {5}, u8.data()},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "42"}};
  const std::string path = dir.File("t.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, meta).ok());

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const auto& got = (*f)->tensors();
  ASSERT_EQ(got.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    EXPECT_EQ(got[i].name, tensors[i].name);  // writer's order survives
    EXPECT_EQ(got[i].dtype, tensors[i].dtype);
    EXPECT_EQ(got[i].shape, tensors[i].shape);
    const size_t bytes = NumElements(tensors[i].shape) * DTypeSizeBytes(tensors[i].dtype);
    if (bytes > 0) {
      EXPECT_EQ(std::memcmp(got[i].data, tensors[i].data, bytes), 0);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(got[i].data) % DTypeSizeBytes(got[i].dtype), 0u);
    }
  }
  EXPECT_EQ((*f)->metadata(), meta);
  const NamedTensor* s = (*f)->Find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(*static_cast<const int64_t*>(s->data), scalar);
  EXPECT_EQ((*f)->Find("absent"), nullptr);
  EXPECT_EQ((*f)->path(), path);

  // Bytes: 8 + header + data, with the header padded to 8.
  const std::string raw = ReadBytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 24 + 32 + 6 + 4 + 16 + 8 + 0 + 5);
}

TEST(Safetensors, HeaderIsByteExact) {
  TempDir dir;
  const std::vector<float> w = {1.0f, -2.0f};
  const std::string path = dir.File("w.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", DType::kF32, {2}, w.data()}}).ok());
  // 8 + 54 bytes of JSON + 2 spaces make the data start at 64.
  const std::string json = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(json.size(), 54u);
  const std::string expected = std::string("\x38\0\0\0\0\0\0\0", 8) + json + "  " +
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  EXPECT_EQ(ReadBytes(path), expected);
}

TEST(Safetensors, MetadataGoesFirstAndOnlyWhenPresent) {
  TempDir dir;
  const uint8_t b = 9;
  const std::string path = dir.File("m.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"b", DType::kU8, {1}, &b}}, {{"k", "v"}}).ok());
  const std::string json =
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_EQ(ReadBytes(path), RawFile(json, "\x09"));
}

TEST(Safetensors, TruncatedDataIsDataLossNamingFile) {
  TempDir dir;
  const std::vector<float> w(100, 0.5f);
  const std::string path = dir.File("cut.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", DType::kF32, {100}, w.data()}}).ok());
  fs::resize_file(path, fs::file_size(path) - 3);
  ExpectOpenFails(path, StatusCode::kDataLoss, "truncated");
  ExpectOpenFails(path, StatusCode::kDataLoss, "past the end of the data area");
}

TEST(Safetensors, TruncatedHeaderIsDataLoss) {
  TempDir dir;
  const std::string path = dir.File("cut.safetensors");
  const std::string full = RawFile(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  WriteBytes(path, full.substr(0, 20));
  ExpectOpenFails(path, StatusCode::kDataLoss, "header length");
  WriteBytes(path, full.substr(0, 5));
  ExpectOpenFails(path, StatusCode::kDataLoss, "shorter than the 8-byte");
  WriteBytes(path, "");
  ExpectOpenFails(path, StatusCode::kDataLoss, "truncated");
}

TEST(Safetensors, CorruptJsonIsDataLoss) {
  TempDir dir;
  const std::string path = dir.File("bad.safetensors");
  WriteBytes(path, RawFile(R"({"w":{"dtype":"F32","shape":[1],"data_offs)", "abcd"));
  ExpectOpenFails(path, StatusCode::kDataLoss, "does not parse");
  WriteBytes(path, RawFile(R"([1, 2])", ""));
  ExpectOpenFails(path, StatusCode::kDataLoss, "JSON");
  WriteBytes(path, RawFile(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""));
  ExpectOpenFails(path, StatusCode::kDataLoss, "shape");
  WriteBytes(path, RawFile(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd"));
  ExpectOpenFails(path, StatusCode::kDataLoss, "data_offsets");
  WriteBytes(path, RawFile(R"({"__metadata__":{"k":3}})", ""));
  ExpectOpenFails(path, StatusCode::kDataLoss, "not a string");
}

TEST(Safetensors, UnknownDtypeIsDataLoss) {
  TempDir dir;
  const std::string path = dir.File("q.safetensors");
  WriteBytes(path, RawFile(R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", "x"));
  ExpectOpenFails(path, StatusCode::kDataLoss, "Q7");
}

TEST(Safetensors, OffsetsOutOfRangeOrInconsistentAreDataLoss) {
  TempDir dir;
  const std::string path = dir.File("o.safetensors");
  WriteBytes(path, RawFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"));
  ExpectOpenFails(path, StatusCode::kDataLoss, "past the end");
  WriteBytes(path, RawFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,16]}})",
                           std::string(16, 'a')));
  ExpectOpenFails(path, StatusCode::kDataLoss, "needs 8 bytes");
  WriteBytes(path, RawFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})",
                           std::string(16, 'a')));
  ExpectOpenFails(path, StatusCode::kDataLoss, "begin <= end");
}

TEST(Safetensors, OverlappingOffsetsAreDataLoss) {
  TempDir dir;
  const std::string path = dir.File("ov.safetensors");
  WriteBytes(path, RawFile(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                           std::string(12, 'a')));
  ExpectOpenFails(path, StatusCode::kDataLoss, "overlapping");
  // Adjacent spans and an empty tensor between them are fine.
  WriteBytes(path, RawFile(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                           R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                           R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                           FloatBytes({1.0f, 2.0f})));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ((*f)->tensors().size(), 3u);
  EXPECT_EQ((*f)->tensors()[0].name, "a");  // file order, not header order
  EXPECT_EQ(Floats(*(*f)->Find("b")), std::vector<float>{2.0f});
}

TEST(Safetensors, DuplicateNameIsDataLoss) {
  TempDir dir;
  const std::string path = dir.File("dup.safetensors");
  WriteBytes(path, RawFile(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                           "xy"));
  ExpectOpenFails(path, StatusCode::kDataLoss, "'a' twice");
}

TEST(Safetensors, UnpaddedHeaderFromOtherWritersReadsAligned) {
  TempDir dir;
  const std::string path = dir.File("u.safetensors");
  const std::string json = R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  std::string raw = RawFile(json, "", /*pad_to=*/0);
  ASSERT_NE(raw.size() % 8, 0u) << "test needs an unaligned data start";
  const double values[2] = {2.5, -7.125};
  raw.append(reinterpret_cast<const char*>(values), sizeof(values));
  WriteBytes(path, raw);
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const NamedTensor* d = (*f)->Find("d");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d->data) % 8, 0u);
  EXPECT_EQ(std::memcmp(d->data, values, sizeof(values)), 0);
}

TEST(Safetensors, MissingFileIsNotFound) {
  TempDir dir;
  ExpectOpenFails(dir.File("nope.safetensors"), StatusCode::kNotFound, "no such file");
}

TEST(Safetensors, WriterRejectsAmbiguousInput) {
  TempDir dir;
  const float x = 1.0f;
  const std::string path = dir.File("x.safetensors");
  Status dup = WriteSafetensors(path, {{"a", DType::kF32, {1}, &x}, {"a", DType::kF32, {1}, &x}});
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  Status reserved = WriteSafetensors(path, {{"__metadata__", DType::kF32, {1}, &x}});
  EXPECT_EQ(reserved.code(), StatusCode::kInvalidArgument);
  Status negative = WriteSafetensors(path, {{"a", DType::kF32, {-1}, &x}});
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  Status no_data = WriteSafetensors(path, {{"a", DType::kF32, {1}, nullptr}});
  EXPECT_EQ(no_data.code(), StatusCode::kInvalidArgument);
  Status no_dir = WriteSafetensors(dir.File("missing/x.safetensors"), {});
  EXPECT_EQ(no_dir.code(), StatusCode::kIoError);
}

// An independent reader: safetensors.torch if installed, otherwise torch fed
// by a header parsed in Python. Checks values computed on the Python side.
constexpr char kPythonCheck[] = R"PY(
import json, struct, sys
path, mode = sys.argv[1], sys.argv[2]
import torch
expected = {
    "w": torch.tensor([[i * 0.5 - 1.0 for i in range(3)] for _ in range(2)], dtype=torch.float32)
         + torch.tensor([[0.0], [10.0]]),
    "ids": torch.tensor([-3, 0, 1 << 40], dtype=torch.int64),
    "half": torch.tensor([1.0, -2.5, 0.15625], dtype=torch.bfloat16),
    "scale": torch.tensor(0.25, dtype=torch.float64),
}
with open(path, "rb") as f:
    raw = f.read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
assert (8 + n) % 8 == 0, "data not 8-byte aligned"
assert header.get("__metadata__") == {"format": "pt"}, header.get("__metadata__")
names = [k for k in header if k != "__metadata__"]
assert names == ["w", "ids", "half", "scale"], names
if mode == "safetensors":
    from safetensors.torch import load_file
    got = load_file(path)
else:
    import numpy as np
    data = raw[8 + n:]
    np_types = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "BF16": np.int16}
    got = {}
    end = 0
    for k in names:
        info = header[k]
        b, e = info["data_offsets"]
        assert b == end, (k, b, end)
        end = e
        arr = np.frombuffer(data[b:e], dtype=np_types[info["dtype"]]).reshape(info["shape"])
        t = torch.from_numpy(arr.copy())
        got[k] = t.view(torch.bfloat16) if info["dtype"] == "BF16" else t
    assert end == len(data), (end, len(data))
for k, want in expected.items():
    g = got[k]
    assert g.dtype == want.dtype, (k, g.dtype, want.dtype)
    assert tuple(g.shape) == tuple(want.shape), (k, g.shape, want.shape)
    assert torch.equal(g, want), (k, g, want)
print("python-ok", mode)
)PY";

TEST(Safetensors, LoadsInPython) {
  const std::string python = "/usr/bin/python3";
  if (!fs::exists(python)) GTEST_SKIP() << python << " is not installed";
  std::string mode;
  if (std::system((python + " -c 'import safetensors.torch' >/dev/null 2>&1").c_str()) == 0) {
    mode = "safetensors";
  } else if (std::system((python + " -c 'import torch, numpy' >/dev/null 2>&1").c_str()) == 0) {
    mode = "torch";
  } else {
    GTEST_SKIP() << "neither the safetensors nor the torch+numpy Python modules are "
                    "installed, so there is no independent reader to check against";
  }
  TempDir dir;
  std::vector<float> w(6);
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) w[r * 3 + c] = c * 0.5f - 1.0f + r * 10.0f;
  }
  const std::vector<int64_t> ids = {-3, 0, int64_t{1} << 40};
  const std::vector<uint16_t> half = {0x3f80, 0xc020, 0x3e20};
  const double scale = 0.25;
  const std::string path = dir.File("py.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"w", DType::kF32, {2, 3}, w.data()},
                                {"ids", DType::kI64, {3}, ids.data()},
                                {"half", DType::kBF16, {3}, half.data()},
                                {"scale", DType::kF64, {}, &scale}},
                               {{"format", "pt"}})
                  .ok());
  const std::string script = dir.File("check.py");
  WriteBytes(script, kPythonCheck);
  const std::string out = dir.File("py.out");
  const std::string cmd = python + " " + script + " " + path + " " + mode + " >" + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "python (" << mode << ") rejected the file:\n" << ReadBytes(out);
  EXPECT_NE(ReadBytes(out).find("python-ok"), std::string::npos) << ReadBytes(out);
}

// --- checkpoint directories -------------------------------------------------

struct StepData {
  std::vector<float> w;
  std::vector<float> m;
  CheckpointContents contents;
};

// A checkpoint whose values depend on `step`, so a mix-up shows.
StepData MakeStep(int64_t step, size_t n = 4) {
  StepData d;
  for (size_t i = 0; i < n; ++i) {
    d.w.push_back(static_cast<float>(step) + 0.25f * i);
    d.m.push_back(-static_cast<float>(step) - 0.5f * i);
  }
  d.contents.model = {{"w", DType::kF32, {static_cast<int64_t>(n)}, d.w.data()}};
  d.contents.optimizer = {{"w.m", DType::kF32, {static_cast<int64_t>(n)}, d.m.data()}};
  d.contents.manifest = {{"step", step}, {"model", "tiny"}};
  return d;
}

std::vector<std::string> Entries(const fs::path& dir) { return test_files::SortedListing(dir); }

TEST(Checkpoint, DirNameHasEightDigits) {
  EXPECT_EQ(CheckpointDirName(10), "step_00000010");
  EXPECT_EQ(CheckpointDirName(0), "step_00000000");
  EXPECT_EQ(CheckpointDirName(123456789), "step_123456789");
}

TEST(Checkpoint, WriteResolveRead) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  StepData d = MakeStep(10);
  ASSERT_TRUE(WriteCheckpoint(root.string(), 10, d.contents).ok());
  EXPECT_EQ(Entries(root), std::vector<std::string>{"step_00000010"});
  const fs::path ckpt = root / "step_00000010";
  EXPECT_EQ(Entries(ckpt), (std::vector<std::string>{"manifest.json", "model.safetensors",
                                                     "optimizer.safetensors"}));
  EXPECT_TRUE(ValidateCheckpoint(ckpt.string()).ok());

  auto from_run = ResolveCheckpoint(run.path().string());
  ASSERT_TRUE(from_run.ok()) << from_run.status().message();
  EXPECT_EQ(fs::path(*from_run), ckpt);
  auto from_dir = ResolveCheckpoint(ckpt.string());
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().message();
  EXPECT_EQ(*from_dir, ckpt.string());

  auto loaded = ReadCheckpoint(ckpt.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->manifest["step"], 10);
  EXPECT_EQ(loaded->manifest["model"], "tiny");
  EXPECT_EQ(loaded->manifest["files"]["model.safetensors"]["bytes"],
            fs::file_size(ckpt / "model.safetensors"));
  EXPECT_EQ(loaded->manifest["files"]["optimizer.safetensors"]["bytes"],
            fs::file_size(ckpt / "optimizer.safetensors"));
  // The checksum is the file's SHA-256 (from OpenSSL; checked here against
  // the value Python's hashlib gives for the test vector "abc").
  EXPECT_EQ(Sha256Hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto digest = Sha256OfFile((ckpt / "model.safetensors").string());
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(loaded->manifest["files"]["model.safetensors"]["sha256"], *digest);
  EXPECT_EQ(loaded->manifest["files"].size(), 2u);
  ASSERT_NE(loaded->model->Find("w"), nullptr);
  EXPECT_EQ(Floats(*loaded->model->Find("w")), d.w);
  ASSERT_NE(loaded->optimizer, nullptr);
  EXPECT_EQ(Floats(*loaded->optimizer->Find("w.m")), d.m);
}

TEST(Checkpoint, OptimizerFileIsOptional) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  StepData d = MakeStep(3);
  d.contents.optimizer.clear();
  ASSERT_TRUE(WriteCheckpoint(root.string(), 3, d.contents).ok());
  auto loaded = ReadCheckpoint((root / "step_00000003").string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->optimizer, nullptr);
  EXPECT_EQ(Floats(*loaded->model->Find("w")), d.w);
}

TEST(Checkpoint, PruneKeepsNewestByStepNumber) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  // 100000000 has nine digits: it sorts before 99999999 as text, after it as a number.
  for (int64_t step : {3, 100000000, 7, 99999999}) {
    StepData d = MakeStep(step);
    ASSERT_TRUE(WriteCheckpoint(root.string(), step, d.contents).ok());
  }
  ASSERT_EQ(Entries(root).size(), 4u);
  ASSERT_TRUE(PruneCheckpoints(root.string(), 2).ok());
  EXPECT_EQ(Entries(root), (std::vector<std::string>{"step_100000000", "step_99999999"}));
  auto newest = ResolveCheckpoint(run.path().string());
  ASSERT_TRUE(newest.ok()) << newest.status().message();
  EXPECT_EQ(fs::path(*newest).filename(), "step_100000000");
  EXPECT_EQ(PruneCheckpoints(root.string(), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Entries(root).size(), 2u);
}

TEST(Checkpoint, StaleTmpIsIgnoredByResolveAndRemovedByPrune) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  StepData d = MakeStep(10);
  ASSERT_TRUE(WriteCheckpoint(root.string(), 10, d.contents).ok());
  // A newer, complete-looking checkpoint under a temporary name, as left by a
  // process that died between writing and renaming.
  const fs::path stale = root / ".tmp-step_00000020-999999999";
  fs::copy(root / "step_00000010", stale);
  ASSERT_TRUE(ValidateCheckpoint(stale.string()).ok());

  auto resolved = ResolveCheckpoint(run.path().string());
  ASSERT_TRUE(resolved.ok()) << resolved.status().message();
  EXPECT_EQ(fs::path(*resolved).filename(), "step_00000010");

  ASSERT_TRUE(PruneCheckpoints(root.string(), 5).ok());
  EXPECT_EQ(Entries(root), std::vector<std::string>{"step_00000010"});
}

TEST(Checkpoint, TruncatedModelIsInvalidAndResolveFallsBack) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  for (int64_t step : {10, 20}) {
    StepData d = MakeStep(step);
    ASSERT_TRUE(WriteCheckpoint(root.string(), step, d.contents).ok());
  }
  const fs::path bad = root / "step_00000020";
  fs::resize_file(bad / "model.safetensors", fs::file_size(bad / "model.safetensors") - 1);

  Status st = ValidateCheckpoint(bad.string());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("model.safetensors"), std::string::npos) << st.message();

  testing::internal::CaptureStderr();
  auto resolved = ResolveCheckpoint(run.path().string());
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(resolved.ok()) << resolved.status().message();
  EXPECT_EQ(fs::path(*resolved).filename(), "step_00000010");
  EXPECT_NE(err.find("step_00000020"), std::string::npos) << err;

  // Named directly, the damaged checkpoint is an error, not a silent fallback.
  auto direct = ResolveCheckpoint(bad.string());
  EXPECT_EQ(direct.status().code(), StatusCode::kDataLoss);
  auto read = ReadCheckpoint(bad.string());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find(bad.string()), std::string::npos);

  // Prune counts only valid checkpoints toward `keep`.
  ASSERT_TRUE(PruneCheckpoints(root.string(), 1).ok());
  EXPECT_EQ(Entries(root), std::vector<std::string>{"step_00000010"});
}

TEST(Checkpoint, ManifestProblemsAreReported) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  StepData d = MakeStep(1);
  ASSERT_TRUE(WriteCheckpoint(root.string(), 1, d.contents).ok());
  const fs::path ckpt = root / "step_00000001";

  fs::remove(ckpt / "optimizer.safetensors");
  Status missing = ValidateCheckpoint(ckpt.string());
  EXPECT_EQ(missing.code(), StatusCode::kDataLoss);
  EXPECT_NE(missing.message().find("optimizer.safetensors"), std::string::npos);

  WriteBytes(ckpt / "manifest.json", "{\"files\": ");
  EXPECT_EQ(ValidateCheckpoint(ckpt.string()).code(), StatusCode::kDataLoss);
  WriteBytes(ckpt / "manifest.json", "{\"step\": 1}");
  EXPECT_EQ(ValidateCheckpoint(ckpt.string()).code(), StatusCode::kDataLoss);
  WriteBytes(ckpt / "manifest.json", "{\"files\": {\"../../etc/passwd\": 1}}");
  EXPECT_EQ(ValidateCheckpoint(ckpt.string()).code(), StatusCode::kDataLoss);
  fs::remove(ckpt / "manifest.json");
  EXPECT_FALSE(ValidateCheckpoint(ckpt.string()).ok());
}

TEST(Checkpoint, OverwritingSameStepLeavesCompleteCheckpoint) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  StepData first = MakeStep(5, 4);
  ASSERT_TRUE(WriteCheckpoint(root.string(), 5, first.contents).ok());
  StepData second = MakeStep(50, 7);  // other values and size
  second.contents.manifest["note"] = "second";
  ASSERT_TRUE(WriteCheckpoint(root.string(), 5, second.contents).ok());

  EXPECT_EQ(Entries(root), std::vector<std::string>{"step_00000005"});  // no leftovers
  const fs::path ckpt = root / "step_00000005";
  ASSERT_TRUE(ValidateCheckpoint(ckpt.string()).ok());
  auto loaded = ReadCheckpoint(ckpt.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->manifest["note"], "second");
  EXPECT_EQ(Floats(*loaded->model->Find("w")), second.w);
  EXPECT_EQ(Floats(*loaded->optimizer->Find("w.m")), second.m);
}

TEST(Checkpoint, FailedWriteLeavesNothingBehind) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  StepData good = MakeStep(1);
  ASSERT_TRUE(WriteCheckpoint(root.string(), 1, good.contents).ok());
  StepData bad = MakeStep(1);
  bad.contents.model.push_back(bad.contents.model[0]);  // duplicate name: rejected
  Status st = WriteCheckpoint(root.string(), 1, bad.contents);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Entries(root), std::vector<std::string>{"step_00000001"});
  auto loaded = ReadCheckpoint((root / "step_00000001").string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(Floats(*loaded->model->Find("w")), good.w);
}

TEST(Checkpoint, ResolveWithoutCheckpointIsNotFound) {
  TempDir run;
  auto none = ResolveCheckpoint(run.path().string());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  const std::string& msg = none.status().message();
  EXPECT_NE(msg.find("no checkpoint under " + (run.path() / "checkpoints").string()),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("pass a checkpoint directory"), std::string::npos) << msg;

  fs::create_directories(run.path() / "checkpoints" / "step_00000004");  // no manifest
  testing::internal::CaptureStderr();
  auto invalid_only = ResolveCheckpoint(run.path().string());
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(invalid_only.status().code(), StatusCode::kNotFound);

  auto missing = ResolveCheckpoint((run.path() / "nope").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace scaletrain

namespace scaletrain {
namespace {

void FlipByte(const fs::path& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(at);
  f.write(&c, 1);
}

// Issue 19: a flipped byte keeps the file's size, so only the checksum sees it.
TEST(CheckpointIntegrity, FlippedByteFailsTheChecksumAndResolveFallsBack) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  for (int64_t step : {10, 20}) {
    StepData d = MakeStep(step);
    ASSERT_TRUE(WriteCheckpoint(root.string(), step, d.contents).ok());
  }
  const fs::path bad = root / "step_00000020";
  const fs::path file = bad / "model.safetensors";
  FlipByte(file, static_cast<std::streamoff>(fs::file_size(file) - 2));
  EXPECT_TRUE(ValidateCheckpoint(bad.string()).ok()) << "sizes alone cannot see a flipped byte";
  Status st = VerifyCheckpoint(bad.string());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find(file.string()), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("checksum failed"), std::string::npos) << st.message();
  // Reading it fails the same way, naming the file.
  auto read = ReadCheckpoint(bad.string());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("checksum failed"), std::string::npos)
      << read.status().message();
  EXPECT_NE(read.status().message().find("model.safetensors"), std::string::npos);
  // A run directory resolves to the older, intact one, with a warning naming
  // the damaged one.
  testing::internal::CaptureStderr();
  auto resolved = ResolveCheckpoint(run.path().string());
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(resolved.ok()) << resolved.status().message();
  EXPECT_EQ(fs::path(*resolved).filename(), "step_00000010");
  EXPECT_NE(err.find("warning: checkpoint " + bad.string() + " is damaged"), std::string::npos)
      << err;
  EXPECT_NE(err.find("checksum failed"), std::string::npos) << err;
}

// Checkpoints from before checksums list sizes alone; they still validate
// and read.
TEST(CheckpointIntegrity, ManifestWithoutChecksumsStillLoads) {
  TempDir run;
  const fs::path root = run.path() / "checkpoints";
  StepData d = MakeStep(4);
  ASSERT_TRUE(WriteCheckpoint(root.string(), 4, d.contents).ok());
  const fs::path ckpt = root / "step_00000004";
  std::ifstream in(ckpt / "manifest.json");
  nlohmann::json m = nlohmann::json::parse(in);
  for (auto& [name, entry] : m["files"].items()) entry = entry["bytes"];
  WriteBytes(ckpt / "manifest.json", m.dump());
  EXPECT_TRUE(VerifyCheckpoint(ckpt.string()).ok());
  auto loaded = ReadCheckpoint(ckpt.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(Floats(*loaded->model->Find("w")), d.w);
  // A checksum entry that is not 64 hex digits is corrupt.
  m["files"]["model.safetensors"] = {{"bytes", fs::file_size(ckpt / "model.safetensors")},
                                     {"sha256", "abc"}};
  WriteBytes(ckpt / "manifest.json", m.dump());
  EXPECT_EQ(ValidateCheckpoint(ckpt.string()).code(), StatusCode::kDataLoss);
}

TEST(CheckpointIntegrity, HasCheckpointsSeesStepDirectoriesOnly) {
  TempDir run;
  EXPECT_FALSE(HasCheckpoints(run.path().string()));
  fs::create_directories(run.path() / "checkpoints" / ".tmp-step_00000001-1");
  EXPECT_FALSE(HasCheckpoints(run.path().string()));
  StepData d = MakeStep(1);
  ASSERT_TRUE(WriteCheckpoint((run.path() / "checkpoints").string(), 1, d.contents).ok());
  EXPECT_TRUE(HasCheckpoints(run.path().string()));
}

}  // namespace
}  // namespace scaletrain
