#ifndef PROFILING_CC_PROFILE_H_
#define PROFILING_CC_PROFILE_H_

// Reading, writing and canonicalising ProfiledInstructionsProto files, the profile XLA's GPU
// latency-hiding scheduler reads.

#include <string>
#include <string_view>
#include <vector>

#include "profiling/cc/errors.h"

namespace pgle {

// Raised for input that is not a valid ProfiledInstructionsProto; the message says which check
// failed.
class ProfileError : public PgleError {
 public:
  using PgleError::PgleError;
};

// XLA reads both: `<fingerprint>.pbtxt` (text format) before `<fingerprint>.pb` (binary) in a
// profile directory, and a single file by its extension.
enum class ProfileFormat { kBinary, kText };

struct InstructionCost {
  std::string name;
  double cost_us = 0;
};

struct Profile {
  std::vector<InstructionCost> costs;  // Sorted by name.
  size_t num_latencies = 0;
};

// Parses serialized bytes. Throws ProfileError if they are not a ProfiledInstructionsProto, or if
// an instruction has an empty name or a negative or non-finite cost (XLA would use such a cost as
// is).
Profile ParseProfile(std::string_view bytes, ProfileFormat format = ProfileFormat::kBinary);

// Re-serializes `bytes` with costs and latencies sorted, so equal profiles give equal bytes
// whatever order they were collected in. Throws ProfileError like ParseProfile.
std::string CanonicalProfileBytes(std::string_view bytes);

// Serializes `costs` sorted by name (then cost), so the same costs always give the same bytes.
std::string SerializeProfile(std::vector<InstructionCost> costs, ProfileFormat format);

}  // namespace pgle

#endif  // PROFILING_CC_PROFILE_H_
