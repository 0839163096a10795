#include "profiling/cc/profile.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <tuple>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"
#include "profiling/cc/profiled_instructions.pb.h"

namespace pgle {
namespace {

using ::tensorflow::profiler::ProfiledInstructionsProto;

// Keeps the parser's first complaint for our message instead of logging it to stderr.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty())
      first_ = "line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1) +
               ": " + message;
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

ProfiledInstructionsProto ParseProto(std::string_view bytes,
                                     ProfileFormat format = ProfileFormat::kBinary) {
  ProfiledInstructionsProto proto;
  if (format == ProfileFormat::kText) {
    FirstErrorCollector errors;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(std::string(bytes), &proto)) {
      throw ProfileError("not a ProfiledInstructionsProto in text format (" + errors.first() +
                         "); expected entries like costs { name: \"fp::fusion.1\" cost_us: 12.5 }");
    }
  } else if (bytes.size() > static_cast<size_t>(INT_MAX) ||
             !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw ProfileError("not a serialized ProfiledInstructionsProto (" +
                       std::to_string(bytes.size()) +
                       " bytes that protobuf could not parse; truncated or another format?)");
  }
  for (const auto& cost : proto.costs()) {
    if (cost.name().empty()) {
      throw ProfileError("an instruction cost has an empty name");
    }
    if (!std::isfinite(cost.cost_us()) || cost.cost_us() < 0) {
      throw ProfileError("instruction '" + cost.name() + "' has invalid cost_us " +
                         std::to_string(cost.cost_us()));
    }
  }
  return proto;
}

}  // namespace

Profile ParseProfile(std::string_view bytes, ProfileFormat format) {
  ProfiledInstructionsProto proto = ParseProto(bytes, format);
  Profile profile;
  profile.costs.reserve(proto.costs_size());
  for (const auto& cost : proto.costs()) {
    profile.costs.push_back({cost.name(), cost.cost_us()});
  }
  std::sort(profile.costs.begin(), profile.costs.end(),
            [](const InstructionCost& a, const InstructionCost& b) {
              return std::tie(a.name, a.cost_us) < std::tie(b.name, b.cost_us);
            });
  profile.num_latencies = proto.latencies_size();
  return profile;
}

std::string SerializeProfile(std::vector<InstructionCost> costs, ProfileFormat format) {
  std::sort(costs.begin(), costs.end(), [](const InstructionCost& a, const InstructionCost& b) {
    return std::tie(a.name, a.cost_us) < std::tie(b.name, b.cost_us);
  });
  ProfiledInstructionsProto proto;
  proto.mutable_costs()->Reserve(static_cast<int>(costs.size()));
  for (auto& cost : costs) {
    auto* out = proto.add_costs();
    out->set_name(std::move(cost.name));
    out->set_cost_us(cost.cost_us);
  }
  std::string out;
  if (format == ProfileFormat::kText) {
    // The printer writes doubles so that they parse back to the same value.
    if (!google::protobuf::TextFormat::PrintToString(proto, &out)) {
      throw ProfileError("protobuf could not print the profile as text");
    }
    return out;
  }
  if (!proto.SerializeToString(&out))
    throw ProfileError("protobuf could not serialize the profile");
  return out;
}

std::string CanonicalProfileBytes(std::string_view bytes) {
  ProfiledInstructionsProto proto = ParseProto(bytes);
  auto* costs = proto.mutable_costs();
  std::sort(costs->begin(), costs->end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.name(), a.cost_us()) < std::make_tuple(b.name(), b.cost_us());
  });
  auto* latencies = proto.mutable_latencies();
  std::sort(latencies->begin(), latencies->end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.source(), a.target(), a.latency_us()) <
           std::make_tuple(b.source(), b.target(), b.latency_us());
  });
  std::string out;
  // Deterministic serialization: map fields and unknown fields in a fixed order as well.
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    proto.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace pgle
