"""Pax's command-line flags (google/paxml `paxml/main.py`), accepted by `paxml.main`.

A Pax command line runs here unchanged: every flag of Pax's main is defined, the core ones in
main.py (`--exp`, `--job_log_dir`, `--mode`, `--eval_on_test`, `--decode_during_train`,
`--restore_checkpoint_step`, `--server_addr`, `--num_hosts`, `--host_idx`, `--jax_profiler_port`)
and the rest below. What each does here:

  acts as in Pax
    --eval_during_decode         decode jobs also evaluate the eval datasets
    --enable_checkpoint_saving   false: no checkpoint is written (restoring still works)
    --enable_summary_writer      false: no summaries/ event files
    --restore_checkpoint_dir     eval/decode jobs read checkpoints from there
    --restore_checkpoint_step    (repeatable) decode_once decodes each listed step
    --tfds_data_dir              seqio.set_tfds_data_dir_override
    --multiprocess_gpu           jax.distributed.initialize(server_addr, num_hosts, host_idx);
                                 without the three, JAX detects the cluster
    --jax_traceback_filtering_option   jax_traceback_filtering
    --startup_random_jitter_max_secs   a random sleep before start-up, above 128 processes
    --globally_use_hardware_rng  given explicitly: RBG PRNG keys (see below)
    --fdl_config / --fdl_config_file / --fiddler / --fdl_set / --fdl.NAME=VALUE / --fdl=...
                                 Fiddle's flags (fiddle_overrides.py)
    --jax_*                      JAX's own options, through jax.config.config_with_absl()
  accepted, with one line saying they do nothing here (`notices`): the TPU / Google-internal
  ones (tf.data service, persistence checkpointing, auto-sharding, tuning, OCDBT, ...).

One deviation: Pax's `--globally_use_hardware_rng` defaults to True (RBG keys, "deterministic
only at the same compiler version and with the same sharding"). Here the default key stays
JAX's threefry, so a run gives the same losses on any mesh and process count (tests/multihost_test
relies on it); passing the flag explicitly (`--globally_use_hardware_rng` or `=true`) switches to
RBG as Pax does.
"""

import random
import time

from absl import flags
from absl import logging
from fiddle import absl_flags as fiddle_flags  # Defines Fiddle's legacy --fdl_* flags, as Pax's.

# Pax's `tf_data_service_dispatcher` and `tf_data_service_worker` modes: accepted, refused in one
# line by main (the tf.data service is not part of this project).
TF_DATA_SERVICE_MODES = ("tf_data_service_dispatcher", "tf_data_service_worker")

EVAL_DURING_DECODE = flags.DEFINE_bool(
  "eval_during_decode", False, "decode / decode_once jobs also evaluate the eval datasets."
)
ENABLE_CHECKPOINT_SAVING = flags.DEFINE_bool(
  "enable_checkpoint_saving",
  True,
  "Save checkpoints while training; false for test or debug runs (restoring still works).",
)
ENABLE_SUMMARY_WRITER = flags.DEFINE_bool(
  "enable_summary_writer", True, "Write summaries/ event files; false writes none."
)
RESTORE_CHECKPOINT_DIR = flags.DEFINE_string(
  "restore_checkpoint_dir",
  None,
  "eval/decode jobs: read checkpoints from this job_log_dir, checkpoints/ directory or "
  "checkpoint_%08d directory instead of <job_log_dir>/checkpoints.",
)
TFDS_DATA_DIR = flags.DEFINE_string(
  "tfds_data_dir", None, "TensorFlow Datasets directory for SeqIO tasks (seqio's override)."
)
MULTIPROCESS_GPU = flags.DEFINE_bool(
  "multiprocess_gpu",
  False,
  "Join a multi-process job with jax.distributed.initialize(--server_addr, --num_hosts, "
  "--host_idx); without those three, JAX detects the cluster.",
)
JAX_TRACEBACK_FILTERING_OPTION = flags.DEFINE_string(
  "jax_traceback_filtering_option",
  "auto",
  "How JAX filters its frames out of tracebacks: off, auto, tracebackhide, remove_frames.",
)
STARTUP_RANDOM_JITTER_MAX_SECS = flags.DEFINE_integer(
  "startup_random_jitter_max_secs",
  60,
  "Jobs of more than 128 processes: each sleeps a random time up to this before starting.",
)
GLOBALLY_USE_HARDWARE_RNG = flags.DEFINE_bool(
  "globally_use_hardware_rng",
  True,
  "Given explicitly: use RBG PRNG keys, as Pax's default; left out, JAX's default threefry "
  "keys (reproducible on any mesh; module docstring of paxml/pax_flags.py).",
)

