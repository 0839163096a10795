r"""Command-line entry point: find the experiment named by --exp and run it.

  ./bazelw run //paxml:main -- --exp=tasks.lm.params.demo.DemoLm \
      --job_log_dir=/tmp/pax_demo

`run` does the work without flags, so tests and notebooks call it directly.
"""

from collections.abc import Sequence
import logging as std_logging
import os
import sys

from absl import app
from absl import flags
from absl import logging

from paxml import experiment_registry
from paxml import user_paths
# Registers the built-in experiments, so their short names (`demo.DemoLm`)
# work on the command line without an import.
from paxml.tasks.lm.params import c4  # pylint: disable=unused-import
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.tasks.lm.params import lm_cloud  # pylint: disable=unused-import

MODES = ("train", "eval", "decode")

_EXP = flags.DEFINE_string(
    "exp", None,
    "Experiment to run: a registered name such as tasks.lm.params.demo.DemoLm, "
    "or any dotted suffix of it (demo.DemoLm).",
)
_JOB_LOG_DIR = flags.DEFINE_string(
    "job_log_dir", None,
    "Directory for checkpoints/ and summaries/; an existing run there is resumed.",
)
_MODE = flags.DEFINE_enum("mode", "train", MODES, "What to do with the experiment.")
_PGLE_COLLECT_START_STEP = flags.DEFINE_integer(
    "pgle_collect_start_step", None,
    "PGLE, first run: trace training from this step on and write <job_log_dir>/pgle/profile.pb "
    "(raw trace in <job_log_dir>/pgle/trace/). Pick a step after compilation and warm-up.")
_PGLE_COLLECT_NUM_STEPS = flags.DEFINE_integer(
    "pgle_collect_num_steps", 5, "PGLE: how many steps --pgle_collect_start_step traces.")
_PGLE_PROFILE = flags.DEFINE_string(
    "pgle_profile", None,
    "PGLE, second run: a profile.pb (or a directory of <fingerprint>.pb files) for XLA's "
    "latency-hiding scheduler; sets XLA_FLAGS before JAX starts its backend.")
_JAX_PROFILER_PORT = flags.DEFINE_integer(
    "jax_profiler_port", None,
    "Start jax.profiler's server on this port, for on-demand traces from TensorBoard's profiler.")


class UsageError(Exception):
  """A request this program cannot carry out, explained in one sentence."""


def run(
    exp: str,
    job_log_dir: str,
    mode: str = "train",
    *,
    pgle_collect: tuple[int, int] | None = None,
    pgle_profile: str | None = None,
    jax_profiler_port: int | None = None,
) -> dict[str, float]:
  """Runs experiment `exp` in `mode`; returns the trainer's final metrics.

  `pgle_collect=(start_step, num_steps)` traces those steps into a PGLE profile; `pgle_profile`
  runs with one (see pgle_collection.py); `jax_profiler_port` starts jax.profiler's server.

  Raises:
    experiment_registry.Error: `exp` names no experiment, or several.
    UsageError: `mode` is not implemented yet, or a PGLE option cannot be applied.
  """
  experiment_cls = experiment_registry.get_experiment(exp)
  if mode != "train":
    raise UsageError(
        f"--mode={mode} is not implemented yet; only --mode=train is available"
    )
  # Imported here, not at the top: the trainer pulls in TensorFlow (~10 s),
  # and a mistyped --exp should fail at once.
  # pylint: disable=g-import-not-at-top
  from paxml import pgle_collection
  from paxml import trainer
  # pylint: enable=g-import-not-at-top

  if pgle_profile:
    # First, before anything starts JAX's backend: XLA reads XLA_FLAGS only then.
    try:
      pgle_collection.use_profile(pgle_profile)
    except (OSError, ValueError, RuntimeError) as e:
      raise UsageError(f"--pgle_profile: {e}") from e
  if jax_profiler_port:
    import jax  # pylint: disable=g-import-not-at-top
    jax.profiler.start_server(jax_profiler_port)
    logging.info("jax.profiler server on port %d (TensorBoard > Profile > Capture)",
                 jax_profiler_port)
  profiler = None
  if pgle_collect:
    try:
      profiler = pgle_collection.StepWindowProfiler(job_log_dir, *pgle_collect)
    except ValueError as e:
      raise UsageError(f"--pgle_collect_*: {e}") from e

  logging.info("Running %s in %s", experiment_registry.canonical_name(experiment_cls),
               job_log_dir)
  return trainer.train_and_evaluate(experiment_cls(), job_log_dir, profiler=profiler)


class _HideLibraryInfo(std_logging.Filter):
  """Drops INFO records from Orbax and JAX.

  Orbax logs about ten INFO lines per checkpoint save; they bury the progress
  lines a person follows. Warnings and errors still pass, and --verbosity=1
  shows everything.
  """

  _PACKAGES = tuple(os.sep + p + os.sep for p in ("orbax", "jax"))

  def filter(self, record: std_logging.LogRecord) -> bool:
    if record.levelno >= std_logging.WARNING:
      return True
    return not any(p in record.pathname for p in self._PACKAGES)


def main(argv: Sequence[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if logging.get_verbosity() < logging.DEBUG:
    logging.get_absl_handler().addFilter(_HideLibraryInfo())
  try:
    pgle_collect = None
    if _PGLE_COLLECT_START_STEP.value is not None:
      pgle_collect = (_PGLE_COLLECT_START_STEP.value, _PGLE_COLLECT_NUM_STEPS.value)
    run(
        _EXP.value,
        user_paths.resolve(_JOB_LOG_DIR.value),
        _MODE.value,
        pgle_collect=pgle_collect,
        pgle_profile=_PGLE_PROFILE.value and user_paths.resolve(_PGLE_PROFILE.value),
        jax_profiler_port=_JAX_PROFILER_PORT.value,
    )
  except (experiment_registry.Error, UsageError) as e:
    # One line, no traceback: the message says what to change.
    print(f"error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  # Required only when run as a program: tests import this module and parse
  # their own flags.
  flags.mark_flags_as_required(["exp", "job_log_dir"])
  app.run(main)
