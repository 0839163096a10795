"""Benchmarks of the paxml trainer (`bazel run //paxml/benchmarks:trainer_overhead`)."""
