"""Pax's config normalization: turns a `ParameterizedExperiment` config into a plain Fiddle
tree (for code generation, diffing, serialization).

Steps, each switchable on `ConfigNormalizer`:
  * remove_defaults: drop arguments equal to their defaults (also deep inside templates);
  * convert_dataclasses: dataclass instances (without `__post_init__`) become `fdl.Config`s;
  * wrap_nested_maps: `NestedMap` values become configs of a helper that rebuilds them;
  * remove_sharding_annotations, or else unshare_sharding_config: drop the task's sharding
    annotations, or give each layer its own copy of shared ones;
  * convert_seqio_task_objects: SeqIO Task objects become configs that look them up by name;
  * remove_eval_datasets / remove_decode_datasets: drop those arguments.
"""

import dataclasses
from typing import Any, TypeVar

import fiddle as fdl
from fiddle.experimental import dataclasses as fdl_dataclasses
from fiddle.experimental import visualize
from paxml.tools.fiddle import convert_seqio_task_objects as seqio_objects
from paxml.tools.fiddle import remove_sharding
from paxml.tools.fiddle import unshare_sharding
from paxml.tools.fiddle import wrap_nested_maps as nested_maps

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class ComponentNormalizer:
  """The steps shared by tasks and datasets (defaults are on ConfigNormalizer)."""

  remove_defaults: bool
  convert_dataclasses: bool
  wrap_nested_maps: bool

  def __call__(self, config: _T) -> _T:
    if self.remove_defaults:
      config = visualize.with_defaults_trimmed(config, remove_deep_defaults=True)
    if self.convert_dataclasses:
      config = fdl_dataclasses.convert_dataclasses_to_configs(config)
    if self.wrap_nested_maps:
      config = nested_maps.wrap_nested_maps(config)
    return config


@dataclasses.dataclass(frozen=True)
class TaskNormalizer(ComponentNormalizer):
  """Normalizes a task config, then its sharding annotations."""

  remove_sharding_annotations: bool
  unshare_sharding_config: bool

  def __call__(self, task_config: _T) -> _T:
    task_config = super().__call__(task_config)
    if self.remove_sharding_annotations:
      return remove_sharding.remove_sharding(task_config)
    if self.unshare_sharding_config:
      return unshare_sharding.unshare_sharding(task_config)
    return task_config


@dataclasses.dataclass(frozen=True)
class DatasetNormalizer(ComponentNormalizer):
  """Normalizes a dataset config or a list of them."""

  convert_seqio_task_objects: bool

  def __call__(self, dataset_config: _T) -> _T:
    dataset_config = super().__call__(dataset_config)
    if self.convert_seqio_task_objects:
      dataset_config = seqio_objects.convert_seqio_tasks(dataset_config)
    return dataset_config


@dataclasses.dataclass(frozen=True)
class ExperimentNormalizer:
  """Normalizes the task and dataset arguments of a ParameterizedExperiment config (a new
  config; the input is left unchanged)."""

  task_normalizer: TaskNormalizer
  dataset_normalizer: DatasetNormalizer
  remove_eval_datasets: bool
  remove_decode_datasets: bool

  def __call__(self, experiment_config: Any) -> Any:
    present = fdl.ordered_arguments(experiment_config)
    dropped = set()
    if self.remove_eval_datasets:
      dropped.add("eval_datasets")
    if self.remove_decode_datasets:
      dropped.add("decode_datasets")
    updates = {}
    if "task" in present:
      updates["task"] = self.task_normalizer(experiment_config.task)
    for name in ("train_datasets", "eval_datasets", "decode_datasets"):
      if name in present and name not in dropped:
        updates[name] = self.dataset_normalizer(getattr(experiment_config, name))
    result = fdl.copy_with(experiment_config, **updates)
    for name in dropped & set(present):
      delattr(result, name)
    return result


@dataclasses.dataclass(frozen=True)
class ConfigNormalizer:
  """The normalization switches (module docstring); calling it normalizes an experiment
  config. `lowlevel_config()` is the config of the `ExperimentNormalizer` it uses, for
  finer edits (e.g. `cfg.task_normalizer.unshare_sharding_config = False`)."""

  remove_defaults: bool = True
  convert_dataclasses: bool = True
  wrap_nested_maps: bool = True
  remove_sharding_annotations: bool = False
  unshare_sharding_config: bool = True
  convert_seqio_task_objects: bool = True
  remove_eval_datasets: bool = False
  remove_decode_datasets: bool = False

  def _component_args(self) -> dict[str, bool]:
    return dict(
      remove_defaults=self.remove_defaults,
      convert_dataclasses=self.convert_dataclasses,
      wrap_nested_maps=self.wrap_nested_maps,
    )

  def lowlevel_config(self) -> fdl.Config:
    return fdl.Config(
      ExperimentNormalizer,
      task_normalizer=fdl.Config(
        TaskNormalizer,
        remove_sharding_annotations=self.remove_sharding_annotations,
        unshare_sharding_config=self.unshare_sharding_config,
        **self._component_args(),
      ),
      dataset_normalizer=fdl.Config(
        DatasetNormalizer,
        convert_seqio_task_objects=self.convert_seqio_task_objects,
        **self._component_args(),
      ),
      remove_eval_datasets=self.remove_eval_datasets,
      remove_decode_datasets=self.remove_decode_datasets,
    )

  def experiment_normalizer(self) -> ExperimentNormalizer:
    return fdl.build(self.lowlevel_config())

  def task_normalizer(self) -> TaskNormalizer:
    return self.experiment_normalizer().task_normalizer

  def dataset_normalizer(self) -> DatasetNormalizer:
    return self.experiment_normalizer().dataset_normalizer

  def __call__(self, config: Any) -> Any:
    return self.experiment_normalizer()(config)


def noop_normalizer() -> ConfigNormalizer:
  """Changes nothing (every step off)."""
  return ConfigNormalizer(
    remove_defaults=False,
    convert_dataclasses=True,
    wrap_nested_maps=False,
    remove_sharding_annotations=False,
    unshare_sharding_config=False,
    convert_seqio_task_objects=False,
  )


def default_normalizer() -> ConfigNormalizer:
  return ConfigNormalizer()


def aggressive_normalizer() -> ConfigNormalizer:
  """The defaults, and sharding annotations removed."""
  return ConfigNormalizer(remove_sharding_annotations=True)
