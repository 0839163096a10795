#ifndef PROFILING_CC_TRACE_FILES_H_
#define PROFILING_CC_TRACE_FILES_H_

// Finding and parsing the `<host>.xplane.pb` files that jax.profiler writes into
// `<logdir>/plugins/profile/<run>/`.

#include <string>
#include <string_view>
#include <vector>

#include "profiling/cc/xspace_wire.h"

namespace pgle {

// The trace files of one run: regular files directly inside `run_dir` whose name contains
// "xplane.pb" (XLA's rule; it does not recurse), sorted by name so results never depend on the
// order the file system lists them in. Throws TraceNotFoundError if `run_dir` is missing, is not a
// directory, or holds no such file; the message lists what it does hold.
std::vector<std::string> ListTraceFiles(const std::string& run_dir);

// Parses one serialized XSpace (lazily: see LazyXSpace). `what` names the source in error messages.
// Throws TraceFormatError for bytes protobuf cannot parse (truncated files, other formats).
LazyXSpace ParseXSpace(std::string bytes, const std::string& what);

// Reads one trace file into memory and parses it. Throws TraceNotFoundError if it cannot be read,
// TraceFormatError like ParseXSpace or if the file changes size while it is read (a trace still
// being written: an error, never a crash).
LazyXSpace ReadXSpaceFile(const std::string& path);

}  // namespace pgle

#endif  // PROFILING_CC_TRACE_FILES_H_
