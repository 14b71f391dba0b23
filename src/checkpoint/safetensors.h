// The safetensors file format (https://huggingface.co/docs/safetensors):
// 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "string value"}}, then the raw little-endian data.
// Files we write load with the `safetensors` Python package and torch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/sha256.h"
#include "core/status.h"
#include "core/tensor.h"

namespace scaletrain {

struct NamedTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;  // numel(shape) * DTypeSizeBytes(dtype) bytes
};

// Writes `path` completely or not at all (WriteFileAtomically: temporary,
// fsync, rename; a file already there is replaced only on success). Tensors
// are stored in the order given.
// With `digest`, also feeds it every byte written (a checksum of what was
// meant to be on disk, to compare with what is).
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {},
                        Sha256* digest = nullptr);

// A memory-mapped safetensors file, validated on open: header length within
// the file, JSON well-formed, every dtype known, data_offsets consistent with
// dtype x shape, inside the data area, not overlapping. A violation is a
// DataLoss error naming the file and what is wrong.
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<NamedTensor>& tensors() const { return tensors_; }  // data points into the map
  const NamedTensor* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<NamedTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace scaletrain
