"""Pax's AutoML interfaces: the bases of search algorithms, rewards and early stopping, the
`SearchHParams` an experiment's `search()` returns, and `Metric`, which names one tuning metric.

Tuning metrics reach the reward as one flat dict whose keys follow the trainer's summary names
(`train/loss`, `eval_test_<dataset>/metrics/accuracy`, `decode_test_<dataset>/f1`,
`train_steps_per_sec`, ...), each optionally suffixed `:<sub_experiment_id>`. A `Metric` turns its
type, name, dataset and sub-experiment into a regular expression over those keys.

Search spaces are PyGlove's (`pg.oneof`, `pg.floatv`, ...); an experiment may declare them as
class attributes (`LEARNING_RATE = pg.floatv(1e-4, 1e-2)`), see
`enable_class_level_hyper_primitives`.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import inspect
import re
from typing import Any, Callable, Sequence, Type

from praxis import base_hyperparams
from praxis import pax_fiddle
import pyglove as pg

MetricAggregationFn = Callable[[Sequence[float]], float]
_Base = base_hyperparams.FiddleBaseParameterizable


class BaseAlgorithm(_Base, metaclass=abc.ABCMeta):
  """A search algorithm: calling it returns a PyGlove `DNAGenerator`."""

  @abc.abstractmethod
  def __call__(self) -> pg.DNAGenerator:
    """Returns the DNA generator that proposes trials."""


class BaseEarlyStoppingPolicy(_Base, metaclass=abc.ABCMeta):
  """A population-wise early-stopping policy: calling it returns PyGlove's policy."""

  @abc.abstractmethod
  def __call__(self) -> pg.tuning.EarlyStoppingPolicy:
    """Returns the PyGlove early-stopping policy."""


class BaseReward(_Base, metaclass=abc.ABCMeta):
  """Maps a trial's flat metric dict (and the step) to one float reward."""

  @abc.abstractmethod
  def __call__(self, metrics_dict: dict[str, float], global_step: int) -> float:
    """Returns the reward."""

  @property
  @abc.abstractmethod
  def used_metrics(self) -> Sequence[Metric]:
    """The `Metric`s the reward reads (only these are reported to the tuner)."""

  @property
  def needs_train(self) -> bool:
    return any(m.is_train_metric for m in self.used_metrics)

  @property
  def needs_eval(self) -> bool:
    return any(m.is_eval_metric for m in self.used_metrics)

  @property
  def needs_decode(self) -> bool:
    return any(m.is_decode_metric for m in self.used_metrics)


class CrossStepMetricAggregator(_Base, metaclass=abc.ABCMeta):
  """Reduces the metrics a trial reported at several steps to one dict (the final report)."""

  @abc.abstractmethod
  def __call__(
    self, metrics_across_steps: Sequence[tuple[int, dict[str, float]]]
  ) -> dict[str, float]:
    """`metrics_across_steps` is a list of (step, metrics); returns the final metrics."""


@dataclasses.dataclass
class SearchHParams:
  """What an experiment's `search()` returns (Pax's fields and defaults).

  search_reward None makes every trial's objective 0 (grid or random sweeps).
  cross_step_metric_aggregator None means the last reported metrics are final.
  errors_to_skip lists exception types, or (type, message regex) pairs, whose trials are
  marked infeasible instead of failing the search.
  treats_early_stopped_trials_as_done: an early-stopped trial with measurements is completed
  (its reward fed back) rather than skipped.
  train_to_end: keep training to `num_train_steps` even when no eval/decode is left.
  enable_*_tuning: also inspect the train datasets / partitioner / train programs when
  collecting the search space.
  """

  search_algorithm: pax_fiddle.Config[BaseAlgorithm] | None = None
  search_reward: pax_fiddle.Config[BaseReward] | None = None
  early_stopping: pax_fiddle.Config[BaseEarlyStoppingPolicy] | None = None
  cross_step_metric_aggregator: pax_fiddle.Config[CrossStepMetricAggregator] | None = None
  max_num_trials: int = 1000000
  errors_to_skip: list[Type[Exception] | tuple[Type[Exception], str]] | None = None
  prior_study_ids: list[int] | None = None
  add_prior_trials: bool = False
  add_experiment_config_to_metadata: bool = True
  treats_early_stopped_trials_as_done: bool = False
  train_to_end: bool = False
  enable_dataset_tuning: bool = False
  enable_partitioner_tuning: bool = False
  enable_train_programs_tuning: bool = False
  vizier_service_endpoint: str | None = None


