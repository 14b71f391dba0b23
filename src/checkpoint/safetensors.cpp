#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <utility>

#include "core/file_io.h"

namespace scaletrain {
namespace {

constexpr char kMetadataKey[] = "__metadata__";
// The reference implementation refuses headers above 100 MB; a length beyond
// that is a corrupt length field, not a real header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Data starts at a multiple of this, so every dtype we know is aligned in the
// memory map (the format allows padding the header with spaces).
constexpr uint64_t kDataAlignment = 8;

constexpr char kCorruptFix[] =
    "; the file is truncated or corrupt; use another checkpoint (or rewrite this one)";

std::string ErrnoText() { return std::strerror(errno); }

Status CorruptFile(const std::string& path, const std::string& problem) {
  return DataLoss(path + ": " + problem + kCorruptFix);
}

// Little-endian regardless of the host, as the format requires.
std::string EncodeU64Le(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

uint64_t DecodeU64Le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// numel(shape) * element size, or false on a negative dim or overflow. The
// element count must fit int64 as NumElements computes it, dim by dim: with
// a zero dim last, [2^62, 2, 0] holds no bytes but overflows on the way.
bool TensorBytes(const Shape& shape, DType dtype, uint64_t* bytes) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(numel, d, &numel)) return false;
  }
  return !__builtin_mul_overflow(static_cast<uint64_t>(numel), DTypeSizeBytes(dtype), bytes);
}

bool ReadU64(const nlohmann::json& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

// A tensor's bytes within the data area, [begin, end).
struct DataSpan {
  uint64_t begin, end;
};

Result<int> OpenReadOnly(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) return fd;
  if (errno == ENOENT) {
    return NotFound(path +
                    ": no such file; check the path (a checkpoint directory holds "
                    "model.safetensors)");
  }
  return IoError("cannot open " + path + ": " + ErrnoText() + "; check its permissions");
}

struct FileMapping {
  void* map = nullptr;
  uint64_t bytes = 0;
};

// Maps all of `path` read-only once it is known to be a regular file long
// enough to hold the 8-byte header length field.
Result<FileMapping> MapFileReadOnly(const std::string& path) {
  ST_ASSIGN_OR_RETURN(const int fd, OpenReadOnly(path));
  struct stat sb;
  if (::fstat(fd, &sb) != 0) {
    Status st = IoError("cannot stat " + path + ": " + ErrnoText());
    ::close(fd);
    return st;
  }
  if (!S_ISREG(sb.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + " is not a regular file; pass a .safetensors file");
  }
  const uint64_t file_bytes = static_cast<uint64_t>(sb.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    return CorruptFile(path, "it is " + std::to_string(file_bytes) +
                                 " bytes, shorter than the 8-byte header length field");
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) {
    return IoError("cannot memory-map " + path + ": " + ErrnoText());
  }
  return FileMapping{map, file_bytes};
}

// The header length field, checked against the bytes that follow it.
Result<uint64_t> HeaderLength(const std::string& path, const unsigned char* base,
                              uint64_t file_bytes) {
  const uint64_t header_bytes = DecodeU64Le(base);
  if (header_bytes > file_bytes - 8) {
    return CorruptFile(path, "the header length field says " + std::to_string(header_bytes) +
                                 " bytes but only " + std::to_string(file_bytes - 8) +
                                 " bytes follow it");
  }
  if (header_bytes > kMaxHeaderBytes) {
    return CorruptFile(
        path, "the header length " + std::to_string(header_bytes) + " bytes is implausibly large");
  }
  return header_bytes;
}

// The JSON header: one object whose top-level keys are all different.
Result<nlohmann::json> ParseHeaderJson(const std::string& path, const char* begin,
                                       const char* end) {
  if (begin == end || begin[0] != '{') {
    return CorruptFile(path, "the header does not start with a JSON object");
  }
  // nlohmann keeps the last of duplicate keys silently; a duplicated tensor
  // name would hide a tensor, so catch it while parsing.
  std::string duplicate;
  std::set<std::string> top_keys;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
        !top_keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(begin, end, on_event);
  } catch (const nlohmann::json::exception& e) {
    return CorruptFile(path, std::string("the JSON header does not parse (") + e.what() + ")");
  }
  if (!header.is_object()) {
    return CorruptFile(path, "the JSON header is not an object");
  }
  if (!duplicate.empty()) {
    return CorruptFile(path, "the header lists '" + duplicate + "' twice");
  }
  return header;
}

