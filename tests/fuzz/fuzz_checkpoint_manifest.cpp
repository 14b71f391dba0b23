// The checkpoint manifest (manifest.json): ValidateCheckpoint and
// ReadCheckpoint on a directory holding the fuzzed manifest beside a small
// valid model.safetensors and optimizer.safetensors, then what
// `scaletrain sample` reads of an accepted manifest (LoadModelForInference):
// the model description (SpecFromJson) and the vocabulary (FromJson).
//
// The two tensor files are the same for every input, so a manifest whose
// "files" entry names them with their sizes gets past the first checks; the
// seeds do (tests/fuzz/corpus/checkpoint_manifest/).
//
// Also the trainer's CheckpointReader on the same directory (a version-2
// manifest's "tensors" table of pieces, or the whole-tensor files).
//
// Checked besides not crashing: a refusal has a message; an accepted
// checkpoint has its model file open, and ReadCheckpoint accepts nothing
// that ValidateCheckpoint refuses.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/model_io.h"
#include "checkpoint/safetensors.h"
#include "data/tokenizer.h"
#include "fuzz_scratch.h"

namespace fuzz = scaletrain::fuzz;
using scaletrain::DType;
using scaletrain::NamedTensor;

namespace {

// A 2 x 3 tensor and a 3-element one: model.safetensors is 96 bytes,
// optimizer.safetensors 180 (the sizes the seed manifests list).
const std::string& CheckpointDir() {
  static const std::string* dir = [] {
    const std::string d = fuzz::ScratchDir() + "/step_00000002";
    static const float w[6] = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.25f};
    static const float b[3] = {1.0f, 2.0f, 3.0f};
    if (::mkdir(d.c_str(), 0755) != 0) fuzz::Fail("cannot create " + d);
    const std::vector<NamedTensor> model = {{"wte", DType::kF32, {2, 3}, w}};
    const std::vector<NamedTensor> optimizer = {{"exp_avg.wte", DType::kF32, {2, 3}, w},
                                                {"exp_avg_sq.b", DType::kF32, {3}, b}};
    if (!scaletrain::WriteSafetensors(d + "/model.safetensors", model).ok() ||
        !scaletrain::WriteSafetensors(d + "/optimizer.safetensors", optimizer).ok()) {
      fuzz::Fail("cannot write the checkpoint's tensor files in " + d);
    }
    return new std::string(d);
  }();
  return *dir;
}

// The trainer's reader (either format: a version-2 manifest's "tensors"
// table points into shard files): every tensor of the model the manifest
// describes, when it is small enough to allocate.
void ReadThroughCheckpointReader(const std::string& dir) {
  auto reader = scaletrain::CheckpointReader::Open(dir);
  if (!reader.ok()) {
    fuzz::CheckRefusal(reader.status(), "CheckpointReader::Open");
    return;
  }
  const scaletrain::ParamLayout layout = scaletrain::BuildParamLayout((*reader)->spec());
  if (layout.total_numel > (int64_t{1} << 20)) return;
  std::vector<float> whole;
  for (const char* prefix : {"", "exp_avg."}) {
    for (const scaletrain::ParamEntry& e : layout.entries) {
      whole.assign(static_cast<size_t>(e.numel), 0.0f);
      const scaletrain::Status st = (*reader)->ReadWhole(prefix, e, whole.data());
      if (!st.ok()) {
        fuzz::CheckRefusal(st, "CheckpointReader::ReadWhole");
        return;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = CheckpointDir();
  fuzz::WriteScratchFile("step_00000002/manifest.json", data, size);

  const scaletrain::Status valid = scaletrain::ValidateCheckpoint(dir);
  if (!valid.ok()) fuzz::CheckRefusal(valid, "ValidateCheckpoint");
  ReadThroughCheckpointReader(dir);
  // ReadCheckpoint (the whole-tensor format) also verifies the files'
  // checksums and needs model.safetensors listed: it accepts a subset.
  auto loaded = scaletrain::ReadCheckpoint(dir);
  if (loaded.ok() && !valid.ok()) {
    fuzz::Fail("ReadCheckpoint accepted what ValidateCheckpoint refused: " + valid.message());
  }
  if (!loaded.ok()) {
    fuzz::CheckRefusal(loaded.status(), "ReadCheckpoint");
    return 0;
  }
  if (loaded->model == nullptr || loaded->model->Find("wte") == nullptr) {
    fuzz::Fail("an accepted checkpoint has no model tensors");
  }
  if (!loaded->manifest.is_object()) fuzz::Fail("an accepted manifest is not a JSON object");

  const nlohmann::json& manifest = loaded->manifest;
  if (manifest.contains("model")) {
    auto spec = scaletrain::SpecFromJson(manifest.at("model"));
    if (!spec.ok()) fuzz::CheckRefusal(spec.status(), "SpecFromJson");
  }
  if (manifest.contains("vocab") && !manifest.at("vocab").is_null()) {
    auto vocab = scaletrain::Vocabulary::FromJson(manifest.at("vocab"), dir + "/manifest.json");
    if (!vocab.ok()) fuzz::CheckRefusal(vocab.status(), "Vocabulary::FromJson");
  }
  return 0;
}