# Pax's flags with no counterpart here: flag -> why. `notices` names those a command line set.
_NO_EFFECT = {
  "maybe_use_persistence_checkpointing": "persistence checkpointing is Google-internal",
  "jax_fully_async_checkpoint": "checkpoints are always saved in the background here",
  "exit_after_ondemand_checkpoint": "the trainer always exits after its preemption save",
  "tensorstore_use_ocdbt": "the checkpoint format is fixed (paxml/checkpoint_store.py)",
  "async_timeout_secs": "background saves have no timeout here",
  "decode_output_pickle": "decode writes decoder_out/<name>/*.jsonl only",
  "checkpoint_todelete_subdir": "old checkpoints are deleted, not moved",
  "enforce_restore_shape_check": "there is no lenient restore to turn off",
  "enable_auto_sharding": "XLA auto-sharding is not offered; the sharding rules place arrays",
  "study": "hyperparameter tuning (PyGlove / Vizier) is not part of this project",
  "controller_mode": "tuning is not part of this project",
  "tuner_group": "tuning is not part of this project",
  "metrics_from": "tuning is not part of this project",
  "num_trials": "tuning is not part of this project",
  "pythia_port": "tuning is not part of this project",
  "pmap_use_tensorstore": "there is no pmap trainer here; checkpoints are always sharded",
  "pax_only_aggregate_summaries": "summaries are written by process 0 only",
  "fdl_tags_set": "Fiddle tags are not read by this project's configs",
  "tf_data_service_port": "the tf.data service is TPU infrastructure, not part of this project",
  "tf_data_service_dispatcher_address": "the tf.data service is not part of this project",
  "tf_data_service_worker_address": "the tf.data service is not part of this project",
  "tf_data_service_data_transfer_protocol": "the tf.data service is not part of this project",
  "tf_data_service_data_transfer_address": "the tf.data service is not part of this project",
  "tf_data_service_work_dir": "the tf.data service is not part of this project",
  "tf_data_service_fault_tolerant_mode": "the tf.data service is not part of this project",
  "tf_data_service_worker_addresses": "the tf.data service is not part of this project",
  "tf_data_service_address": "the tf.data service is not part of this project",
}

flags.DEFINE_bool("maybe_use_persistence_checkpointing", False, "Pax's; no effect here.")
flags.DEFINE_bool("jax_fully_async_checkpoint", False, "Pax's; saves are asynchronous here.")
flags.DEFINE_bool("exit_after_ondemand_checkpoint", False, "Pax's; always so here.")
flags.DEFINE_bool("tensorstore_use_ocdbt", False, "Pax's; no effect here.")
flags.DEFINE_integer("async_timeout_secs", 600, "Pax's; no effect here.")
flags.DEFINE_bool("decode_output_pickle", True, "Pax's; decode writes JSONL here.")
flags.DEFINE_string("checkpoint_todelete_subdir", None, "Pax's; no effect here.")
flags.DEFINE_bool("enforce_restore_shape_check", False, "Pax's; no effect here.")
flags.DEFINE_bool("enable_auto_sharding", False, "Pax's XLA auto-SPMD; no effect here.")
flags.DEFINE_string("study", None, "Pax's tuning; no effect here.")
flags.DEFINE_enum(
  "controller_mode", "auto", ["primary", "secondary", "auto"], "Pax's tuning; no effect here."
)
flags.DEFINE_string("tuner_group", None, "Pax's tuning; no effect here.")
flags.DEFINE_enum("metrics_from", "eval", ["train", "eval", "decode"], "Pax's tuning; no effect.")
flags.DEFINE_integer("num_trials", None, "Pax's tuning; no effect here.")
flags.DEFINE_integer("pythia_port", None, "Pax's tuning; no effect here.")
flags.DEFINE_bool("pmap_use_tensorstore", False, "praxis' pmap checkpoints; no effect here.")
flags.DEFINE_bool("pax_only_aggregate_summaries", False, "Pax's summary_utils; no effect here.")
flags.DEFINE_integer("tf_data_service_port", 0, "Pax's tf.data service; no effect here.")
for _name in (
  "tf_data_service_dispatcher_address",
  "tf_data_service_worker_address",
  "tf_data_service_data_transfer_protocol",
  "tf_data_service_data_transfer_address",
  "tf_data_service_work_dir",
  "tf_data_service_address",
):
  flags.DEFINE_string(_name, None, "Pax's tf.data service; no effect here.")
