"""Auto PGLE: JAX profiles a jitted function's first runs and recompiles it with the profile.

JAX does it in-process (jax/_src/pjit.py): with `jax_enable_pgle`, each jitted function runs
`jax_pgle_profiling_runs` times under the profiler, then is recompiled with the per-instruction
`jax_pgle_aggregation_percentile` of the runs (XLA's rule, see profiling/cc/aggregate.h). It only
affects functions that `jax.jit` compiles on call: functions compiled ahead of time with
`.lower(...).compile()` never recompile, so auto PGLE has no effect on them, without a warning.
"""

from __future__ import annotations

import os
import warnings

ENABLE_ENV = "JAX_ENABLE_PGLE"
RUNS_ENV = "JAX_PGLE_PROFILING_RUNS"
PERCENTILE_ENV = "JAX_PGLE_AGGREGATION_PERCENTILE"

# JAX's defaults (jax/_src/config.py).
DEFAULT_RUNS = 3
DEFAULT_PERCENTILE = 90

AOT_WARNING = (
  "auto PGLE has no effect on functions compiled ahead of time (jax.jit(f).lower(...).compile()): "
  "they are never recompiled with the profile. Call the jitted function directly, or use the "
  "manual workflow (pgle convert + pgle flags) for AOT-compiled programs."
)


def _validate(runs: int, percentile: int) -> None:
  if not isinstance(runs, int) or runs < 1:
    raise ValueError(f"runs must be an int >= 1 (profiled calls before recompiling), got {runs!r}")
  if not isinstance(percentile, int) or not 0 <= percentile <= 100:
    # JAX's config is an int; outside [0, 100] XLA's aggregation silently gives an empty profile.
    raise ValueError(f"percentile must be an int in [0, 100], got {percentile!r}")


def auto_pgle_env(runs: int = DEFAULT_RUNS, percentile: int = DEFAULT_PERCENTILE) -> dict[str, str]:
  """Environment variables that turn on auto PGLE in a new process (JAX reads them at import)."""
  _validate(runs, percentile)
  return {ENABLE_ENV: "true", RUNS_ENV: str(runs), PERCENTILE_ENV: str(percentile)}


def enable_auto_pgle(runs: int = DEFAULT_RUNS, percentile: int = DEFAULT_PERCENTILE) -> None:
  """Turns on auto PGLE in this process, for functions jitted after this call. Warns about AOT."""
  _validate(runs, percentile)
  import jax  # pylint: disable=g-import-not-at-top  (the CLI must not import jax)

  jax.config.update("jax_enable_pgle", True)
  jax.config.update("jax_pgle_profiling_runs", runs)
  jax.config.update("jax_pgle_aggregation_percentile", percentile)
  warnings.warn(AOT_WARNING, UserWarning, stacklevel=2)


def auto_pgle_from_env(
  environ: os._Environ | dict[str, str] | None = None,
) -> dict[str, str] | None:
  """The auto-PGLE settings in `environ` (default os.environ), or None if it is off there."""
  environ = os.environ if environ is None else environ
  if environ.get(ENABLE_ENV, "").lower() not in ("1", "true", "yes", "on"):
    return None
  return {
    ENABLE_ENV: environ[ENABLE_ENV],
    RUNS_ENV: environ.get(RUNS_ENV, str(DEFAULT_RUNS)),
    PERCENTILE_ENV: environ.get(PERCENTILE_ENV, str(DEFAULT_PERCENTILE)),
  }
