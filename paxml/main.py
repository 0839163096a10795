r"""Command-line entry point: find the experiment named by --exp and run it.

  ./bazelw run //paxml:main -- --exp=tasks.lm.params.demo.DemoLm \
      --job_log_dir=/tmp/pax_demo

`run` does the work without flags, so tests and notebooks call it directly. Every flag of Pax's
main is accepted (paxml/pax_flags.py says what each does here), Fiddle's --fdl_config / --fdl_set
included (paxml/fiddle_overrides.py), and JAX's --jax_* options.
"""

from collections.abc import Sequence
import errno
import importlib
import logging as std_logging
import os
import pprint
import sys
import traceback
from typing import Any

from absl import app
from absl import flags
from absl import logging

from paxml import base_experiment
from paxml import experiment_lint
from paxml import experiment_registry
from paxml import fiddle_overrides
from paxml import pax_flags
from hostenv import user_paths

# Registers the built-in experiments, so their short names (`demo.DemoLm`)
# work on the command line without an import.
from paxml.tasks.lm.params import c4  # pylint: disable=unused-import
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.tasks.lm.params import lm_cloud  # pylint: disable=unused-import

MODES = ("train", "eval", "decode", "decode_once", "infer")

_EXP = flags.DEFINE_string(
  "exp",
  None,
  "Experiment to run: a registered name such as tasks.lm.params.demo.DemoLm, "
  "or any dotted suffix of it (demo.DemoLm).",
)
_JOB_LOG_DIR = flags.DEFINE_string(
  "job_log_dir",
  None,
  "Directory for checkpoints/ and summaries/; an existing run there is resumed.",
)
_MODE = flags.DEFINE_enum(
  "mode",
  "train",
  MODES + pax_flags.TF_DATA_SERVICE_MODES,
  "train; eval / decode: follow the checkpoints in job_log_dir and evaluate / decode each new "
  "one until the last; decode_once: decode one checkpoint; infer: decode_once into output/. "
  "(Pax's tf_data_service_* modes are refused: the tf.data service is not part of this project.)",
)
_EVAL_ON_TEST = flags.DEFINE_bool(
  "eval_on_test", False, "While training, also evaluate the eval datasets at eval steps."
)
_DECODE_DURING_TRAIN = flags.DEFINE_bool(
  "decode_during_train", False, "While training, decode the decode datasets at decode steps."
)
_RESTORE_CHECKPOINT_STEP = flags.DEFINE_multi_integer(
  "restore_checkpoint_step",
  None,
  "eval/decode modes: start from this checkpoint step instead of the latest; repeat it with "
  "--mode=decode_once (or infer) to decode several steps.",
)
_EVAL_WAIT_TIMEOUT = flags.DEFINE_float(
  "eval_wait_timeout",
  None,
  "eval/decode modes: stop after this many seconds without a new checkpoint (an error if none "
  "appeared at all); default: wait as long as it takes.",
)
_DATA_DIR = flags.DEFINE_string(
  "data_dir",
  None,
  "Directory of the experiment's prepared data; sets its DATA_DIR field (the C4 experiments "
  "read train-*.tfrecord, eval-*.tfrecord and spm.model from it).",
)
_SERVER_ADDR = flags.DEFINE_string(
  "server_addr",
  None,
  "Multi-host: the coordinator's host:port (process 0's address), for jax.distributed.",
)
_NUM_HOSTS = flags.DEFINE_integer("num_hosts", None, "Multi-host: number of processes.")
_HOST_IDX = flags.DEFINE_integer("host_idx", None, "Multi-host: this process's index.")
_DISTRIBUTED_AUTO = flags.DEFINE_bool(
  "distributed_auto_detect",
  False,
  "Multi-host: let jax.distributed.initialize() detect the cluster (TPU pods, SLURM, ...).",
)
_PGLE_COLLECT_START_STEP = flags.DEFINE_integer(
  "pgle_collect_start_step",
  None,
  "PGLE, first run: trace training from this step on and write <job_log_dir>/pgle/profile.pb "
  "(raw trace in <job_log_dir>/pgle/trace/). Pick a step after compilation and warm-up.",
)
_PGLE_COLLECT_NUM_STEPS = flags.DEFINE_integer(
  "pgle_collect_num_steps", 5, "PGLE: how many steps --pgle_collect_start_step traces."
)
_PGLE_PROFILE = flags.DEFINE_string(
  "pgle_profile",
  None,
  "PGLE, second run: a profile.pb (or a directory of <fingerprint>.pb files) for XLA's "
  "latency-hiding scheduler; sets XLA_FLAGS before JAX starts its backend.",
)
_JAX_PROFILER_PORT = flags.DEFINE_integer(
  "jax_profiler_port",
  None,
  "Start jax.profiler's server on this port, for on-demand traces from TensorBoard's profiler.",
)


