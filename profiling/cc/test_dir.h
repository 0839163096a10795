#ifndef PROFILING_CC_TEST_DIR_H_
#define PROFILING_CC_TEST_DIR_H_

// Test helper: empty directories for tests that read run directories from disk.

#include <cstdlib>
#include <filesystem>
#include <string>

namespace pgle::testing {

// An empty directory `name` under Bazel's per-test temp dir (TEST_TMPDIR), removed first if a
// previous test case left it.
inline std::filesystem::path FreshDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir =
      std::filesystem::path(root ? root : std::filesystem::temp_directory_path().string()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace pgle::testing

#endif  // PROFILING_CC_TEST_DIR_H_