Status ReadMetadata(const std::string& path, const nlohmann::json& value,
                    std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) {
    return CorruptFile(path, "\"__metadata__\" is not an object of strings");
  }
  for (const auto& [mk, mv] : value.items()) {
    if (!mv.is_string()) {
      return CorruptFile(path, "metadata value '" + mk + "' is not a string");
    }
    (*metadata)[mk] = mv.get<std::string>();
  }
  return Status::Ok();
}

// `what` names the tensor in messages ("tensor 'w'").
Result<DType> ReadDtype(const std::string& path, const std::string& what,
                        const nlohmann::json& jdtype) {
  if (!jdtype.is_string()) return CorruptFile(path, what + " has a non-string dtype");
  Result<DType> dtype = DTypeFromName(jdtype.get<std::string>());
  if (!dtype.ok()) return CorruptFile(path, what + ": " + dtype.status().message());
  return dtype;
}

Result<Shape> ReadShape(const std::string& path, const std::string& what,
                        const nlohmann::json& jshape) {
  if (!jshape.is_array()) return CorruptFile(path, what + " has a shape that is not a list");
  Shape shape;
  for (const auto& d : jshape) {
    uint64_t dim = 0;
    if (!ReadU64(d, &dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
      return CorruptFile(path, what + " has a shape entry that is not a non-negative integer");
    }
    shape.push_back(static_cast<int64_t>(dim));
  }
  return shape;
}

Result<DataSpan> ReadDataOffsets(const std::string& path, const std::string& what,
                                 const nlohmann::json& joff) {
  DataSpan span{};
  if (!joff.is_array() || joff.size() != 2 || !ReadU64(joff[0], &span.begin) ||
      !ReadU64(joff[1], &span.end) || span.begin > span.end) {
    return CorruptFile(path, what +
                                 " has data_offsets that are not [begin, end] with "
                                 "0 <= begin <= end");
  }
  return span;
}

// The span must hold exactly dtype x shape bytes, inside the data area.
Status CheckSpanFitsTensor(const std::string& path, const std::string& what, DType dtype,
                           const Shape& shape, DataSpan span, uint64_t data_bytes) {
  // A std::string first: inlined here, GCC 12 takes `"[" + std::to_string(...)`
  // for an overlapping memcpy (a false -Wrestrict warning, an error with -Werror).
  const std::string range =
      std::string("[") + std::to_string(span.begin) + ", " + std::to_string(span.end) + "]";
  uint64_t expected = 0;
  if (!TensorBytes(shape, dtype, &expected)) {
    return CorruptFile(path, what + " has shape " + ShapeToString(shape) + " that overflows");
  }
  if (span.end - span.begin != expected) {
    return CorruptFile(path, what + " (" + std::string(DTypeName(dtype)) + " " +
                                 ShapeToString(shape) + ") needs " + std::to_string(expected) +
                                 " bytes but data_offsets " + range + " span " +
                                 std::to_string(span.end - span.begin));
  }
  if (span.end > data_bytes) {
    return CorruptFile(path, what + " has data_offsets " + range +
                                 " past the end of the data area (" + std::to_string(data_bytes) +
                                 " bytes)");
  }
  return Status::Ok();
}

// One tensor's header entry; its data pointer is set once the data area is final.
struct TensorEntry {
  NamedTensor tensor;
  DataSpan span;
};

Result<TensorEntry> ReadTensorEntry(const std::string& path, const std::string& name,
                                    const nlohmann::json& value, uint64_t data_bytes) {
  const std::string what = "tensor '" + name + "'";
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
      !value.contains("data_offsets")) {
    return CorruptFile(path, what + " lacks one of dtype, shape, data_offsets");
  }
  ST_ASSIGN_OR_RETURN(const DType dtype, ReadDtype(path, what, value["dtype"]));
  ST_ASSIGN_OR_RETURN(Shape shape, ReadShape(path, what, value["shape"]));
  ST_ASSIGN_OR_RETURN(const DataSpan span, ReadDataOffsets(path, what, value["data_offsets"]));
  ST_RETURN_IF_ERROR(CheckSpanFitsTensor(path, what, dtype, shape, span, data_bytes));
  return TensorEntry{NamedTensor{name, dtype, std::move(shape), nullptr}, span};
}