class UsageError(Exception):
  """A request this program cannot carry out, explained in one sentence."""


def get_experiment(experiment_name: str) -> type[base_experiment.BaseExperiment]:
  """Pax's: the registered experiment class `experiment_name` (`module.Class` or a short name).

  When nothing has that name yet, imports the module part (`experiment_name.rsplit('.', 1)[0]`)
  and looks again. Raises ValueError saying which step failed; `--exp` goes through
  `experiment_registry.get_experiment`, whose errors also list the closest names.
  """
  found = experiment_registry.get(experiment_name)
  if found is not None:
    return found
  module_name = experiment_name.rsplit(".", 1)[0]
  try:
    importlib.import_module(module_name)
  except ModuleNotFoundError as e:
    raise ValueError(
      f"Could not find experiment `{experiment_name}` because could not import module "
      f"`{module_name}`."
    ) from e
  found = experiment_registry.get(experiment_name)
  if found is not None:
    return found
  raise ValueError(
    f"Could not find experiment `{experiment_name}`.\nRegistered experiments are: "
    f"{pprint.pformat(experiment_registry.get_all())}"
  )


def initialize_distributed(
  server_addr: str | None = None,
  num_hosts: int | None = None,
  host_idx: int | None = None,
  auto_detect: bool = False,
  *,
  multiprocess_gpu: bool = False,
) -> None:
  """Joins a multi-process JAX job; must run before anything starts JAX's backend.

  Explicit (`server_addr`, `num_hosts`, `host_idx`, all three) or `auto_detect`; neither:
  single process. Pax's `multiprocess_gpu` without the three is `auto_detect`. On CPU the
  processes exchange data with gloo collectives.
  """
  explicit = [server_addr, num_hosts, host_idx]
  auto_detect = auto_detect or (multiprocess_gpu and all(v is None for v in explicit))
  if not auto_detect and all(v is None for v in explicit):
    return
  if not auto_detect and any(v is None for v in explicit):
    raise UsageError(
      "multi-host needs all of --server_addr, --num_hosts and --host_idx (or "
      f"--distributed_auto_detect); got server_addr={server_addr}, num_hosts={num_hosts}, "
      f"host_idx={host_idx}"
    )
  import jax  # pylint: disable=g-import-not-at-top

  # Used only when the platform is CPU; GPUs and TPUs bring their own collectives.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if auto_detect:
    jax.distributed.initialize()
  else:
    jax.distributed.initialize(
      coordinator_address=server_addr, num_processes=num_hosts, process_id=host_idx
    )
  logging.info("Joined a %d-process job as process %d", jax.process_count(), jax.process_index())


