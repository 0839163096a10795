#ifndef PROFILING_CC_ERRORS_H_
#define PROFILING_CC_ERRORS_H_

// The failures of the PGLE tools, one type per thing the user has to fix differently. The binding
// maps each to its own Python exception; messages say what was found, what was expected and what
// to do, because they end up in front of someone who only ran a command.

#include <stdexcept>

namespace pgle {

// Base of everything below, so C++ callers can catch one type.
class PgleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run directory (or file) that does not exist, or holds no `*xplane.pb` trace.
class TraceNotFoundError : public PgleError {
 public:
  using PgleError::PgleError;
};

// A trace file that protobuf cannot parse as an XSpace: truncated, another format, too large.
class TraceFormatError : public PgleError {
 public:
  using PgleError::PgleError;
};

// A well-formed trace from which no instruction cost could be taken (no device plane, or device
// planes without HLO events). Raised instead of writing an empty profile that XLA would use
// silently.
class NoDeviceEventsError : public PgleError {
 public:
  using PgleError::PgleError;
};

// Invalid options (a percentile outside [0, 100], no run directories).
class InvalidArgumentError : public PgleError {
 public:
  using PgleError::PgleError;
};

}  // namespace pgle

#endif  // PROFILING_CC_ERRORS_H_
