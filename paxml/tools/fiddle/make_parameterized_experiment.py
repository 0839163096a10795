"""`from_legacy`: a `ParameterizedExperiment` config equivalent to a `BaseExperiment` subclass
(its task, inputs and input specs provider), normalized by default (config_normalization)."""

from typing import Any

from paxml import base_experiment
from paxml import parameterized_experiment
from paxml.tools.fiddle import config_normalization
from praxis import pax_fiddle


def from_legacy(
  experiment_cls: type[base_experiment.BaseExperiment],
  *,
  normalizer: config_normalization.ConfigNormalizer | None = (
    config_normalization.default_normalizer()
  ),
  has_train_dataset: bool = True,
  has_input_specs_provider: bool = True,
) -> Any:
  """The experiment's parts as one config.

  has_train_dataset / has_input_specs_provider False skip reading those parts (inference-only
  experiments, whose `train_datasets()` or default input specs raise). normalizer None returns
  the config as read.
  """
  experiment = experiment_cls()
  config = pax_fiddle.Config(
    parameterized_experiment.ParameterizedExperiment,
    task=experiment.task(),
    eval_datasets=[d for d in experiment.datasets() if not d.is_training],
  )
  if has_train_dataset:
    config.train_datasets = experiment.train_datasets()
  if has_input_specs_provider:
    config.input_specs_provider = experiment.get_input_specs_provider_params()
  decode_datasets = list(experiment.decode_datasets())
  if decode_datasets:
    config.decode_datasets = decode_datasets
  return normalizer(config) if normalizer else config