def run(
  exp: "str | base_experiment.BaseExperiment",
  job_log_dir: str,
  mode: str = "train",
  *,
  eval_on_test: bool = False,
  decode_during_train: bool = False,
  eval_during_decode: bool = False,
  restore_checkpoint_step: int | Sequence[int] | None = None,
  restore_checkpoint_dir: str | None = None,
  enable_checkpoint_saving: bool = True,
  enable_summary_writer: bool = True,
  fdl_set: Sequence[str] = (),
  wait_timeout_secs: float | None = None,
  pgle_collect: tuple[int, int] | None = None,
  pgle_profile: str | None = None,
  jax_profiler_port: int | None = None,
  data_dir: str | None = None,
) -> dict[str, Any]:
  """Runs experiment `exp` in `mode`; returns the trainer's final metrics or the job's results.

  `exp` is a registered name or an experiment object (what --fdl_config builds). The keywords
  are the flags of the same names (paxml/pax_flags.py): `fdl_set` holds --fdl_set's PATH=VALUE
  settings (paxml/fiddle_overrides.py); `restore_checkpoint_step` may list several steps for
  decode_once / infer. `pgle_collect=(start_step, num_steps)` traces those steps into a PGLE
  profile; `pgle_profile` runs with one (see pgle_collection.py); `jax_profiler_port` starts
  jax.profiler's server. `wait_timeout_secs` stops an eval/decode job that sees no new
  checkpoint for that long. `data_dir` sets the experiment's DATA_DIR field (an error for
  experiments without one).

  Raises:
    experiment_registry.Error: `exp` names no experiment, or several.
    UsageError: a configuration, mesh, directory or option that cannot work, explained.
  """
  if mode not in MODES:
    raise UsageError(f"--mode={mode} is not one of {', '.join(MODES)}")
  steps = _restore_steps(restore_checkpoint_step)
  if len(steps) > 1 and mode not in ("decode_once", "infer"):
    raise UsageError(
      f"--restore_checkpoint_step given {len(steps)} times: only --mode=decode_once or infer "
      "processes several steps"
    )
  if mode == "train" and restore_checkpoint_dir:
    raise UsageError(
      "--restore_checkpoint_dir is read by eval/decode jobs (as in Pax); to start training from "
      "another run's checkpoint set the task's init_from_checkpoint_rules"
    )
  if isinstance(exp, str):
    experiment = experiment_registry.get_experiment(exp)()
  else:
    experiment = exp
  name = experiment_registry.canonical_name(type(experiment))
  if data_dir is not None:
    if not hasattr(experiment, "DATA_DIR"):
      raise UsageError(f"--data_dir: {name} reads no data directory (it has no DATA_DIR field)")
    experiment.DATA_DIR = data_dir
  try:
    fiddle_overrides.apply_settings(experiment, fdl_set)
  except fiddle_overrides.OverrideError as e:
    raise UsageError(str(e)) from e
  try:
    # Building the configs here catches a misspelt or invalid hyperparameter before any work.
    experiment.validate()
    experiment.task()
    experiment.datasets()
    experiment.decode_datasets()
  except (TypeError, ValueError, AttributeError) as e:
    raise UsageError(f"{name} has an invalid configuration: {e}") from e
  experiment_lint.warn_near_misses(experiment, name)
  # Imported here, not at the top: the trainer pulls in JAX and more (seconds),
  # and a mistyped --exp should fail at once.
  # pylint: disable=g-import-not-at-top
  from paxml import checkpoint_integrity
  from paxml import checkpoints
  from paxml import eval_lib
  from paxml import job_files
  from paxml import job_lock
  from paxml import memory_plan
  from paxml import partitioning
  from paxml import trainer
  from paxml.data import input_error

  if pgle_profile or pgle_collect:
    # Only then: it loads the PGLE C++ extension.
    from paxml import pgle_collection
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
    logging.info(
      "jax.profiler server on port %d (TensorBoard > Profile > Capture)", jax_profiler_port
    )
  profiler = None
  if pgle_collect:
    try:
      profiler = pgle_collection.StepWindowProfiler(job_log_dir, *pgle_collect)
    except ValueError as e:
      raise UsageError(f"--pgle_collect_*: {e}") from e

  logging.info("Running %s (--mode=%s) in %s", name, mode, job_log_dir)
  try:
    if mode == "train":
      return trainer.train_and_evaluate(
        experiment,
        job_log_dir,
        eval_on_test=eval_on_test,
        decode_during_train=decode_during_train,
        enable_checkpoint_saving=enable_checkpoint_saving,
        enable_summary_writer=enable_summary_writer,
        profiler=profiler,
      )
    job = {"steps": [], "results": {}}
    for step in steps or [None]:
      result = eval_lib.run_job(
        experiment,
        job_log_dir,
        mode,
        restore_step=step,
        restore_dir=restore_checkpoint_dir,
        eval_during_decode=eval_during_decode,
        enable_summary_writer=enable_summary_writer,
        wait_timeout_secs=wait_timeout_secs,
      )
      job = {"steps": job["steps"] + result["steps"], "results": result["results"]}
    return job
  except (
    partitioning.MeshError,
    job_files.JobLogDirError,
    job_lock.JobLockError,
    checkpoints.CheckpointError,
    checkpoint_integrity.CorruptCheckpointError,
    trainer.TrainingDivergedError,
    input_error.InputDataError,
    fiddle_overrides.OverrideError,
    memory_plan.OutOfMemoryError,
  ) as e:
    raise UsageError(str(e)) from e
  except Exception as e:  # pylint: disable=broad-except
    # An OOM outside the checked programs (initialising the state, a restore): one line too.
    if memory_plan.is_out_of_memory(e):
      raise UsageError(str(memory_plan.runtime_error(e))) from e
    raise


def _restore_steps(value: int | Sequence[int] | None) -> list[int]:
  if value is None:
    return []
  return [int(value)] if isinstance(value, int) else [int(v) for v in value]


def _experiment_from_flags() -> "str | base_experiment.BaseExperiment":
  """--exp's name, or the experiment Fiddle's flags build (Pax's create_experiment_config)."""
  if _EXP.value is not None:
    return _EXP.value
  try:
    experiment = fiddle_overrides.experiment_from_flags(pax_flags.FDL.value)
  except (ValueError, AttributeError, ImportError) as e:
    raise UsageError(f"--fdl_config / --fdl: {e}") from e
  if experiment is None:
    raise UsageError(
      "no experiment given: pass --exp=NAME (e.g. --exp=tasks.lm.params.demo.DemoLm), or "
      "--fdl_config=module.Experiment, --fdl_config_file=FILE or --fdl=config:..."
    )
  return experiment


