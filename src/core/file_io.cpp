#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace scaletrain {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A hint for the causes a user can do something about.
std::string FixFor(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return "; free disk space (or use another directory) and retry";
    case EACCES:
    case EPERM:
    case EROFS:
      return "; check that the directory is writable";
    case ENOENT:
    case ENOTDIR:
      return "; check that the directory exists";
    default:
      return "; check the disk and retry";
  }
}

Status Failure(const std::string& path, const std::string& what, int err) {
  return IoError("cannot write " + path + ": " + what + ": " + ErrnoText(err) + FixFor(err));
}

}  // namespace

Status FileSink::Write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Failure(path_, "writing", errno);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    bytes_written_ += n;
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  return WriteFileAtomically(path, [bytes](FileSink& sink) { return sink.Write(bytes); });
}

Status WriteFileAtomically(const std::string& path,
                           const std::function<Status(FileSink&)>& write) {
  if (path.empty()) return InvalidArgument("cannot write a file with an empty path");
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return Failure(path, "cannot create a temporary file in " + DirectoryOf(path), errno);
  }
  // Closes (if still open) and removes the temporary; `path` is untouched.
  auto abandon = [&](Status st) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  };
  // mkstemp creates 0600; these are ordinary shared files.
  if (::fchmod(fd, 0644) != 0) return abandon(Failure(path, "chmod of " + tmp, errno));
  FileSink sink(fd, path);
  Status st = write(sink);
  if (!st.ok()) return abandon(st);
  // Without fsync a crash after the rename could leave the name pointing at
  // an empty or partial file.
  if (::fsync(fd) != 0) return abandon(Failure(path, "flushing to disk", errno));
  // close() can report a deferred write error (NFS), so it counts.
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return abandon(Failure(path, "closing", errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return abandon(Failure(path, "renaming " + tmp + " into place", errno));
  }
  const std::string dir = DirectoryOf(path);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Failure(path, "opening " + dir + " to flush the rename", errno);
  // Some filesystems cannot flush a directory (EINVAL): nothing more to do there.
  const bool flushed = ::fsync(dir_fd) == 0 || errno == EINVAL;
  const int err = errno;
  ::close(dir_fd);
  if (!flushed) return Failure(path, "flushing the directory " + dir, err);
  return Status::Ok();
}

}  // namespace scaletrain
