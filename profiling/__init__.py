"""PGLE (profile-guided latency estimation) tools: JAX profiler traces -> XLA profile.pb -> XLA flags.

The logic is C++ (profiling/cc); `profiling._pgle` is its pybind11 binding.
"""