class _HideLibraryInfo(std_logging.Filter):
  """Drops INFO records from Orbax and JAX, and their tracebacks.

  Orbax logs about ten INFO lines per checkpoint save; they bury the progress lines a person
  follows. A failed background save makes it log the same traceback several times; our own
  `error:` line says what failed. Warnings and errors still pass (as one line), and
  --verbosity=1 shows everything.
  """

  _PACKAGES = tuple(os.sep + p + os.sep for p in ("orbax", "jax"))

  def filter(self, record: std_logging.LogRecord) -> bool:
    from_library = any(p in record.pathname for p in self._PACKAGES)
    if record.levelno >= std_logging.WARNING:
      if from_library and record.exc_info:
        record.exc_info, record.exc_text = None, None
      return True
    return not from_library


def _disk_full(error: BaseException) -> OSError | None:
  """The ENOSPC error behind `error` (itself or a cause), if any."""
  while error is not None:
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
      return error
    error = error.__cause__ or error.__context__
  return None


def main(argv: Sequence[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if logging.get_verbosity() < logging.DEBUG:
    logging.get_absl_handler().addFilter(_HideLibraryInfo())
  for notice in pax_flags.notices():
    logging.warning("%s", notice)
  try:
    if _MODE.value in pax_flags.TF_DATA_SERVICE_MODES:
      raise UsageError(
        f"--mode={_MODE.value}: the tf.data service (Pax's TPU input servers) is not part of "
        "this project; each trainer process reads its own input"
      )
    pgle_collect = None
    if _PGLE_COLLECT_START_STEP.value is not None:
      pgle_collect = (_PGLE_COLLECT_START_STEP.value, _PGLE_COLLECT_NUM_STEPS.value)
    initialize_distributed(
      _SERVER_ADDR.value,
      _NUM_HOSTS.value,
      _HOST_IDX.value,
      _DISTRIBUTED_AUTO.value,
      multiprocess_gpu=pax_flags.MULTIPROCESS_GPU.value,
    )
    pax_flags.setup_jax()
    import jax  # pylint: disable=g-import-not-at-top  # After initialize_distributed.

    pax_flags.startup_jitter(pax_flags.STARTUP_RANDOM_JITTER_MAX_SECS.value, jax.process_count())
    exp = _experiment_from_flags()
    restore_dir = pax_flags.RESTORE_CHECKPOINT_DIR.value
    result = run(
      exp,
      user_paths.resolve(_JOB_LOG_DIR.value),
      _MODE.value,
      eval_on_test=_EVAL_ON_TEST.value,
      decode_during_train=_DECODE_DURING_TRAIN.value,
      eval_during_decode=pax_flags.EVAL_DURING_DECODE.value,
      restore_checkpoint_step=_RESTORE_CHECKPOINT_STEP.value,
      restore_checkpoint_dir=restore_dir and user_paths.resolve(restore_dir),
      enable_checkpoint_saving=pax_flags.ENABLE_CHECKPOINT_SAVING.value,
      enable_summary_writer=pax_flags.ENABLE_SUMMARY_WRITER.value,
      # With --fdl_config, Fiddle has applied them already (to what the config names).
      fdl_set=flags.FLAGS.fdl_set if isinstance(exp, str) else (),
      pgle_collect=pgle_collect,
      pgle_profile=_PGLE_PROFILE.value and user_paths.resolve(_PGLE_PROFILE.value),
      jax_profiler_port=_JAX_PROFILER_PORT.value,
      data_dir=_DATA_DIR.value and user_paths.resolve(_DATA_DIR.value),
      wait_timeout_secs=_EVAL_WAIT_TIMEOUT.value,
    )
  except (experiment_registry.Error, UsageError) as e:
    # One line, no traceback unless --verbosity=1 asks: the message says what to change.
    if logging.get_verbosity() >= logging.DEBUG:
      traceback.print_exc()
    print(f"error: {e}", file=sys.stderr)
    return 1
  except OSError as e:
    full = _disk_full(e)
    if full is None:
      raise
    if logging.get_verbosity() >= logging.DEBUG:
      traceback.print_exc()
    print(
      f"error: disk full writing {full.filename or _JOB_LOG_DIR.value}: free space there "
      "and run again (it resumes from the last complete checkpoint).",
      file=sys.stderr,
    )
    return 1
  if result.get("preempted"):
    logging.info(
      "Stopped on SIGTERM after saving step %d; run again to resume", int(result["step"])
    )
  return 0


def run_from_command_line() -> None:
  """`python -m paxml.main`, `bazel run //paxml:main` and the wheel's `paxml-main` command."""
  # Only when run as a program: tests import this module and parse their own flags.
  pax_flags.define_jax_flags()  # --jax_* (Pax calls jax.config.config_with_absl() here too).
  flags.mark_flags_as_required(
    ["job_log_dir"]
  )  # --exp, or Fiddle's flags (_experiment_from_flags).
  app.run(main, flags_parser=pax_flags.flags_parser)


if __name__ == "__main__":
  run_from_command_line()
