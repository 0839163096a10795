// profiling._pgle: the Python binding of the PGLE C++ library (cc/). It converts types, releases
// the GIL around the work, and turns each C++ error type into its own Python exception; no logic
// lives here. Built as native/_pgle.so and loaded by _pgle.py, which gives it its own protobuf
// runtime.

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "profiling/cc/convert.h"
#include "profiling/cc/errors.h"
#include "profiling/cc/profile.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"

namespace py = pybind11;

namespace {

using Entry = std::tuple<std::string, double, int64_t, int64_t>;  // name, cost_us, samples, groups

pgle::ProfileFormat Format(bool text) {
  return text ? pgle::ProfileFormat::kText : pgle::ProfileFormat::kBinary;
}

std::vector<std::pair<std::string, double>> ParseProfile(py::bytes data, bool text) {
  std::string bytes = data;  // Copied while we hold the GIL.
  pgle::Profile profile;
  {
    py::gil_scoped_release release;
    profile = pgle::ParseProfile(bytes, Format(text));
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

py::bytes SerializeProfile(std::vector<std::pair<std::string, double>> costs, bool text) {
  std::vector<pgle::InstructionCost> converted;
  converted.reserve(costs.size());
  for (auto& [name, cost_us] : costs) converted.push_back({std::move(name), cost_us});
  std::string out;
  {
    py::gil_scoped_release release;
    out = pgle::SerializeProfile(std::move(converted), Format(text));
  }
  return py::bytes(out);
}

pgle::ConvertOptions Options(pgle::PlaneSelection planes, pgle::Aggregation aggregation,
                             double percentile, bool group_by_host) {
  pgle::ConvertOptions options;
  options.planes = planes;
  options.aggregation = {aggregation, percentile};
  options.group_by_host = group_by_host;
  return options;
}

// (profile, entries, trace_files, num_groups, num_costs, num_samples): plain Python values, no
// wrapper class to keep alive. `entries` is empty unless they were asked for.
py::tuple ToPython(pgle::ProfileResult result) {
  std::vector<Entry> entries;
  entries.reserve(result.conversion.entries.size());
  for (auto& e : result.conversion.entries)
    entries.emplace_back(std::move(e.name), e.cost_us, e.samples, e.groups);
  return py::make_tuple(py::bytes(result.profile), entries, result.conversion.trace_files,
                        result.conversion.num_groups, result.num_costs, result.num_samples);
}

py::tuple ConvertRunDirs(std::vector<std::string> run_dirs, pgle::PlaneSelection planes,
                         pgle::Aggregation aggregation, double percentile, bool group_by_host,
                         bool text, bool entries) {
  pgle::ProfileResult result;
  {
    py::gil_scoped_release release;
    result = pgle::ConvertRunDirsToProfile(
        run_dirs, Options(planes, aggregation, percentile, group_by_host), Format(text), entries);
  }
  return ToPython(std::move(result));
}

py::tuple ConvertXSpaces(const std::vector<py::bytes>& xspaces, pgle::PlaneSelection planes,
                         pgle::Aggregation aggregation, double percentile, bool text,
                         bool entries) {
  std::vector<std::string> copies(xspaces.begin(), xspaces.end());
  pgle::ProfileResult result;
  {
    py::gil_scoped_release release;
    result = pgle::ConvertXSpacesToProfile(copies, Options(planes, aggregation, percentile, false),
                                           Format(text), entries);
  }
  return ToPython(std::move(result));
}

}  // namespace

PYBIND11_MODULE(_pgle, m) {
  m.doc() = "C++ core of the PGLE tools: JAX profiler traces -> XLA ProfiledInstructionsProto.";

  // pybind11 tries translators newest first: the base classes are registered before subclasses.
  py::register_exception<pgle::PgleError>(m, "PgleError", PyExc_RuntimeError);
  py::register_exception<pgle::ProfileError>(m, "ProfileError", PyExc_ValueError);
  py::register_exception<pgle::TraceNotFoundError>(m, "TraceNotFoundError",
                                                   PyExc_FileNotFoundError);
  py::register_exception<pgle::TraceFormatError>(m, "TraceFormatError", PyExc_ValueError);
  py::register_exception<pgle::NoDeviceEventsError>(m, "NoDeviceEventsError", PyExc_ValueError);
  py::register_exception<pgle::InvalidArgumentError>(m, "InvalidArgumentError", PyExc_ValueError);

  py::enum_<pgle::PlaneSelection>(m, "PlaneSelection")
      .value("DEVICE", pgle::PlaneSelection::kDevice,
             "XLA's choice: GPU, else TPU, else CUSTOM planes.")
      .value("DEVICE_ELSE_HOST", pgle::PlaneSelection::kDeviceElseHost,
             "XLA's choice; /host:CPU when a trace has no device plane.");
  py::enum_<pgle::Aggregation>(m, "Aggregation")
      .value("MEAN", pgle::Aggregation::kMean)
      .value("PERCENTILE", pgle::Aggregation::kPercentile)
      .value("MEDIAN", pgle::Aggregation::kMedian)
      .value("MIN", pgle::Aggregation::kMin)
      .value("MAX", pgle::Aggregation::kMax);

  m.def(
      "convert_run_dirs", &ConvertRunDirs, py::arg("run_dirs"), py::arg("planes"),
      py::arg("aggregation"), py::arg("percentile"), py::arg("group_by_host"),
      py::arg("text") = false, py::arg("entries") = false,
      "Converts the *xplane.pb files of each run directory into a profile, in one call. Returns\n"
      "(profile, entries, trace_files, num_groups, num_costs, num_samples): profile the\n"
      "ProfiledInstructionsProto bytes (text format if `text`), entries [(name, cost_us, samples,\n"
      "groups)] sorted by name if `entries`, else [].");
  m.def("convert_xspaces", &ConvertXSpaces, py::arg("xspaces"), py::arg("planes"),
        py::arg("aggregation"), py::arg("percentile"), py::arg("text") = false,
        py::arg("entries") = false,
        "Like convert_run_dirs for serialized XSpaces, each one run of one host.");
  m.def("serialize_profile", &SerializeProfile, py::arg("costs"), py::arg("text"),
        "[(name, cost_us)] -> ProfiledInstructionsProto bytes (text format if `text`), sorted by "
        "name.");
  m.def("parse_profile", &ParseProfile, py::arg("data"), py::arg("text") = false,
        "Returns [(name, cost_us)] sorted by name from ProfiledInstructionsProto bytes (text "
        "format if `text`).\n"
        "Raises ProfileError (a ValueError) if the bytes are not such a proto or hold invalid "
        "costs.");
  m.def("canonical_profile_bytes", &CanonicalProfileBytes, py::arg("data"),
        "Re-serializes a profile with entries sorted, so equal profiles give equal bytes.");
}
