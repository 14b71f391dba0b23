// Writing a file so that neither a reader nor a crash ever sees part of it:
// the one implementation of "temporary file, fsync, rename" that the data
// shards, the vocabulary, safetensors files and checkpoint manifests share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace scaletrain {

// What WriteFileAtomically's callback writes through: appends to the
// temporary file, retrying short writes and EINTR.
class FileSink {
 public:
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  // On failure the status names the final path and the cause.
  Status Write(const void* data, size_t bytes);
  Status Write(std::string_view bytes) { return Write(bytes.data(), bytes.size()); }
  int64_t bytes_written() const { return bytes_written_; }

 private:
  friend Status WriteFileAtomically(const std::string& path,
                                    const std::function<Status(FileSink&)>& write);
  FileSink(int fd, const std::string& path) : fd_(fd), path_(path) {}

  int fd_;
  const std::string& path_;
  int64_t bytes_written_ = 0;
};

// Writes the file at `path` completely or not at all. The bytes go to a
// unique temporary in the same directory (same filesystem, so the rename is
// atomic), are flushed to disk (fsync), and only then renamed over `path`;
// the directory is flushed after the rename, so the new name survives a
// crash too. On any failure the temporary is removed and a file already at
// `path` is left exactly as it was. The new file has mode 0644.
// Errors are IoError "cannot write PATH: CAUSE; FIX".
Status WriteFileAtomically(const std::string& path, std::string_view bytes);
// As above, the content produced by `write` through the sink (for content
// streamed from several buffers, or too large to assemble first). A non-OK
// status from `write` abandons the file and is returned as it is.
Status WriteFileAtomically(const std::string& path,
                           const std::function<Status(FileSink&)>& write);

}  // namespace scaletrain
