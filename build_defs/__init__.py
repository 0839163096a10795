"""Bazel macros and rules of this repo, and the Python tools they run (make_wheel)."""
