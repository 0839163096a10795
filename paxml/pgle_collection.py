"""PGLE for training runs: profile a window of steps, or run with a profile.

Collecting (`--pgle_collect_start_step=M --pgle_collect_num_steps=N` on main): steps M..M+N-1 are
traced with jax.profiler into `<job_log_dir>/pgle/trace/` and converted by the C++ converter into
`<job_log_dir>/pgle/profile.pb`. Using (`--pgle_profile=PATH`): XLA_FLAGS gets the latency-hiding
scheduler and the profile path before JAX starts its backend, since XLA reads its flags only then.
"""

import os

from absl import logging
import jax
from jax._src import xla_bridge

from paxml import trainer
from profiling import conversion
from profiling import flags as pgle_flags


def profile_path(job_log_dir: str) -> str:
  return os.path.join(job_log_dir, "pgle", "profile.pb")


class StepWindowProfiler:
  """Traces steps [start_step, start_step + num_steps) and writes the PGLE profile of them.

  The trainer calls `before_step(step)` with the number of the step it is about to run and
  `after_step(step, outputs)` with the count of steps done; `close()` when the loop ends, so a run
  that stops inside the window still writes what it traced.
  """

  def __init__(self, job_log_dir: str, start_step: int, num_steps: int):
    if start_step < 0 or num_steps < 1:
      raise ValueError(
        f"PGLE collection needs start_step >= 0 and num_steps >= 1, got {start_step} and "
        f"{num_steps}"
      )
    self.start_step, self.end_step = start_step, start_step + num_steps
    self.trace_dir = os.path.join(job_log_dir, "pgle", "trace")
    self.profile_path = profile_path(job_log_dir)
    self._tracing = False

  def before_step(self, step: int) -> None:
    # Started at the first step that is in the window, even when a resumed run begins inside it.
    if not self._tracing and self.start_step <= step < self.end_step and not self.done:
      logging.info("PGLE: tracing steps %d..%d into %s", step, self.end_step - 1, self.trace_dir)
      jax.profiler.start_trace(self.trace_dir)
      self._tracing = True

  def after_step(self, step: int, outputs) -> None:
    if self._tracing and step >= self.end_step:
      # Dispatch is asynchronous: wait for the traced steps to run before the trace stops.
      jax.block_until_ready(outputs)
      self._finish()

  def close(self) -> None:
    if self._tracing:
      self._finish()

  @property
  def done(self) -> bool:
    return os.path.exists(self.profile_path)

  def _finish(self) -> None:
    jax.profiler.stop_trace()
    self._tracing = False
    # On CPU the trace has no device plane; reading /host:CPU gives a profile to inspect (XLA's
    # GPU scheduler is the only consumer that uses one).
    result = conversion.convert_detailed(self.trace_dir, include_host=True)
    conversion.write_profile(result.profile, self.profile_path)
    logging.info(
      "PGLE: wrote %s (%d instructions from %s). Use it with --pgle_profile=%s",
      self.profile_path,
      len(result.entries),
      ", ".join(result.trace_files),
      self.profile_path,
    )


def train_and_collect_profile(
  experiment, job_log_dir: str, *, start_step: int, num_steps: int
) -> str:
  """Trains `experiment` in `job_log_dir`, tracing steps [start_step, start_step + num_steps).

  The library form of main's --pgle_collect_start_step/--pgle_collect_num_steps (`profiling.collect`
  does the same for a plain step function). Training runs to the experiment's num_train_steps (or
  resumes from its checkpoint, as main does); returns the path of the written profile.pb.
  Raises RuntimeError when the run ended before the window, so no profile was written.
  """
  profiler = StepWindowProfiler(job_log_dir, start_step, num_steps)
  trainer.train_and_evaluate(experiment, job_log_dir, profiler=profiler)
  if not profiler.done:
    raise RuntimeError(
      f"PGLE: no profile written: the run in {job_log_dir} did not reach steps {start_step}.."
      f"{start_step + num_steps - 1} (it stops at num_train_steps, or had already passed them "
      "in an earlier run whose checkpoint it resumed)"
    )
  return profiler.profile_path


def use_profile(path: str) -> str:
  """Adds the flags that make XLA use the profile at `path` to XLA_FLAGS; returns the new value.

  Raises RuntimeError if JAX's backend already started (XLA would never see the flags), and
  FileNotFoundError / ValueError for a missing or empty profile.
  """
  if xla_bridge.backends_are_initialized():
    raise RuntimeError(
      "--pgle_profile must take effect before JAX initializes its backend, but it is already "
      "initialized; set XLA_FLAGS yourself: "
      f'XLA_FLAGS="{pgle_flags.xla_flags(path, check=False)}"'
    )
  value = pgle_flags.merge_xla_flags(os.environ.get("XLA_FLAGS"), pgle_flags.xla_flags(path))
  os.environ["XLA_FLAGS"] = value
  logging.info(
    'PGLE: using profile %s; XLA_FLAGS=%s. XLA logs "%s" when it applies it '
    "(TF_CPP_MIN_LOG_LEVEL=0).",
    os.path.abspath(path),
    value,
    pgle_flags.FOUND_PROFILE_LOG_LINE,
  )
  return value
