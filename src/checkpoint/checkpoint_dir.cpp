#include "checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#include "core/file_io.h"
#include "core/sha256.h"

namespace scaletrain {
namespace {

namespace fs = std::filesystem;

constexpr char kModelFile[] = "model.safetensors";
constexpr char kOptimizerFile[] = "optimizer.safetensors";
constexpr char kManifestFile[] = "manifest.json";
constexpr char kStepPrefix[] = "step_";
constexpr char kTmpPrefix[] = ".tmp-";

std::string ErrnoText() { return std::strerror(errno); }

// "step_<digits>" -> the step; anything else (including .tmp-*) -> nullopt.
std::optional<int64_t> ParseStepDirName(const std::string& name) {
  const std::string prefix = kStepPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    const char c = name[i];
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(step, int64_t{10}, &step) ||
        __builtin_add_overflow(step, int64_t{c - '0'}, &step)) {
      return std::nullopt;
    }
  }
  return step;
}

struct StepDir {
  int64_t step;
  fs::path path;
};

// step_* directories under root, newest (highest step) first. Sorting by the
// number rather than the name keeps steps beyond 8 digits in order.
Result<std::vector<StepDir>> ListStepDirs(const fs::path& root) {
  std::vector<StepDir> dirs;
  std::error_code ec;
  // increment(ec) rather than range-for: errors become values, not throws.
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::optional<int64_t> step = ParseStepDirName(it->path().filename().string());
    std::error_code type_ec;
    if (step && it->is_directory(type_ec)) dirs.push_back({*step, it->path()});
  }
  if (ec) return IoError("cannot list " + root.string() + ": " + ec.message());
  std::sort(dirs.begin(), dirs.end(),
            [](const StepDir& a, const StepDir& b) { return a.step > b.step; });
  return dirs;
}

Status FsyncPath(const fs::path& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open " + path.string() + " to flush it: " + ErrnoText());
  Status st;
  if (::fsync(fd) != 0) {
    st = IoError("cannot flush " + path.string() + " to disk: " + ErrnoText() +
                 "; check the disk and retry");
  }
  ::close(fd);
  return st;
}

// A directory left by an in-flight write of this process (another thread)
// must survive a prune; any other .tmp-* is debris of an interrupted write.
bool IsOwnTmpDir(const std::string& name) {
  const size_t dash = name.rfind('-');
  return dash != std::string::npos && name.substr(dash + 1) == std::to_string(::getpid());
}

// Swaps `from` into `to` when `to` exists, leaving the old directory at
// `from` for the caller to delete. RENAME_EXCHANGE makes the swap atomic, so
// even a crash here leaves a complete step directory; filesystems without it
// get rename-aside, rename-in.
Status ReplaceDir(const fs::path& from, const fs::path& to, const fs::path& aside) {
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    return Status::Ok();
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    return IoError("cannot swap " + from.string() + " into " + to.string() + ": " + ErrnoText());
  }
#endif
  std::error_code ec;
  fs::rename(to, aside, ec);
  if (ec) return IoError("cannot move " + to.string() + " aside: " + ec.message());
  fs::rename(from, to, ec);
  if (ec) {
    std::error_code restore_ec;
    fs::rename(aside, to, restore_ec);
    return IoError("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
  }
  // Leave the old copy where the caller's cleanup expects it.
  fs::rename(aside, from, ec);
  if (ec) fs::remove_all(aside, ec);
  return Status::Ok();
}

}  // namespace

std::string CheckpointDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return buf;
}

Result<FileDigest> DigestFile(const std::string& dir, const std::string& name) {
  const fs::path path = fs::path(dir) / name;
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return IoError("cannot stat " + path.string() + ": " + ec.message());
  ST_ASSIGN_OR_RETURN(std::string sha, Sha256OfFile(path.string()));
  return FileDigest{name, static_cast<uint64_t>(size), std::move(sha)};
}

Result<std::string> BeginCheckpointDir(const std::string& checkpoints_root, int64_t step,
                                       const std::string& tag) {
  if (step < 0) {
    return InvalidArgument("checkpoint step " + std::to_string(step) + " is negative");
  }
  const fs::path root(checkpoints_root);
  std::error_code ec;
  const bool root_existed = fs::is_directory(root, ec);
  fs::create_directories(root, ec);
  if (ec) {
    return IoError("cannot create " + root.string() + ": " + ec.message() +
                   "; check that the run directory is writable");
  }
  if (!root_existed && root.has_parent_path()) {
    ST_RETURN_IF_ERROR(FsyncPath(root.parent_path(), /*directory=*/true));
  }
  const fs::path tmp = root / (kTmpPrefix + CheckpointDirName(step) + "-" + tag);
  fs::remove_all(tmp, ec);  // debris of an earlier failed attempt
  if (!fs::create_directory(tmp, ec) || ec) {
    return IoError("cannot create " + tmp.string() + ": " +
                   (ec ? ec.message() : std::string("it already exists")) +
                   "; check that the run directory is writable");
  }
  return tmp.string();
}

