"""Tracing N calls of a step function with jax.profiler: the first step of manual PGLE."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import jax

from profiling import conversion as convert_lib


def _runs(logdir: str) -> set[str]:
  plugin_dir = os.path.join(logdir, "plugins", "profile")
  return set(os.listdir(plugin_dir)) if os.path.isdir(plugin_dir) else set()


def collect(
  step: Callable[[], Any], steps: int, logdir: str | os.PathLike, *, warmup: int = 1
) -> str:
  """Traces `steps` calls of `step()` into `logdir` and returns the new run directory.

  `warmup` calls run first, untraced, so compilation (and the first run's allocations) stay out of
  the trace. The trace stops only after the last step's outputs are ready, so every instruction
  that ran is in it. For a stateful train step, pass a closure that updates its state:

      def step():
        nonlocal state
        state, metrics = train_step(state, batch)
        return metrics

  For the profile to be used by XLA, run with the same XLA flags as the run that will use it,
  including --xla_gpu_enable_latency_hiding_scheduler=true (the fingerprint depends on them).
  """
  if steps < 1:
    raise ValueError(f"steps must be >= 1, got {steps}")
  logdir = os.fspath(logdir)
  for _ in range(warmup):
    jax.block_until_ready(step())
  before = _runs(logdir)
  started = time.time()
  with jax.profiler.trace(logdir):
    out = None
    for _ in range(steps):
      out = step()
    jax.block_until_ready(out)
  new_runs = sorted(_runs(logdir) - before)
  if new_runs:
    return os.path.join(logdir, "plugins", "profile", new_runs[-1])
  # Runs are named by the second they started: a second trace within the same second reuses the
  # directory, adding files to it.
  newest = convert_lib.resolve_run_dir(logdir)
  if os.path.isdir(newest) and os.path.getmtime(newest) >= started - 1:
    return newest
  raise RuntimeError(f"jax.profiler wrote no new run under {logdir}/plugins/profile")
