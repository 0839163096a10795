"""Benchmarks of the PGLE tools; see README.md."""