// Every entry of the header, in the header's key order: the metadata, and
// the tensors with their spans (tensors[i] owns spans[i]).
Status ReadHeaderEntries(const std::string& path, const nlohmann::json& header, uint64_t data_bytes,
                         std::map<std::string, std::string>* metadata,
                         std::vector<NamedTensor>* tensors, std::vector<DataSpan>* spans) {
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      ST_RETURN_IF_ERROR(ReadMetadata(path, value, metadata));
      continue;
    }
    ST_ASSIGN_OR_RETURN(TensorEntry entry, ReadTensorEntry(path, key, value, data_bytes));
    tensors->push_back(std::move(entry.tensor));
    spans->push_back(entry.span);
  }
  return Status::Ok();
}

// Indices of `spans` sorted by where their bytes lie.
std::vector<size_t> FileOrder(const std::vector<DataSpan>& spans) {
  std::vector<size_t> order(spans.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return spans[a].begin != spans[b].begin ? spans[a].begin < spans[b].begin
                                            : spans[a].end < spans[b].end;
  });
  return order;
}

Status CheckNoOverlap(const std::string& path, const std::vector<DataSpan>& spans,
                      const std::vector<size_t>& order, const std::vector<NamedTensor>& tensors) {
  // Empty tensors own no bytes, so they cannot overlap anything.
  const size_t none = spans.size();
  size_t prev = none;
  for (size_t i : order) {
    if (spans[i].begin == spans[i].end) continue;
    if (prev != none && spans[i].begin < spans[prev].end) {
      return CorruptFile(path, "tensors '" + tensors[prev].name + "' and '" + tensors[i].name +
                                   "' have overlapping data_offsets");
    }
    prev = i;
  }
  return Status::Ok();
}

// Whether a tensor's first byte, at file offset data_begin + begin, is off
// its element type's alignment in the memory map.
bool AnyMisaligned(uint64_t data_begin, const std::vector<DataSpan>& spans,
                   const std::vector<NamedTensor>& tensors) {
  for (size_t i = 0; i < spans.size(); ++i) {
    if ((data_begin + spans[i].begin) % DTypeSizeBytes(tensors[i].dtype) != 0) return true;
  }
  return false;
}

