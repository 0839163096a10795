#include "profiling/cc/trace_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
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

namespace {

// The file at `path` mapped into memory, read-only: no copy of hundreds of MB, and pages come
// straight from the page cache. Null bytes.owner if it cannot be mapped (an empty file, a file
// system without mmap). jax.profiler writes each run's traces once, into a new directory, so a
// file is not truncated while it is mapped (which would end the process with SIGBUS).
SharedBytes MapFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st;
  void* data = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    data = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  }
  close(fd);  // The mapping stays valid without the descriptor.
  if (data == MAP_FAILED) return {};
  const size_t size = static_cast<size_t>(st.st_size);
  std::shared_ptr<const void> owner(data, [size](const void* p) { munmap(const_cast<void*>(p), size); });
  return {std::move(owner), std::string_view(static_cast<const char*>(data), size)};
}

}  // namespace

LazyXSpace ReadXSpaceFile(const std::string& path) {
  const std::string what = "trace file '" + path + "'";
  SharedBytes mapped = MapFile(path);
  if (mapped.owner) return LazyXSpace::Parse(std::move(mapped), what);

  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw TraceNotFoundError("cannot open trace file '" + path + "'");
  // One read of the known size: traces reach hundreds of MB, where stream iterators are slow.
  std::string bytes(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw TraceNotFoundError("error while reading trace file '" + path + "'");
  }
  return LazyXSpace::Parse(std::move(bytes), what);
}

}  // namespace pgle
