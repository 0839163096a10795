"""PGLE (profile-guided latency estimation) tools: JAX profiler traces -> XLA profile.pb -> XLA flags.

The logic is C++ (profiling/cc); `profiling._pgle` is its pybind11 binding. The public surface:

  collect(step, steps, logdir) -> run dir      trace N calls with jax.profiler   (collection.py)
  convert(run_dirs, percentile=None) -> bytes  XLA's converter, sorted, errors   (conversion.py)
  report(profile, hlo_text=None) -> Report     top costs, coverage, dropped      (reporting.py)
  xla_flags(profile_path) -> str               flags of the run that uses it     (flags.py)
  auto_pgle_env(), enable_auto_pgle()          JAX's auto PGLE                   (auto_pgle.py)

Names are imported on first use, so `import profiling` (and the CLI) never imports jax, and each
module's Bazel target needs only its own dependencies.
"""

import importlib

_EXPORTS = {
  "Aggregation": "profiling.conversion",
  "convert": "profiling.conversion",
  "convert_detailed": "profiling.conversion",
  "convert_xspaces": "profiling.conversion",
  "read_profile": "profiling.conversion",
  "write_profile": "profiling.conversion",
  "report": "profiling.reporting",
  "xla_flags": "profiling.flags",
  "merge_xla_flags": "profiling.flags",
  "auto_pgle_env": "profiling.auto_pgle",
  "enable_auto_pgle": "profiling.auto_pgle",
  "collect": "profiling.collection",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
  if name not in _EXPORTS:
    raise AttributeError(
      f"module 'profiling' has no attribute '{name}'; public names: {', '.join(__all__)}"
    )
  return getattr(importlib.import_module(_EXPORTS[name]), name)