class MetricType(enum.Enum):
  """Where a tuning metric comes from."""

  CUSTOM = 0
  TRAIN_METRICS = 1
  EVAL_TRAIN_METRICS = 2
  EVAL_METRICS = 3
  EVAL_SCORING_METRICS = 4
  DECODE_METRICS = 5

  @classmethod
  def metric_schema(cls, metric_type: MetricType) -> tuple[str, str]:
    """(category, section) of the metric keys of this type: `<category>[_<ds>]/<section>/`."""
    return _SCHEMAS[metric_type]

  @classmethod
  def applies_to_multiple_datasets(cls, metric_type: MetricType) -> bool:
    """Whether keys of this type carry a dataset name (`eval_test_<dataset>/...`)."""
    return metric_type in _PER_DATASET_TYPES


_SCHEMAS = {
  MetricType.CUSTOM: ("", ""),
  MetricType.TRAIN_METRICS: ("train", ""),
  MetricType.EVAL_TRAIN_METRICS: ("eval_train", "metrics"),
  MetricType.EVAL_METRICS: ("eval_test", "metrics"),
  MetricType.EVAL_SCORING_METRICS: ("eval_test", "scoring_eval"),
  MetricType.DECODE_METRICS: ("decode_test", ""),
}
_PER_DATASET_TYPES = frozenset(
  [MetricType.EVAL_METRICS, MetricType.EVAL_SCORING_METRICS, MetricType.DECODE_METRICS]
)


class MetricAggregator(str, enum.Enum):
  """How `Metric.get_value` reduces several matching keys at one step."""

  MAX = 0
  MIN = 1
  AVERAGE = 2
  SUM = 3


def _mean(values: Sequence[float]) -> float:
  return sum(values) / len(values)


_BUILTIN_AGGREGATORS = {
  MetricAggregator.MAX: max,
  MetricAggregator.MIN: min,
  MetricAggregator.AVERAGE: _mean,
  MetricAggregator.SUM: sum,
}


