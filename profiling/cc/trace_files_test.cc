#include "profiling/cc/trace_files.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "profiling/cc/errors.h"
#include "profiling/cc/test_dir.h"

namespace pgle {
namespace {
namespace fs = std::filesystem;
using ::pgle::testing::FreshDir;

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string SerializedSpace(const std::string& plane_name) {
  tensorflow::profiler::XSpace space;
  space.add_planes()->set_name(plane_name);
  return space.SerializeAsString();
}

// The message of the TraceNotFoundError that ListTraceFiles throws, or "" if it throws nothing.
std::string ListError(const std::string& dir) {
  try {
    ListTraceFiles(dir);
  } catch (const TraceNotFoundError& e) {
    return e.what();
  }
  return "";
}

TEST(ListTraceFilesTest, MissingDirectorySaysWhatToPass) {
  std::string message = ListError((FreshDir("missing") / "nope").string());
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  EXPECT_NE(message.find("plugins/profile/<run>"), std::string::npos) << message;
}

TEST(ListTraceFilesTest, FileInsteadOfDirectory) {
  fs::path dir = FreshDir("file_not_dir");
  WriteFile(dir / "host.xplane.pb", SerializedSpace("/device:GPU:0"));
  EXPECT_NE(ListError((dir / "host.xplane.pb").string()).find("is not a directory"),
            std::string::npos);
}

TEST(ListTraceFilesTest, NoTraceListsWhatIsThere) {
  fs::path dir = FreshDir("no_trace");
  WriteFile(dir / "host.trace.json.gz", "x");
  fs::create_directories(dir / "plugins");
  std::string message = ListError(dir.string());
  EXPECT_NE(message.find("no *xplane.pb trace"), std::string::npos) << message;
  EXPECT_NE(message.find("host.trace.json.gz, plugins/"), std::string::npos) << message;
}

TEST(ListTraceFilesTest, EmptyDirectory) {
  EXPECT_NE(ListError(FreshDir("empty").string()).find("it is empty"), std::string::npos);
}

TEST(ListTraceFilesTest, FindsTracesSortedAndNotRecursively) {
  fs::path dir = FreshDir("sorted");
  WriteFile(dir / "b.xplane.pb", "");
  WriteFile(dir / "a.xplane.pb", "");
  WriteFile(dir / "a.trace.json.gz", "");
  fs::create_directories(dir / "nested");
  WriteFile(dir / "nested" / "c.xplane.pb", "");
  fs::create_directories(dir / "d.xplane.pb");  // A directory with a trace's name is not a trace.
  auto files = ListTraceFiles(dir.string());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(fs::path(files[0]).filename(), "a.xplane.pb");
  EXPECT_EQ(fs::path(files[1]).filename(), "b.xplane.pb");
}

TEST(ReadXSpaceFileTest, ReadsPlanes) {
  fs::path dir = FreshDir("read");
  WriteFile(dir / "h.xplane.pb", SerializedSpace("/device:GPU:3"));
  auto space = ReadXSpaceFile((dir / "h.xplane.pb").string());
  ASSERT_EQ(space.headers().planes_size(), 1);
  EXPECT_EQ(space.headers().planes(0).name(), "/device:GPU:3");
}

TEST(ReadXSpaceFileTest, TruncatedFileIsAFormatErrorNamingTheFile) {
  fs::path dir = FreshDir("truncated");
  std::string bytes = SerializedSpace("/device:GPU:0 with a long enough name");
  WriteFile(dir / "h.xplane.pb", bytes.substr(0, bytes.size() - 5));
  try {
    ReadXSpaceFile((dir / "h.xplane.pb").string());
    FAIL() << "a truncated file parsed";
  } catch (const TraceFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("h.xplane.pb"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST(ReadXSpaceFileTest, EmptyFileIsATraceWithoutPlanes) {
  // Protobuf parses no bytes as an empty XSpace.
  fs::path dir = FreshDir("empty");
  WriteFile(dir / "h.xplane.pb", "");
  EXPECT_EQ(ReadXSpaceFile((dir / "h.xplane.pb").string()).headers().planes_size(), 0);
}

TEST(ReadXSpaceFileTest, TraceTruncatedAfterReadingIsStillWhole) {
  // The trace is a copy: a file truncated after it was read cannot take pages away from it (a
  // mapping of the file would end the process with SIGBUS at the next read of a lost page).
  fs::path dir = FreshDir("truncated_after");
  WriteFile(dir / "h.xplane.pb", SerializedSpace("/device:GPU:0"));
  const LazyXSpace space = ReadXSpaceFile((dir / "h.xplane.pb").string());
  fs::resize_file(dir / "h.xplane.pb", 0);
  ASSERT_EQ(space.headers().planes_size(), 1);
  EXPECT_EQ(space.headers().planes(0).name(), "/device:GPU:0");
  EXPECT_TRUE(space.CheckLines(0));
}

TEST(ReadXSpaceFileTest, FileShorterThanItsSizeIsAFormatErrorNotACrash) {
  // What a file truncated while it is read looks like: fewer bytes than fstat said. sysfs files
  // report a size of one page and hold a few bytes.
  const std::string path = "/sys/kernel/mm/transparent_hugepage/enabled";
  if (!fs::exists(path) || fs::file_size(path) < 100) GTEST_SKIP() << "no such sysfs file here";
  try {
    ReadXSpaceFile(path);
    FAIL() << "a short read parsed";
  } catch (const TraceFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("changed size while it was read"), std::string::npos)
        << e.what();
  }
}

TEST(ReadXSpaceFileTest, MissingFileIsNotFound) {
  EXPECT_THROW(ReadXSpaceFile((FreshDir("missing") / "h.xplane.pb").string()), TraceNotFoundError);
}

TEST(ParseXSpaceTest, TextIsNotAnXSpace) {
  EXPECT_THROW(ParseXSpace("{\"traceEvents\": []}", "json"), TraceFormatError);
}

}  // namespace
}  // namespace pgle
