"""Pax's experimental `BaselineExperiment`: a baseline written as a dataclass of high-level
settings whose `experiment_fixture()` returns the low-level `ParameterizedExperiment` config.

Two configs come from one class:
  * `highlevel_config(**settings)`: a config whose arguments are the dataclass fields; building
    it builds the experiment, so `--fdl_set=foo_setting=7` edits a high-level setting.
  * `lowlevel_config(**settings)` (= `lower(highlevel_config(...))`): the fixture's config
    (task, datasets, ...), where any low-level field can be edited.
Settings may themselves be configs; they are built before the fixture reads them.
"""

import abc
import copy
import dataclasses
import inspect
from typing import Any

import fiddle as fdl
from paxml import parameterized_experiment
from praxis import pax_fiddle

_ExperimentConfig = pax_fiddle.Config[parameterized_experiment.ParameterizedExperiment]


@dataclasses.dataclass
class BaselineExperiment(metaclass=abc.ABCMeta):
  """Base of baselines. Subclasses are `@dataclasses.dataclass`es whose fields are the
  high-level settings, and implement `experiment_fixture()`. Instances are mutable."""

  @abc.abstractmethod
  def experiment_fixture(self) -> _ExperimentConfig:
    """The low-level config of the experiment, read from this instance's settings."""

  @classmethod
  def make_experiment(
    cls, **highlevel_settings
  ) -> parameterized_experiment.ParameterizedExperiment:
    """Builds the experiment from settings (what `highlevel_config` configures)."""
    return pax_fiddle.build(cls(**highlevel_settings).experiment_fixture())

  @classmethod
  def highlevel_config(cls, **highlevel_settings) -> pax_fiddle.Config:
    """A config of `make_experiment` whose arguments are the high-level settings."""
    return pax_fiddle.Config(cls.make_experiment, **highlevel_settings)

  @classmethod
  def lowlevel_config(cls, **highlevel_settings) -> _ExperimentConfig:
    """The experiment fixture's config for these settings."""
    return lower(cls.highlevel_config(**highlevel_settings))


def lower(config: pax_fiddle.Config) -> _ExperimentConfig:
  """Turns a `highlevel_config()` into the low-level config its settings give.

  The settings (built first, as they may be configs) make an instance of the baseline class,
  whose `experiment_fixture()` is returned.
  """
  make_experiment: Any = fdl.get_callable(config)
  baseline_cls = getattr(make_experiment, "__self__", None)
  if not (
    inspect.ismethod(make_experiment)
    and isinstance(baseline_cls, type)
    and issubclass(baseline_cls, BaselineExperiment)
  ):
    raise ValueError(
      "Expected config of BaselineExperiment.make_experiment() classmethod (as "
      f"`MyBaseline.highlevel_config()` returns), got {config}"
    )
  config = copy.deepcopy(config)
  pax_fiddle.update_callable(config, baseline_cls)
  return pax_fiddle.build(config).experiment_fixture()
