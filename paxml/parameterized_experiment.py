"""Pax's `ParameterizedExperiment`: an experiment whose parts are constructor arguments.

Instead of subclassing `BaseExperiment` and overriding `task()` / `datasets()`, a Fiddle config
names the parts, so the whole experiment is one config that command-line fiddlers can edit:

  pax_fiddle.Config(
      ParameterizedExperiment,
      task=pax_fiddle.Config(tasks_lib.SingleTask, model=model_cfg),
      train_datasets=[train_cfg],
      eval_datasets=[eval_cfg],
  )

Training and evaluation inputs are separate arguments; each is checked for the right
`is_training` when the experiment is built.
"""

from collections.abc import Sequence
from typing import Any
import warnings

from paxml import base_experiment
from paxml import base_task
from praxis import base_input
from praxis import pax_fiddle

# The arguments are annotated as configs so that building the experiment's config leaves them
# configs (templates): the trainer builds the task and inputs itself.
_TaskConfig = pax_fiddle.Config[base_task.BaseTask]
_InputConfig = pax_fiddle.Config[base_input.BaseInput]
_InputConfigs = Sequence[_InputConfig]
_SpecsConfig = pax_fiddle.Config[base_input.BaseInputSpecsProvider]


def _check_inputs(configs: _InputConfigs, is_training: bool, role: str) -> None:
  for config in configs:
    if bool(config.is_training) != is_training:
      raise ValueError(
        f"The {role} dataset with name {config.name!r} must have `is_training` set to "
        f"`{is_training}`."
      )


class ParameterizedExperiment(base_experiment.BaseExperiment):
  """An experiment built from its task, input configs and (optional) input specs provider.

  `input_specs_provider` None gives `BaseExperiment`'s default (the training input's specs).
  `training_dataset` and `decoder_datasets` are Pax's deprecated spellings of a one-element
  `train_datasets` and of `decode_datasets`; they are appended and warn.
  """

  def __init__(
    self,
    *,
    task: _TaskConfig,
    train_datasets: _InputConfigs = (),
    eval_datasets: _InputConfigs = (),
    decode_datasets: _InputConfigs = (),
    input_specs_provider: _SpecsConfig | None = None,
    training_dataset: _InputConfig | None = None,
    decoder_datasets: _InputConfigs = (),
  ):
    _check_inputs(train_datasets, True, "training")
    _check_inputs(eval_datasets, False, "evaluation")
    _check_inputs(decode_datasets, False, "decode")
    self._task = task
    self._train_datasets = list(train_datasets)
    self._eval_datasets = list(eval_datasets)
    self._decode_datasets = list(decode_datasets)
    self._input_specs_provider = input_specs_provider
    if training_dataset is not None:
      warnings.warn("`training_dataset` is deprecated: use `train_datasets`.", DeprecationWarning)
      _check_inputs([training_dataset], True, "training")
      self._train_datasets.append(training_dataset)
    if decoder_datasets:
      warnings.warn("`decoder_datasets` is deprecated: use `decode_datasets`.", DeprecationWarning)
      _check_inputs(decoder_datasets, False, "decode")
      self._decode_datasets.extend(decoder_datasets)
    super().__init__()

  def task(self) -> Any:
    return self._task

  def datasets(self) -> list[Any]:
    """The training inputs followed by the evaluation inputs."""
    return self.train_datasets() + self.eval_datasets()

  def train_datasets(self) -> list[Any]:
    return self._train_datasets

  def eval_datasets(self) -> list[Any]:
    return self._eval_datasets

  def decode_datasets(self) -> list[Any]:
    return self._decode_datasets

  def get_input_specs_provider_params(self) -> Any:
    if self._input_specs_provider is None:
      return super().get_input_specs_provider_params()
    return self._input_specs_provider