flags.DEFINE_bool("tf_data_service_fault_tolerant_mode", False, "Pax's tf.data service; no effect.")
flags.DEFINE_list("tf_data_service_worker_addresses", None, "Pax's tf.data service; no effect.")

# Fiddle's new-style flag, as Pax defines it: --fdl=config:NAME, --fdl=set:PATH=VALUE, ...
FDL = fiddle_flags.DEFINE_fiddle_config(
  "fdl",
  help_string="Fiddle config of the experiment: --fdl=config:module.Name, --fdl=set:PATH=VALUE.",
  allow_imports=True,
)


def define_jax_flags() -> None:
  """JAX's options as --jax_* flags (Pax's `jax.config.config_with_absl()`), once."""
  import jax  # pylint: disable=g-import-not-at-top

  if "jax_enable_checks" not in flags.FLAGS:
    jax.config.config_with_absl()


def notices(flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
  """One line per no-effect flag that the command line set, saying so and why."""
  return [
    f"--{name} does nothing here: {why}"
    for name, why in _NO_EFFECT.items()
    if flag_values[name].present
  ]


def hardware_rng_requested(flag_values: flags.FlagValues = flags.FLAGS) -> bool:
  """True when the command line asked for RBG keys (module docstring: not by default here)."""
  return flag_values["globally_use_hardware_rng"].present and GLOBALLY_USE_HARDWARE_RNG.value


def setup_jax(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Pax's setup_jax, for the options that apply here; before the first JAX computation."""
  import jax  # pylint: disable=g-import-not-at-top

  jax.config.update("jax_traceback_filtering", JAX_TRACEBACK_FILTERING_OPTION.value)
  if hardware_rng_requested(flag_values):
    jax.config.update("jax_default_prng_impl", "rbg")
    logging.info("Using RBG PRNG keys (--globally_use_hardware_rng)")
  if TFDS_DATA_DIR.value:
    from hostenv import quiet_tensorflow  # pylint: disable=g-import-not-at-top  # Slow: only when asked.

    quiet_tensorflow.import_tensorflow()
    import seqio  # pylint: disable=g-import-not-at-top  # After TensorFlow's quiet import.

    seqio.set_tfds_data_dir_override(TFDS_DATA_DIR.value)


def startup_jitter(max_secs: int, num_processes: int) -> float:
  """Pax's start-up jitter: a random sleep up to `max_secs`, only above 128 processes, so a
  large job does not hit shared services all at once. Returns the seconds slept."""
  if num_processes <= 128 or max_secs <= 0:
    return 0.0
  secs = random.uniform(0, max_secs)
  logging.info("Sleeping %.1f s (--startup_random_jitter_max_secs) before starting", secs)
  time.sleep(secs)
  return secs


def flags_parser(argv: list[str]):
  """absl's parser with Fiddle's `--fdl.NAME=VALUE` shorthand (rewritten to `--fdl_set`)."""
  return fiddle_flags.flags_parser(argv)