@dataclasses.dataclass
class Metric:
  """One tuning metric: matches keys of the trial's metric dict (case-insensitively).

  dataset_name None matches every dataset of a per-dataset type; sub_experiment_id None
  matches keys with or without a `:<id>` suffix. `aggregator` (a `MetricAggregator` or a
  callable over the values) is needed when several keys match.
  """

  metric_name: str
  metric_type: MetricType = MetricType.CUSTOM
  dataset_name: str | None = None
  sub_experiment_id: str | None = None
  aggregator: MetricAggregator | MetricAggregationFn | None = None

  def __post_init__(self):
    self._metric_key_regex = re.compile(self.pattern, re.IGNORECASE)
    builtin = [fn for key, fn in _BUILTIN_AGGREGATORS.items() if self.aggregator == key]
    if self.aggregator is None:
      self._aggregator = None
    elif builtin:
      self._aggregator = builtin[0]
    elif callable(self.aggregator):
      self._aggregator = self.aggregator
    else:
      raise ValueError(
        f"Unsupported aggregator {self.aggregator!r}: give a value of "
        "`automl.MetricAggregator` or a callable from a list of floats to a float."
      )

  @property
  def pattern(self) -> str:
    """The regular expression over metric keys."""
    category, section = MetricType.metric_schema(self.metric_type)
    if MetricType.applies_to_multiple_datasets(self.metric_type):
      prefix = f"{category}_{self.dataset_name or '[^/]+'}/"
    else:
      prefix = f"{category}/" if category else ""
    if section:
      prefix += f"{section}/"
    suffix = "(:.+)?" if self.sub_experiment_id is None else f":{self.sub_experiment_id}"
    return f"^{prefix}{self.metric_name}{suffix}$"

  @property
  def is_train_metric(self) -> bool:
    return self.pattern.startswith(("^train", "^num_params"))

  @property
  def is_eval_train_metric(self) -> bool:
    return self.pattern.startswith("^eval_train")

  @property
  def is_eval_metric(self) -> bool:
    return self.pattern.startswith(("^eval_test", "^eval_steps"))

  @property
  def is_decode_metric(self) -> bool:
    return self.pattern.startswith(("^decode_test", "^decode_steps"))

  @property
  def applies_to_multiple_datasets(self) -> bool:
    """True when this metric may match several datasets' keys (no dataset named)."""
    return MetricType.applies_to_multiple_datasets(self.metric_type) and self.dataset_name is None

  def match_items(self, metric_dict: dict[str, float]) -> list[tuple[str, float]]:
    """The (key, value) items of `metric_dict` this metric matches, in dict order."""
    return [(k, v) for k, v in metric_dict.items() if self._metric_key_regex.match(k)]

  def get_values(self, metric_dict: dict[str, float]) -> list[float]:
    return [v for _, v in self.match_items(metric_dict)]

  def get_value(self, metric_dict: dict[str, float]) -> float:
    """The one matching value (or the aggregate of several); KeyError when none matches."""
    items = self.match_items(metric_dict)
    if not items:
      raise KeyError(
        f"Metric {self.pattern!r} does not match with any metrics. "
        f"Available metrics are: {list(metric_dict)}."
      )
    if len(items) == 1:
      return items[0][1]
    if self._aggregator is None:
      raise ValueError(
        f"Found multiple metrics that match {self.pattern!r} while aggregator is not "
        f"specified: {items}. Pass `aggregator=automl.MetricAggregator.<MAX|MIN|AVERAGE|SUM>` "
        "or name the dataset."
      )
    return self._aggregator([v for _, v in items])

  # Pax's constructors for the common metrics.
  @classmethod
  def train_steps_per_second(cls, sub_experiment_id=None, aggregator=None) -> Metric:
    return cls("train_steps_per_sec", sub_experiment_id=sub_experiment_id, aggregator=aggregator)

  @classmethod
  def eval_steps_per_second(cls, sub_experiment_id=None, aggregator=None) -> Metric:
    return cls("eval_steps_per_sec", sub_experiment_id=sub_experiment_id, aggregator=aggregator)

  @classmethod
  def decode_steps_per_second(cls, sub_experiment_id=None, aggregator=None) -> Metric:
    return cls("decode_steps_per_sec", sub_experiment_id=sub_experiment_id, aggregator=aggregator)

  @classmethod
  def num_params(cls, sub_experiment_id=None, aggregator=None) -> Metric:
    return cls("num_params", sub_experiment_id=sub_experiment_id, aggregator=aggregator)

  @classmethod
  def train(cls, metric_name: str, sub_experiment_id=None, aggregator=None) -> Metric:
    return cls(
      metric_name,
      MetricType.TRAIN_METRICS,
      sub_experiment_id=sub_experiment_id,
      aggregator=aggregator,
    )

  @classmethod
  def eval_train(cls, metric_name: str, sub_experiment_id=None, aggregator=None) -> Metric:
    return cls(
      metric_name,
      MetricType.EVAL_TRAIN_METRICS,
      sub_experiment_id=sub_experiment_id,
      aggregator=aggregator,
    )

  @classmethod
  def eval(cls, metric_name: str, dataset_name=None, sub_experiment_id=None, aggregator=None):
    return cls(metric_name, MetricType.EVAL_METRICS, dataset_name, sub_experiment_id, aggregator)

  @classmethod
  def eval_scoring(
    cls, metric_name: str, dataset_name=None, sub_experiment_id=None, aggregator=None
  ) -> Metric:
    return cls(
      metric_name, MetricType.EVAL_SCORING_METRICS, dataset_name, sub_experiment_id, aggregator
    )

  @classmethod
  def decode(cls, metric_name: str, dataset_name=None, sub_experiment_id=None, aggregator=None):
    return cls(metric_name, MetricType.DECODE_METRICS, dataset_name, sub_experiment_id, aggregator)


def enable_class_level_hyper_primitives(cls: Type[Any]) -> None:
  """Turns `cls`'s class attributes that are PyGlove hyper primitives into properties.

  Each read builds a fresh copy of the primitive (named after the attribute unless it has a
  name), so reading it inside `pg.hyper.trace` / a tuning trial registers or decides it like
  a `pg.oneof` written in the method body. Assigning to the attribute on an instance pins it.
  """

  def as_property(attr: str, hyper: pg.hyper.HyperPrimitive) -> property:
    kwargs = dict(hyper.sym_init_args)
    if kwargs.get("name") is None:
      kwargs["name"] = attr
    pinned = f"_PROPERTY_{attr}"

    def getter(self):
      if hasattr(self, pinned):
        return getattr(self, pinned)
      return type(hyper)(**kwargs)

    def setter(self, value):
      setattr(self, pinned, value)

    return property(getter, setter)

  for attr, hyper in inspect.getmembers(cls, lambda v: isinstance(v, pg.hyper.HyperPrimitive)):
    setattr(cls, attr, as_property(attr, hyper))
