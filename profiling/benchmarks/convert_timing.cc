// Times our C++ converter alone, without Python or jaxlib, on a run directory:
//
//   bazel run //profiling/benchmarks:convert_timing -- RUN_DIR [REPEATS]
//
// For each repeat prints the wall and CPU (user + system) seconds of one ConvertRunDirs call, then
// the process's peak RSS. CPU seconds vary far less than wall seconds on a shared machine: use
// them to compare two versions of the converter (convert_benchmark.py compares with jaxlib).

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "profiling/cc/convert.h"
#include "profiling/cc/errors.h"

namespace {

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(
        stderr, "usage: %s RUN_DIR [REPEATS]\n  RUN_DIR holds the *xplane.pb trace(s) to convert\n",
        argv[0]);
    return 2;
  }
  const int repeats = argc == 3 ? std::atoi(argv[2]) : 3;
  for (int r = 0; r < repeats; ++r) {
    const double cpu_start = CpuSeconds();
    const auto wall_start = std::chrono::steady_clock::now();
    pgle::ConvertResult result;
    try {
      result = pgle::ConvertRunDirs({argv[1]}, {});
    } catch (const pgle::PgleError& e) {
      std::fprintf(stderr, "conversion failed: %s\n", e.what());
      return 1;
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    std::printf("run %d: %.3f s wall, %.3f s CPU; %zu instructions\n", r + 1, wall,
                CpuSeconds() - cpu_start, result.entries.size());
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("peak RSS %.0f MiB\n",
              static_cast<double>(usage.ru_maxrss) / 1024);  // Linux reports KiB.
  return 0;
}
