// WriteFileAtomically: the file is complete or untouched, whatever fails.
#include "core/file_io.h"

#include "test_files.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace scaletrain {
namespace {

namespace fs = std::filesystem;

class FileIoTest : public test_files::ScratchDirTest {};

using test_files::ReadBytes;
using test_files::WriteBytes;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(FileIoTest, WritesTheBytesWithMode0644AndNoTemporaryLeft) {
  const std::string path = Path("out.bin");
  const std::string bytes("head\0tail\xff", 10);
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  EXPECT_EQ(ReadBytes(path), bytes);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(Listing(), std::vector<std::string>{"out.bin"});
}

TEST_F(FileIoTest, ReplacesAnExistingFile) {
  const std::string path = Path("out.txt");
  WriteBytes(path, "an older and longer content");
  ASSERT_TRUE(WriteFileAtomically(path, std::string("new")).ok());
  EXPECT_EQ(ReadBytes(path), "new");
  EXPECT_EQ(Listing(), std::vector<std::string>{"out.txt"});
}

TEST_F(FileIoTest, EmptyContentMakesAnEmptyFile) {
  const std::string path = Path("empty");
  ASSERT_TRUE(WriteFileAtomically(path, std::string()).ok());
  EXPECT_TRUE(fs::is_regular_file(path));
  EXPECT_EQ(fs::file_size(path), 0u);
}

TEST_F(FileIoTest, WriterCallbackStreamsPiecesInOrder) {
  const std::string path = Path("pieces.bin");
  int64_t counted = -1;
  std::string expect;
  Status st = WriteFileAtomically(path, [&](FileSink& sink) -> Status {
    for (int i = 0; i < 1000; ++i) {
      const std::string piece = std::to_string(i) + ",";
      expect += piece;
      ST_RETURN_IF_ERROR(sink.Write(piece));
    }
    const int32_t raw[2] = {7, -1};
    expect.append(reinterpret_cast<const char*>(raw), sizeof(raw));
    ST_RETURN_IF_ERROR(sink.Write(raw, sizeof(raw)));
    counted = sink.bytes_written();
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(ReadBytes(path), expect);
  EXPECT_EQ(counted, static_cast<int64_t>(expect.size()));
}

TEST_F(FileIoTest, MissingDirectoryIsAnErrorNamingThePathAndTheFix) {
  const std::string path = Path("no/such/dir/out.bin");
  Status st = WriteFileAtomically(path, std::string("x"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_TRUE(Contains(st.message(), "cannot write " + path)) << st.message();
  EXPECT_TRUE(Contains(st.message(), "temporary file in " + Path("no/such/dir")))
      << st.message();
  EXPECT_TRUE(Contains(st.message(), "No such file or directory")) << st.message();
  EXPECT_TRUE(Contains(st.message(), "check that the directory exists")) << st.message();
  EXPECT_EQ(Listing(), std::vector<std::string>{});
}

TEST_F(FileIoTest, DirectoryThatIsAFileIsAnError) {
  // Permission bits do not stop root (the CI user): a parent that is not a
  // directory fails for every user.
  WriteBytes(Path("plain"), "not a directory");
  const std::string path = Path("plain") + "/out.bin";
  Status st = WriteFileAtomically(path, std::string("x"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_TRUE(Contains(st.message(), "cannot write " + path)) << st.message();
  EXPECT_TRUE(Contains(st.message(), "Not a directory")) << st.message();
  EXPECT_EQ(ReadBytes(Path("plain")), "not a directory");
}

TEST_F(FileIoTest, WriterErrorLeavesTheExistingFileAndNoTemporary) {
  const std::string path = Path("keep.txt");
  WriteBytes(path, "the good old content");
  Status st = WriteFileAtomically(path, [](FileSink& sink) -> Status {
    ST_RETURN_IF_ERROR(sink.Write(std::string("half of a new")));
    return InvalidArgument("tensor 'w' has no data");
  });
  ASSERT_FALSE(st.ok());
  // The writer's own error, unchanged.
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "tensor 'w' has no data");
  EXPECT_EQ(ReadBytes(path), "the good old content");
  EXPECT_EQ(Listing(), std::vector<std::string>{"keep.txt"});
}

// A real write(2) failure: the file-size limit makes the kernel refuse the
// bytes beyond it (EFBIG), as a full disk would (ENOSPC).
TEST_F(FileIoTest, FailedWriteLeavesTheExistingFileAndNoTemporary) {
  const std::string path = Path("keep.bin");
  WriteBytes(path, "the good old content");
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // else the signal ends the test
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Status st = WriteFileAtomically(path, std::string(100000, 'n'));
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_TRUE(Contains(st.message(), "cannot write " + path + ": writing: File too large"))
      << st.message();
  EXPECT_EQ(ReadBytes(path), "the good old content");
  EXPECT_EQ(Listing(), std::vector<std::string>{"keep.bin"});
}

TEST_F(FileIoTest, FailedRenameLeavesTheTargetAndNoTemporary) {
  // A directory in the way: everything succeeds up to the rename.
  const std::string path = Path("taken");
  fs::create_directory(path);
  WriteBytes(path + "/inside", "kept");
  Status st = WriteFileAtomically(path, std::string("x"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_TRUE(Contains(st.message(), "cannot write " + path + ": renaming")) << st.message();
  EXPECT_EQ(ReadBytes(path + "/inside"), "kept");
  EXPECT_EQ(Listing(), std::vector<std::string>{"taken"});
}

TEST_F(FileIoTest, EmptyPathIsRejected) {
  Status st = WriteFileAtomically("", std::string("x"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scaletrain
