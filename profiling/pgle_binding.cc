// Python binding of the PGLE C++ library: converts types, releases the GIL around parsing, and turns
// ProfileError into ValueError. No logic lives here (see cc/).

#include <string>
#include <utility>
#include <vector>

#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "profiling/cc/profile.h"

namespace py = pybind11;

namespace {

std::vector<std::pair<std::string, double>> ParseProfile(py::bytes data) {
  std::string bytes = data;  // Copied while we hold the GIL.
  pgle::Profile profile;
  {
    py::gil_scoped_release release;
    profile = pgle::ParseProfile(bytes);
  }
  std::vector<std::pair<std::string, double>> costs;
  costs.reserve(profile.costs.size());
  for (auto& cost : profile.costs) costs.emplace_back(std::move(cost.name), cost.cost_us);
  return costs;
}

py::bytes CanonicalProfileBytes(py::bytes data) {
  std::string bytes = data;
  std::string out;
  {
    py::gil_scoped_release release;
    out = pgle::CanonicalProfileBytes(bytes);
  }
  return py::bytes(out);
}

}  // namespace

PYBIND11_MODULE(_pgle, m) {
  m.doc() = "C++ core of the PGLE tools: reads and writes XLA ProfiledInstructionsProto files.";
  py::register_exception<pgle::ProfileError>(m, "ProfileError", PyExc_ValueError);
  m.def("parse_profile", &ParseProfile, py::arg("data"),
        "Returns [(name, cost_us)] sorted by name from serialized ProfiledInstructionsProto bytes.\n"
        "Raises ProfileError (a ValueError) if the bytes are not such a proto or hold invalid costs.");
  m.def("canonical_profile_bytes", &CanonicalProfileBytes, py::arg("data"),
        "Re-serializes a profile with entries sorted, so equal profiles give equal bytes.");
}
