r"""Fiddle's command-line flags applied to experiments, as Pax's main applies them.

Two ways to name the experiment, as in Pax:

  --exp=lm_cloud.LmCloudSpmd2B                          the registry (main.py)
  --fdl_config=my.module.MyExperiment                   Fiddle: a class, or a function that
  --fdl_config_file=cfg.json                            returns an experiment or its Fiddle
  --fdl=config:my.module.make_experiment                config (built with pax_fiddle.build)

and settings on top (`--fdl.PATH=VALUE` is Fiddle's shorthand for `--fdl_set=PATH=VALUE`):

  --fdl.ICI_MESH_SHAPE=[1,4,2]              an UPPERCASE attribute of the experiment
  --fdl_set=train.num_train_steps=5         a field of the Fiddle config `task()` returns
  --fdl_set="model.lm_tpl.stacked_transformer_tpl.num_layers=2"

With --fdl_config Pax applies the settings to what the config names, the experiment (Fiddle's
`create_buildable_from_flags`). With --exp Pax ignores them; here they apply too, so a registered
experiment can be changed from the command line: a PATH whose first name is a (non-method)
attribute of the experiment sets that attribute, any other PATH is a field of the Fiddle config
that `task()` returns (Pax's `pax_fiddle.Config(tasks_lib.SingleTask, ...)`). An experiment whose
`task()` returns something else (a built TaskConfig) refuses task-field settings in one line.
"""

from collections.abc import Sequence
import copy
import re
from typing import Any

import fiddle as fdl
from fiddle import absl_flags as fiddle_flags

from paxml import base_experiment
from praxis import pax_fiddle


class OverrideError(ValueError):
  """A Fiddle flag that cannot be applied, explained in one sentence."""


def experiment_from_flags(fdl_flag_value: Any = None) -> base_experiment.BaseExperiment | None:
  """The experiment that --fdl_config / --fdl_config_file / --fdl=config: name, with their
  fiddlers and settings applied, built; None when none of them is given.

  `fdl_flag_value` is the value of the `--fdl` flag (pax_flags.FDL.value).
  """
  if fiddle_flags.fdl_flags_supplied():
    # Pax's order: fiddlers, then tags, then --fdl_set settings, on the base object.
    made = fiddle_flags.create_buildable_from_flags(module=None, allow_imports=True)
    return _as_experiment(made, "--fdl_config")
  if fdl_flag_value is not None:
    return _as_experiment(fdl_flag_value, "--fdl")
  return None


def _as_experiment(made: Any, flag: str) -> base_experiment.BaseExperiment:
  if isinstance(made, fdl.Buildable):
    made = pax_fiddle.build(made)
  elif isinstance(made, type):
    made = made()
  if not isinstance(made, base_experiment.BaseExperiment):
    raise OverrideError(
      f"{flag} names {type(made).__name__}, not an experiment: give a BaseExperiment subclass "
      "or a function returning one (or its pax_fiddle.Config)"
    )
  return made


_HEAD = re.compile(r"[A-Za-z_]\w*")


def apply_settings(experiment: base_experiment.BaseExperiment, settings: Sequence[str]) -> None:
  """Applies `PATH=VALUE` settings (--fdl_set) to `experiment` (module docstring).

  Settings on the task wrap `experiment.task` so every caller (trainer, eval jobs, tools) gets
  the changed config; each is tried once here, so a wrong path fails before any work.

  Raises:
    OverrideError: a malformed setting, a path that does not exist, or task-field settings on
      an experiment whose task() is not a Fiddle config.
  """
  task_settings = []
  for setting in settings:
    path, equals, _ = setting.partition("=")
    head = _HEAD.match(path)
    if not equals or head is None:
      raise OverrideError(f"--fdl_set={setting!r}: expected PATH=VALUE, e.g. NUM_LAYERS=2")
    attribute = getattr(experiment, head.group(), None)
    if hasattr(experiment, head.group()) and not callable(attribute):
      _set(experiment, setting)
    else:
      task_settings.append(setting)
  if not task_settings:
    return
  name = type(experiment).__name__
  original_task = experiment.task

  def task() -> Any:
    config = original_task()
    if not isinstance(config, fdl.Buildable):
      raise OverrideError(
        f"--fdl_set={task_settings[0]}: {name}.task() returns a {type(config).__name__}, not a "
        "Fiddle config, so its fields cannot be set from the command line; set one of the "
        "experiment's UPPERCASE attributes instead, or return pax_fiddle.Config(...) from task()"
      )
    config = copy.deepcopy(config)  # task() may hand out a shared config.
    for setting in task_settings:
      _set(config, setting)
    return config

  experiment.task = task  # An instance attribute: this experiment object only.
  task()


def _set(target: Any, setting: str) -> None:
  try:
    fiddle_flags.set_value_at_path(target, *_parse(setting))
  except ValueError as e:
    cause = f" ({e.__cause__})" if e.__cause__ else ""
    raise OverrideError(f"--fdl_set={setting}: {e}{cause}") from None


def _parse(setting: str) -> tuple[str, Any]:
  from fiddle._src.absl_flags import utils  # pylint: disable=g-import-not-at-top

  path, value = setting.split("=", 1)
  return path, utils.parse_value(value=value, path=path)
