#include "profiling/cc/trace_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
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
  if (names.size() > kMaxListedEntries)
    out << " (and " << names.size() - kMaxListedEntries << " more)";
  return out.str();
}

}  // namespace

std::vector<std::string> ListTraceFiles(const std::string& run_dir) {
  std::error_code error;
  if (!fs::exists(run_dir, error)) {
    throw TraceNotFoundError(
        "run directory '" + run_dir +
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

// The whole file, read into memory of its own. Mapping the file instead would save the copy
// (~10% of a conversion), but a file truncated while mapped kills the process with SIGBUS at the
// first touch of a lost page; read() just returns fewer bytes, which is reported as an error. The
// buffer is an anonymous mapping advised to use huge pages, so filling it costs few page faults.
SharedBytes ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw TraceNotFoundError("cannot open trace file '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw TraceNotFoundError("'" + path + "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    close(fd);
    return {std::make_shared<const std::string>(), std::string_view()};
  }
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    close(fd);
    throw std::bad_alloc();
  }
  std::shared_ptr<const void> owner(data,
                                    [size](const void* p) { munmap(const_cast<void*>(p), size); });
  madvise(data, size, MADV_HUGEPAGE);  // Advice only: without transparent huge pages, 4 KiB pages.
  char* out = static_cast<char*>(data);
  size_t done = 0;
  int error = 0;
  while (done < size) {
    const ssize_t n = read(fd, out + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : 0;
      break;
    }
    done += static_cast<size_t>(n);
  }
  struct stat after;
  const bool resized = fstat(fd, &after) == 0 && after.st_size != st.st_size;
  close(fd);
  if (error != 0) {
    throw TraceNotFoundError("error while reading trace file '" + path +
                             "': " + std::strerror(error));
  }
  if (done < size || resized) {
    throw TraceFormatError("trace file '" + path + "' changed size while it was read (" +
                           std::to_string(size) + " bytes when opened, " +
                           std::to_string(resized ? static_cast<size_t>(after.st_size) : done) +
                           " after): was the trace still being written? Convert it once "
                           "jax.profiler.stop_trace() has returned.");
  }
  return {std::move(owner), std::string_view(out, size)};
}

}  // namespace

LazyXSpace ReadXSpaceFile(const std::string& path) {
  return LazyXSpace::Parse(ReadFile(path), "trace file '" + path + "'");
}

}  // namespace pgle
