"""JAXline's base config: every field, with JAXline's defaults and meanings.

User configs start from `get_base_config()` and add `checkpoint_dir` (where
checkpoints and TensorBoard files go) and `experiment_kwargs`.
`validate_config` requires every base field to be present and checks the two
constraints JAXline checks.
"""

from typing import Any

from ml_collections import config_dict

RANDOM_MODES = (
  "unique_host_unique_device",
  "unique_host_same_device",
  "same_host_unique_device",
  "same_host_same_device",
)


def get_base_config() -> config_dict.ConfigDict:
  """Returns the config every experiment config extends."""
  config = config_dict.ConfigDict()
  # Passed as **kwargs to the experiment's constructor.
  config.experiment_kwargs = config_dict.ConfigDict()
  # Training stops when should_run_step(global_step) is False: global_step < this.
  config.training_steps = 10000
  # Unit of every interval below: "secs" or "steps".
  config.interval_type = "secs"
  # Per-action overrides of interval_type (None: use interval_type).
  config.logging_interval_type = config_dict.placeholder(str)
  config.checkpoint_interval_type = config_dict.placeholder(str)
  # Save "latest" every this many interval units; <= 0 disables periodic saves.
  config.save_checkpoint_interval = 300
  # Log 'global_step: N, {scalars}' every this many interval units.
  config.log_tensors_interval = 60
  # Write train scalars to the writer every this many units; None turns it off.
  config.log_train_data_interval = config_dict.placeholder(float)
  config.log_train_data_interval = 120.0
  # e.g. [1, 2, 5, 10]: also act at steps 1, 2, 5, 10, 20, 50, ... (steps only).
  config.periodic_action_growth_ratios = config_dict.placeholder(list)
  # Run the log action in a background thread.
  config.log_async = True
  # Write scalars from every host, not only process 0.
  config.log_all_hosts = False
  # Keep the scalars of every step and write them all at each interval.
  config.log_all_train_data = False
  # Save before the first step, so evaluators can start (and compile) early.
  config.save_initial_train_checkpoint = False
  # Checkpoint on every host (needs steps-based checkpoint intervals).
  config.train_checkpoint_all_hosts = False
  config.best_checkpoint_all_hosts = False
  # Evaluate once before any checkpoint exists.
  config.eval_initial_weights = False
  # The evaluator restores once, evaluates and exits.
  config.one_off_evaluate = False
  # History length of each checkpoint series ("latest", "best").
  config.max_checkpoints_to_keep = 5
  config.random_seed = 42
  # How step keys relate across hosts and devices (see RANDOM_MODES).
  config.random_mode_train = "unique_host_unique_device"
  config.random_mode_eval = "same_host_same_device"
  # True: init and step keys are both PRNGKey(seed), to reproduce old results.
  config.legacy_random_seed_behavior = False
  # Key of evaluate()'s output to track for the "best" series; "" disables it.
  config.best_model_eval_metric = ""
  config.best_model_eval_metric_higher_is_better = True
  return config


def validate_keys(base: Any, config: Any, base_filename: str = "base_config.py") -> None:
  """Raises ValueError naming every base field missing from `config`."""
  missing = []

  def visit(b, c, prefix):
    for key in b.keys():
      if key not in c:
        missing.append(prefix + key)
      elif isinstance(b[key], config_dict.ConfigDict) and len(b[key]):
        visit(b[key], c[key], f"{prefix}{key}.")

  visit(base, config, "")
  if missing:
    raise ValueError(
      f"Config is missing {missing}, defined in {base_filename}. Build your config "
      "from base_config.get_base_config() instead of an empty ConfigDict."
    )


def check_constraints(config: Any) -> None:
  """JAXline's two cross-field rules, with advice."""

  def interval_type(override):
    return override if override is not None else config.interval_type

  for name in ("interval_type", "logging_interval_type", "checkpoint_interval_type"):
    value = config[name]
    if value is not None and value not in ("secs", "steps"):
      raise ValueError(f"config.{name}={value!r}; use 'secs' or 'steps'.")
  if config.periodic_action_growth_ratios and (
    interval_type(config.logging_interval_type) != "steps"
    or interval_type(config.checkpoint_interval_type) != "steps"
  ):
    raise ValueError(
      "periodic_action_growth_ratios only works with steps-based intervals; set "
      "interval_type='steps' (or the logging/checkpoint overrides) or drop the ratios."
    )
  if config.train_checkpoint_all_hosts and (
    interval_type(config.checkpoint_interval_type) != "steps"
  ):
    raise ValueError(
      "train_checkpoint_all_hosts=True needs steps-based checkpoint intervals, or hosts "
      "would save different steps and disagree on restore; set "
      "checkpoint_interval_type='steps'."
    )
  for name in ("random_mode_train", "random_mode_eval"):
    if config[name] not in RANDOM_MODES:
      raise ValueError(f"config.{name}={config[name]!r}; use one of {RANDOM_MODES}.")


def validate_config(config: Any) -> None:
  validate_keys(get_base_config(), config)
  check_constraints(config)
