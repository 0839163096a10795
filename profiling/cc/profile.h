#ifndef PROFILING_CC_PROFILE_H_
#define PROFILING_CC_PROFILE_H_

// Reading and canonicalising serialized ProfiledInstructionsProto files.

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace pgle {

// Raised for input that is not a valid ProfiledInstructionsProto; the message says which check failed.
class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct InstructionCost {
  std::string name;
  double cost_us = 0;
};

struct Profile {
  std::vector<InstructionCost> costs;  // Sorted by name.
  size_t num_latencies = 0;
};

// Parses serialized bytes. Throws ProfileError if they are not a ProfiledInstructionsProto, or if an
// instruction has an empty name or a negative or non-finite cost (XLA would use such a cost as is).
Profile ParseProfile(std::string_view bytes);

// Re-serializes `bytes` with costs and latencies sorted, so equal profiles give equal bytes whatever
// order they were collected in. Throws ProfileError like ParseProfile.
std::string CanonicalProfileBytes(std::string_view bytes);

}  // namespace pgle

#endif  // PROFILING_CC_PROFILE_H_