// Offsets that place the tensors back to back in file order, each
// kDataAlignment-aligned; returns the bytes they take.
uint64_t AlignedOffsets(const std::vector<DataSpan>& spans, const std::vector<size_t>& order,
                        std::vector<uint64_t>* offsets) {
  uint64_t packed_bytes = 0;
  for (size_t i : order) {
    (*offsets)[i] = (packed_bytes + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
    packed_bytes = (*offsets)[i] + (spans[i].end - spans[i].begin);
  }
  return packed_bytes;
}

// Copies each tensor's bytes from `data` to `offsets` in new private,
// read-only memory of `packed_bytes` (> 0) that the caller unmaps.
Result<void*> CopyToPrivateMemory(const std::string& path, const unsigned char* data,
                                  const std::vector<DataSpan>& spans,
                                  const std::vector<uint64_t>& offsets, uint64_t packed_bytes) {
  void* packed =
      ::mmap(nullptr, packed_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (packed == MAP_FAILED) {
    return IoError("cannot allocate " + std::to_string(packed_bytes) + " bytes to read " + path +
                   ": " + ErrnoText());
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    std::memcpy(static_cast<unsigned char*>(packed) + offsets[i], data + spans[i].begin,
                spans[i].end - spans[i].begin);
  }
  ::mprotect(packed, packed_bytes, PROT_READ);
  return packed;
}

// The tensors in file order, each pointing at its bytes: data + offsets[i].
std::vector<NamedTensor> InFileOrder(std::vector<NamedTensor> tensors,
                                     const std::vector<size_t>& order, const unsigned char* data,
                                     const std::vector<uint64_t>& offsets) {
  std::vector<NamedTensor> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) {
    NamedTensor t = std::move(tensors[i]);
    t.data = data + offsets[i];
    sorted.push_back(std::move(t));
  }
  return sorted;
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata, Sha256* digest) {
  // ordered_json keeps the tensors in the caller's order, so the header lists
  // them in the same order as their bytes follow.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header[kMetadataKey] = std::move(meta);
  }
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey) {
      return InvalidArgument("cannot write " + path + ": tensor name '" + t.name +
                             "' is reserved or empty; give the tensor another name");
    }
    if (!seen.insert(t.name).second) {
      return InvalidArgument("cannot write " + path + ": tensor '" + t.name +
                             "' appears twice; each tensor needs a unique name");
    }
    uint64_t bytes = 0;
    if (!TensorBytes(t.shape, t.dtype, &bytes)) {
      return InvalidArgument("cannot write " + path + ": tensor '" + t.name + "' has shape " +
                             ShapeToString(t.shape) + " (negative or too large)");
    }
    if (bytes > 0 && t.data == nullptr) {
      return InvalidArgument("cannot write " + path + ": tensor '" + t.name +
                             "' has no data pointer");
    }
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }

  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument("cannot write " + path +
                           ": a tensor name or metadata string is not valid UTF-8 (" + e.what() +
                           ")");
  }
  const uint64_t pad = (kDataAlignment - (8 + json.size()) % kDataAlignment) % kDataAlignment;
  json.append(pad, ' ');
  const std::string prefix = EncodeU64Le(json.size());

  // Complete or absent: a reader (or a crash) never finds half a file.
  return WriteFileAtomically(path, [&](FileSink& sink) -> Status {
    auto write = [&](const void* data, size_t bytes) {
      if (digest != nullptr) digest->Update(data, bytes);
      return sink.Write(data, bytes);
    };
    ST_RETURN_IF_ERROR(write(prefix.data(), prefix.size()));
    ST_RETURN_IF_ERROR(write(json.data(), json.size()));
    for (size_t i = 0; i < tensors.size(); ++i) {
      ST_RETURN_IF_ERROR(write(tensors[i].data, sizes[i]));
    }
    return Status::Ok();
  });
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ST_ASSIGN_OR_RETURN(const FileMapping mapping, MapFileReadOnly(path));
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_ = mapping.map;
  file->map_bytes_ = mapping.bytes;
  const auto* base = static_cast<const unsigned char*>(mapping.map);

  ST_ASSIGN_OR_RETURN(const uint64_t header_bytes, HeaderLength(path, base, mapping.bytes));
  const char* header_begin = reinterpret_cast<const char*>(base + 8);
  ST_ASSIGN_OR_RETURN(const nlohmann::json header,
                      ParseHeaderJson(path, header_begin, header_begin + header_bytes));
  const uint64_t data_begin = 8 + header_bytes;
  std::vector<DataSpan> spans;
  ST_RETURN_IF_ERROR(ReadHeaderEntries(path, header, mapping.bytes - data_begin, &file->metadata_,
                                       &file->tensors_, &spans));
  // Present tensors in file order: for files we wrote, the writer's order.
  const std::vector<size_t> order = FileOrder(spans);
  ST_RETURN_IF_ERROR(CheckNoOverlap(path, spans, order, file->tensors_));

  // The format stores tensors back to back (the reference reader rejects
  // gaps), so a 2-byte tensor followed by a 4-byte one, or a header not padded
  // to 8 bytes (other writers), leaves data misaligned for its element type.
  // Then the data area is repacked, each tensor 8-byte aligned, into private
  // memory so callers may always read through typed pointers.
  const unsigned char* data = base + data_begin;
  std::vector<uint64_t> offsets(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) offsets[i] = spans[i].begin;
  if (AnyMisaligned(data_begin, spans, file->tensors_)) {
    // packed_bytes > 0: only a tensor with bytes can be misaligned.
    const uint64_t packed_bytes = AlignedOffsets(spans, order, &offsets);
    ST_ASSIGN_OR_RETURN(void* packed,
                        CopyToPrivateMemory(path, data, spans, offsets, packed_bytes));
    ::munmap(file->map_, file->map_bytes_);
    file->map_ = packed;
    file->map_bytes_ = packed_bytes;
    data = static_cast<const unsigned char*>(packed);
  }
  file->tensors_ = InFileOrder(std::move(file->tensors_), order, data, offsets);
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

const NamedTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = std::find_if(tensors_.begin(), tensors_.end(),
                         [&](const NamedTensor& t) { return t.name == name; });
  return it == tensors_.end() ? nullptr : &*it;
}

}  // namespace scaletrain