Status CommitCheckpointDir(const std::string& tmp_dir, const std::string& checkpoints_root,
                           int64_t step, nlohmann::json manifest,
                           const std::vector<FileDigest>& files) {
  const fs::path root(checkpoints_root), tmp(tmp_dir);
  const std::string name = CheckpointDirName(step);
  const fs::path final_dir = root / name;
  auto commit = [&]() -> Status {
    if (!manifest.is_null() && !manifest.is_object()) {
      return InvalidArgument("the checkpoint manifest must be a JSON object");
    }
    if (manifest.is_null()) manifest = nlohmann::json::object();
    nlohmann::json listed = nlohmann::json::object();
    for (const FileDigest& f : files) listed[f.name] = {{"bytes", f.bytes}, {"sha256", f.sha256}};
    manifest["files"] = std::move(listed);
    // Written last: its presence marks the directory complete.
    ST_RETURN_IF_ERROR(
        WriteFileAtomically((tmp / kManifestFile).string(), manifest.dump(2) + "\n"));
    ST_RETURN_IF_ERROR(FsyncPath(tmp, /*directory=*/true));
    std::error_code ec;
    if (fs::exists(final_dir, ec)) {
      const fs::path aside =
          root / (std::string(kTmpPrefix) + "replaced-" + name + "-" + std::to_string(::getpid()));
      ST_RETURN_IF_ERROR(ReplaceDir(tmp, final_dir, aside));
    } else {
      fs::rename(tmp, final_dir, ec);
      if (ec) {
        return IoError("cannot rename " + tmp.string() + " to " + final_dir.string() + ": " +
                       ec.message());
      }
    }
    return FsyncPath(root, /*directory=*/true);
  };
  Status st = commit();
  // On success `tmp` holds the replaced checkpoint (if any); on failure the
  // partial write. Either way it must go.
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!st.ok()) return st.WithContext("while writing checkpoint " + final_dir.string());
  return Status::Ok();
}

Status WriteCheckpoint(const std::string& checkpoints_root, int64_t step,
                       const CheckpointContents& contents) {
  if (!contents.manifest.is_null() && !contents.manifest.is_object()) {
    return InvalidArgument("the checkpoint manifest must be a JSON object");
  }
  ST_ASSIGN_OR_RETURN(std::string tmp,
                      BeginCheckpointDir(checkpoints_root, step, std::to_string(::getpid())));
  std::vector<FileDigest> files;
  auto write_file = [&](const char* name, const std::vector<NamedTensor>& tensors) -> Status {
    ST_RETURN_IF_ERROR(WriteSafetensors((fs::path(tmp) / name).string(), tensors));
    ST_ASSIGN_OR_RETURN(FileDigest d, DigestFile(tmp, name));
    files.push_back(std::move(d));
    return Status::Ok();
  };
  Status st = write_file(kModelFile, contents.model);
  if (st.ok() && !contents.optimizer.empty()) st = write_file(kOptimizerFile, contents.optimizer);
  if (!st.ok()) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    return st.WithContext("while writing checkpoint " +
                          (fs::path(checkpoints_root) / CheckpointDirName(step)).string());
  }
  return CommitCheckpointDir(tmp, checkpoints_root, step, contents.manifest, files);
}

Status PruneCheckpoints(const std::string& checkpoints_root, int64_t keep) {
  if (keep < 1) {
    return InvalidArgument("cannot keep " + std::to_string(keep) + " checkpoints; keep at least 1");
  }
  const fs::path root(checkpoints_root);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return Status::Ok();  // nothing written yet

  ST_ASSIGN_OR_RETURN(std::vector<StepDir> dirs, ListStepDirs(root));
  std::vector<fs::path> doomed;
  int64_t kept = 0;
  for (const StepDir& d : dirs) {
    if (kept < keep && ValidateCheckpoint(d.path.string()).ok()) {
      ++kept;
    } else {
      doomed.push_back(d.path);
    }
  }
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kTmpPrefix, 0) == 0 && !IsOwnTmpDir(name)) doomed.push_back(it->path());
  }
  if (ec) return IoError("cannot list " + root.string() + ": " + ec.message());
  for (const fs::path& p : doomed) {
    // A step directory is first renamed out of the way (atomically), so a
    // crash in the middle of deleting its files leaves .tmp-* debris for the
    // next prune, never a step_* directory missing its manifest.
    fs::path gone = p;
    if (p.filename().string().rfind(kTmpPrefix, 0) != 0) {
      gone = root / (std::string(kTmpPrefix) + "pruned-" + p.filename().string() + "-" + std::to_string(::getpid()));
      fs::rename(p, gone, ec);
      if (ec) {
        return IoError("cannot delete old checkpoint " + p.string() + ": " + ec.message() +
                       "; check the permissions of " + root.string());
      }
    }
    fs::remove_all(gone, ec);
    if (ec) {
      return IoError("cannot delete old checkpoint " + p.string() + ": " + ec.message() +
                     "; check the permissions of " + root.string());
    }
  }
  return Status::Ok();
}

