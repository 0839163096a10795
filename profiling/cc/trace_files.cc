#include "profiling/cc/trace_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "profiling/cc/errors.h"

namespace pgle {
namespace fs = std::filesystem;

namespace {

constexpr char kTraceFileMarker[] = "xplane.pb";
constexpr size_t kMaxListedEntries = 8;

// "a, b, c (and 5 more)": enough of a directory to see what went wrong without flooding a terminal.
std::string DescribeEntries(std::vector<std::string> names) {
  if (names.empty()) return "it is empty";
  std::sort(names.begin(), names.end());
  std::ostringstream out;
  out << "it holds ";
  for (size_t i = 0; i < names.size() && i < kMaxListedEntries; ++i) {
    out << (i ? ", " : "") << names[i];
  }
  if (names.size() > kMaxListedEntries) out << " (and " << names.size() - kMaxListedEntries << " more)";
  return out.str();
}

}  // namespace

std::vector<std::string> ListTraceFiles(const std::string& run_dir) {
  std::error_code error;
  if (!fs::exists(run_dir, error)) {
    throw TraceNotFoundError("run directory '" + run_dir +
                             "' does not exist. Pass the directory jax.profiler wrote, "
                             "<logdir>/plugins/profile/<run>/ (or the logdir itself to use its newest run).");
  }
  if (!fs::is_directory(run_dir, error)) {
    throw TraceNotFoundError("'" + run_dir +
                             "' is not a directory. Pass the run directory that holds the "
                             "<host>.xplane.pb files, <logdir>/plugins/profile/<run>/.");
  }
  std::vector<std::string> traces;
  std::vector<std::string> others;
  for (const auto& entry : fs::directory_iterator(run_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.find(kTraceFileMarker) != std::string::npos && entry.is_regular_file(error)) {
      traces.push_back(entry.path().string());
    } else {
      others.push_back(entry.is_directory(error) ? name + "/" : name);
    }
  }
  if (error) {
    throw TraceNotFoundError("cannot list run directory '" + run_dir + "': " + error.message());
  }
  if (traces.empty()) {
    throw TraceNotFoundError(
        "no *xplane.pb trace in '" + run_dir + "': " + DescribeEntries(others) +
        ". Expected the run directory jax.profiler writes, <logdir>/plugins/profile/<run>/, "
        "holding one <host>.xplane.pb per host; check that the trace was stopped (files are "
        "written when jax.profiler.stop_trace() runs).");
  }
  std::sort(traces.begin(), traces.end());
  return traces;
}

LazyXSpace ParseXSpace(std::string bytes, const std::string& what) {
  return LazyXSpace::Parse(std::move(bytes), what);
}

LazyXSpace ReadXSpaceFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw TraceNotFoundError("cannot open trace file '" + path + "'");
  // One read of the known size: traces reach hundreds of MB, where stream iterators are slow.
  std::string bytes(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw TraceNotFoundError("error while reading trace file '" + path + "'");
  }
  return ParseXSpace(std::move(bytes), "trace file '" + path + "'");
}

}  // namespace pgle