Result<nlohmann::json> ReadManifest(const std::string& dir_name) {
  const fs::path dir(dir_name);
  const fs::path path = dir / kManifestFile;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return NotFound(dir.string() + " is not a complete checkpoint: it has no " +
                    std::string(kManifestFile) +
                    "; pass a checkpoint directory written by `scaletrain train`");
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return IoError("cannot read " + path.string() + "; check its permissions");
  }
  nlohmann::json manifest = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    return DataLoss(path.string() +
                    " is not a JSON object; the checkpoint is corrupt; use an older checkpoint");
  }
  return manifest;
}

namespace {

// A manifest's "files" entry for one file: {"bytes": N, "sha256": hex}, or N
// alone (checkpoints from before checksums). Errors name the manifest.
struct ListedFile {
  uint64_t bytes = 0;
  std::string sha256;  // empty: none recorded
};
Result<ListedFile> ParseListedFile(const std::string& manifest_path, const std::string& name,
                                   const nlohmann::json& entry) {
  // Names come from the file; keep them inside the checkpoint directory.
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return DataLoss(manifest_path + " lists an invalid file name '" + name +
                    "'; the checkpoint is corrupt; use an older checkpoint");
  }
  ListedFile f;
  if (entry.is_number_unsigned()) {
    f.bytes = entry.get<uint64_t>();
    return f;
  }
  const bool ok = entry.is_object() && entry.contains("bytes") &&
                  entry["bytes"].is_number_unsigned() && entry.contains("sha256") &&
                  entry["sha256"].is_string() && entry["sha256"].get<std::string>().size() == 64;
  if (!ok) {
    return DataLoss(manifest_path + " gives no byte size and sha256 for " + name +
                    "; the checkpoint is corrupt; use an older checkpoint");
  }
  f.bytes = entry["bytes"].get<uint64_t>();
  f.sha256 = entry["sha256"].get<std::string>();
  return f;
}

Result<const nlohmann::json*> FilesOf(const nlohmann::json& manifest,
                                      const std::string& manifest_path) {
  const auto files = manifest.find("files");
  if (files == manifest.end() || !files->is_object() || files->empty()) {
    return DataLoss(manifest_path +
                    " has no \"files\" entry listing the checkpoint's files; the checkpoint is "
                    "corrupt; use an older checkpoint");
  }
  return &*files;
}

Status CheckChecksum(const fs::path& file, const ListedFile& listed) {
  if (listed.sha256.empty()) return Status::Ok();
  ST_ASSIGN_OR_RETURN(std::string actual, Sha256OfFile(file.string()));
  if (actual == listed.sha256) return Status::Ok();
  return DataLoss(file.string() + ": checksum failed (sha256 " + actual + ", the manifest says " +
                  listed.sha256 +
                  "): the file is damaged; use an older checkpoint (--resume auto takes the newest "
                  "intact one)");
}

}  // namespace

Status ValidateCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return NotFound(dir +
                    " is not a directory; pass a checkpoint directory "
                    "(.../checkpoints/step_00000010)");
  }
  ST_ASSIGN_OR_RETURN(nlohmann::json manifest, ReadManifest(dir));
  const std::string manifest_path = (fs::path(dir) / kManifestFile).string();
  ST_ASSIGN_OR_RETURN(const nlohmann::json* files, FilesOf(manifest, manifest_path));
  for (const auto& [name, entry] : files->items()) {
    ST_ASSIGN_OR_RETURN(ListedFile listed, ParseListedFile(manifest_path, name, entry));
    const fs::path file = fs::path(dir) / name;
    const uintmax_t actual = fs::file_size(file, ec);
    if (ec) {
      return DataLoss(file.string() + " is missing (" + ec.message() +
                      "); the checkpoint is incomplete; use an older checkpoint");
    }
    if (actual != listed.bytes) {
      return DataLoss(file.string() + " is " + std::to_string(actual) + " bytes but " +
                      kManifestFile + " says " + std::to_string(listed.bytes) +
                      "; the file is truncated or corrupt; use an older checkpoint");
    }
  }
  return Status::Ok();
}

Status VerifyCheckpoint(const std::string& dir) {
  ST_RETURN_IF_ERROR(ValidateCheckpoint(dir));
  ST_ASSIGN_OR_RETURN(nlohmann::json manifest, ReadManifest(dir));
  for (const auto& [name, entry] : manifest["files"].items()) {
    ST_RETURN_IF_ERROR(VerifyCheckpointFile(dir, manifest, name));
  }
  return Status::Ok();
}

Status VerifyCheckpointFile(const std::string& dir, const nlohmann::json& manifest,
                            const std::string& name) {
  const std::string manifest_path = (fs::path(dir) / kManifestFile).string();
  ST_ASSIGN_OR_RETURN(const nlohmann::json* files, FilesOf(manifest, manifest_path));
  if (!files->contains(name)) {
    return DataLoss(manifest_path + " does not list " + name +
                    "; the checkpoint is corrupt; use an older checkpoint");
  }
  ST_ASSIGN_OR_RETURN(ListedFile listed, ParseListedFile(manifest_path, name, files->at(name)));
  return CheckChecksum(fs::path(dir) / name, listed);
}

bool HasCheckpoints(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return false;
  auto dirs = ListStepDirs(root);
  return dirs.ok() && !dirs->empty();
}

Result<std::string> ResolveCheckpoint(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) {
    return NotFound(path +
                    " does not exist or is not a directory; pass a checkpoint directory "
                    "(.../checkpoints/step_00000010) or a run directory that has one");
  }
  if (fs::exists(p / kManifestFile, ec)) {
    ST_RETURN_IF_ERROR(ValidateCheckpoint(path));
    return path;
  }
  const fs::path root = p / "checkpoints";
  const std::string expectation = "; pass a checkpoint directory (" +
                                  (root / CheckpointDirName(10)).string() +
                                  ") or a run directory that has one";
  if (!fs::is_directory(root, ec)) {
    return NotFound("no checkpoint under " + root.string() + expectation);
  }
  ST_ASSIGN_OR_RETURN(std::vector<StepDir> dirs, ListStepDirs(root));
  int skipped = 0;
  for (const StepDir& d : dirs) {
    Status st = VerifyCheckpoint(d.path.string());
    if (st.ok()) {
      if (skipped > 0) {
        std::cerr << "warning: resuming from the older checkpoint " << d.path.string() << "\n";
      }
      return d.path.string();
    }
    std::cerr << "warning: checkpoint " << d.path.string()
              << " is damaged or incomplete, skipping it: " << st.message() << "\n";
    ++skipped;
  }
  std::string found = skipped > 0 ? " (" + std::to_string(skipped) + " invalid ones skipped)" : "";
  return NotFound("no valid checkpoint under " + root.string() + found + expectation);
}

Result<LoadedCheckpoint> ReadCheckpoint(const std::string& dir) {
  const std::string context = "while reading checkpoint " + dir;
  Status valid = ValidateCheckpoint(dir);
  if (!valid.ok()) return valid.WithContext(context);
  Result<nlohmann::json> manifest = ReadManifest(dir);
  if (!manifest.ok()) return manifest.status().WithContext(context);

  LoadedCheckpoint out;
  out.dir = dir;
  out.manifest = std::move(manifest).value();
  if (!out.manifest["files"].contains(kModelFile)) {
    return DataLoss((fs::path(dir) / kManifestFile).string() + " does not list " + kModelFile +
                    ": it is not a whole-tensor checkpoint")
        .WithContext(context);
  }
  auto open = [&](const char* name) -> Result<std::unique_ptr<SafetensorsFile>> {
    ST_RETURN_IF_ERROR(VerifyCheckpointFile(dir, out.manifest, name));
    return SafetensorsFile::Open((fs::path(dir) / name).string());
  };
  Result<std::unique_ptr<SafetensorsFile>> model = open(kModelFile);
  if (!model.ok()) return model.status().WithContext(context);
  out.model = std::move(model).value();
  if (out.manifest["files"].contains(kOptimizerFile)) {
    Result<std::unique_ptr<SafetensorsFile>> optimizer = open(kOptimizerFile);
    if (!optimizer.ok()) return optimizer.status().WithContext(context);
    out.optimizer = std::move(optimizer).value();
  }
  return out;
}

}  // namespace scaletrain
