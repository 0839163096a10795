"""Pax's AutoML library: search presets, PyGlove search algorithms, rewards, multi-objective and
cross-step aggregators, early-stopping policies, `EarlyStoppingError` and `parameter_sweep`.

An experiment becomes tunable by declaring PyGlove decision points (class attributes such as
`LEARNING_RATE = pg.oneof([1e-3, 1e-4])` or `pg.oneof(..., name=...)` inside `task()`) and a
`search()` method returning `SearchHParams`; `tuning_lib.tune` runs the trials.
"""

import abc
import collections
import dataclasses
import math
from typing import Any, Callable, Sequence, Type

from paxml import automl_interfaces
from praxis import base_hyperparams
from praxis import pax_fiddle
import pyglove as pg

BaseAlgorithm = automl_interfaces.BaseAlgorithm
BaseEarlyStoppingPolicy = automl_interfaces.BaseEarlyStoppingPolicy
BaseReward = automl_interfaces.BaseReward
CrossStepMetricAggregator = automl_interfaces.CrossStepMetricAggregator
SearchHParams = automl_interfaces.SearchHParams
MetricType = automl_interfaces.MetricType
Metric = automl_interfaces.Metric
MetricAggregator = automl_interfaces.MetricAggregator

# Sub-experiments of one trial report at disjoint step ranges: the i-th one's step s is
# reported as i * SUB_EXPERIMENT_STEP_OFFSET + s (the tuner keeps one measurement per step).
SUB_EXPERIMENT_STEP_OFFSET = 1000_000_000

ErrorsToSkip = list[Type[Exception] | tuple[Type[Exception], str]] | None


# Search presets.


def hyperparameter_tuning(
  metric: Metric,
  max_num_trials: int = 100,
  goal: str = "maximize",
  *,
  enable_dataset_tuning: bool = False,
  errors_to_skip: ErrorsToSkip = None,
  cross_step_metric_aggregator: pax_fiddle.Config[CrossStepMetricAggregator] | None = None,
  early_stopping: pax_fiddle.Config[BaseEarlyStoppingPolicy] | None = None,
  reward_for_nan: float | None = None,
  enable_train_programs_tuning: bool = False,
) -> SearchHParams:
  """`SearchHParams` for tuning hyper-parameters: sweep the space, optimise one metric."""
  return SearchHParams(
    search_algorithm=pax_fiddle.Config(Sweeping),
    search_reward=pax_fiddle.Config(
      SingleObjective, metric=metric, goal=goal, reward_for_nan=reward_for_nan
    ),
    early_stopping=early_stopping,
    max_num_trials=max_num_trials,
    errors_to_skip=errors_to_skip,
    cross_step_metric_aggregator=cross_step_metric_aggregator,
    treats_early_stopped_trials_as_done=True,
    enable_dataset_tuning=enable_dataset_tuning,
    enable_train_programs_tuning=enable_train_programs_tuning,
  )


_TWO_OBJECTIVE_REWARDS = {
  "tunas": lambda: TunasAbsolute,
  "mnas_hard": lambda: MnasHard,
  "mnas_soft": lambda: MnasSoft,
}


def neural_architecture_search(
  metrics: Metric | Sequence[Metric],
  cost_objective: float | None = None,
  reward_type: str = "tunas",
  exponent: float = -0.07,
  max_num_trials: int = 10000,
  errors_to_skip: ErrorsToSkip = None,
  cross_step_metric_aggregator: pax_fiddle.Config[CrossStepMetricAggregator] | None = None,
  early_stopping: pax_fiddle.Config[BaseEarlyStoppingPolicy] | None = None,
  reward_for_nan: float | None = None,
) -> SearchHParams:
  """`SearchHParams` for architecture search by regularized evolution.

  One metric is the objective; two are (quality, cost), combined by `reward_type` ('tunas',
  'mnas_hard' or 'mnas_soft') against `cost_objective`.
  """
  if isinstance(metrics, Metric):
    metrics = [metrics]
  if len(metrics) == 1:
    reward = pax_fiddle.Config(SingleObjective, metric=metrics[0], reward_for_nan=reward_for_nan)
  elif len(metrics) == 2:
    if cost_objective is None:
      raise ValueError("cost objective must be provided for a (quality, cost) search.")
    if reward_type not in _TWO_OBJECTIVE_REWARDS:
      raise ValueError(
        f"Unsupported reward type {reward_type!r}; use one of {sorted(_TWO_OBJECTIVE_REWARDS)}."
      )
    reward = pax_fiddle.Config(
      MultiObjective,
      metrics=metrics,
      aggregator_tpl=pax_fiddle.Config(
        _TWO_OBJECTIVE_REWARDS[reward_type](), cost_objective=cost_objective, exponent=exponent
      ),
      reward_for_nan=reward_for_nan,
    )
  else:
    raise ValueError(f"Only 1 or 2 metrics are supported, got {len(metrics)}.")
  return SearchHParams(
    search_algorithm=pax_fiddle.Config(RegularizedEvolution),
    search_reward=reward,
    early_stopping=early_stopping,
    max_num_trials=max_num_trials,
    errors_to_skip=errors_to_skip,
    cross_step_metric_aggregator=cross_step_metric_aggregator,
  )


# Search algorithms.


class RandomSearch(BaseAlgorithm):
  """Uniform random sampling of the space (supports `pg.manyof` constraints)."""

  seed: int | None = None

  def __call__(self):
    return pg.geno.Random(seed=self.seed)


class Sweeping(BaseAlgorithm):
  """Every combination of the (finite) space in turn; `pg.floatv` is not sweepable."""

  def __call__(self):
    return pg.geno.Sweeping()


class RegularizedEvolution(BaseAlgorithm):
  """Regularized (aging) evolution, https://arxiv.org/abs/1802.01548."""

  mutator: pg.evolution.Mutator = dataclasses.field(default_factory=pg.evolution.mutators.Uniform)
  population_size: int = 100
  tournament_size: int = 10
  seed: int | None = None

  def __call__(self):
    return pg.evolution.regularized_evolution(
      self.mutator,
      population_size=self.population_size,
      tournament_size=self.tournament_size,
      seed=self.seed,
    )


# Rewards.

_GOALS = ("maximize", "minimize")


class SingleObjective(BaseReward):
  """The reward is one metric's value (negated for goal='minimize').

  reward_for_nan, when set, replaces a NaN reward; otherwise NaN makes the trial infeasible.
  """

  metric: Metric | None = None
  goal: str = "maximize"
  reward_for_nan: float | None = None

  def __post_init__(self):
    if self.metric is None:
      raise ValueError("Param `metric` should not be None: give the automl.Metric to optimise.")
    if self.goal not in _GOALS:
      raise ValueError(
        f"Param `goal` should be either 'maximize' or 'minimize', got {self.goal!r}."
      )

  def __call__(self, metrics_dict: dict[str, float], global_step: int) -> float:
    del global_step
    reward = self.metric.get_value(metrics_dict)
    if self.goal == "minimize":
      reward = -reward
    if self.reward_for_nan is not None and math.isnan(reward):
      reward = self.reward_for_nan
    return reward

  @property
  def used_metrics(self) -> Sequence[Metric]:
    return [self.metric]


class MultiObjectiveAggregator(base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta):
  """Combines several objective values into one."""

  @abc.abstractmethod
  def __call__(self, values: Sequence[float]) -> float | complex:
    """Returns the combined value."""


class MultiObjective(BaseReward):
  """The reward combines several metrics with `aggregator_tpl` (needed for more than one).

  reward_for_nan, when set, is the reward whenever any metric is NaN.
  """

  metrics: Sequence[Metric] | None = None
  aggregator_tpl: pax_fiddle.Config[MultiObjectiveAggregator] | None = None
  goal: str = "maximize"
  reward_for_nan: float | None = None
  _aggregator: Any = dataclasses.field(init=False, repr=False, default=None)

  def __post_init__(self):
    if not self.metrics:
      raise ValueError("Param `metrics` must be provided.")
    if len(self.metrics) > 1 and self.aggregator_tpl is None:
      raise ValueError(
        "Param `aggregator` must be provided. Set `aggregator_tpl` to e.g. "
        "pax_fiddle.Config(automl.WeightedSumAggregator, weights=[...])."
      )
    if self.aggregator_tpl is not None:
      self._aggregator = base_hyperparams.instantiate(self.aggregator_tpl)

  def __call__(self, metrics_dict: dict[str, float], global_step: int) -> float:
    del global_step
    values = [m.get_value(metrics_dict) for m in self.metrics]
    if self.reward_for_nan is not None and any(math.isnan(v) for v in values):
      return self.reward_for_nan
    reward = values[0] if len(values) == 1 else self._aggregator(values)
    return -reward if self.goal == "minimize" else reward

  @property
  def used_metrics(self) -> Sequence[Metric]:
    return self.metrics


class WeightedSumAggregator(MultiObjectiveAggregator):
  """sum(w_i * v_i) / sum(|w_i|); the weights need not sum to 1."""

  weights: Sequence[float] | None = None

  def __post_init__(self):
    if not self.weights or sum(abs(w) for w in self.weights) == 0:
      raise ValueError(f"Invalid value for `weights`: {self.weights}; give non-zero weights.")

  def __call__(self, values: Sequence[float]) -> float | complex:
    if len(values) != len(self.weights):
      raise ValueError(
        f"The length of weights ({self.weights}) does not match the length of objective "
        f"values {values!r}."
      )
    weighted = sum(w * v for w, v in zip(self.weights, values))
    return weighted / (sum(abs(w) for w in self.weights) * 1.0)


def weighted_sum_reward(
  metrics_and_weights: Sequence[tuple[Metric, float]],
  goal: str = "maximize",
  reward_for_nan: float | None = None,
) -> pax_fiddle.Config[MultiObjective]:
  """A `MultiObjective` config whose reward is the weighted sum of the given metrics."""
  return pax_fiddle.Config(
    MultiObjective,
    metrics=[m for m, _ in metrics_and_weights],
    goal=goal,
    aggregator_tpl=pax_fiddle.Config(
      WeightedSumAggregator, weights=[w for _, w in metrics_and_weights]
    ),
    reward_for_nan=reward_for_nan,
  )


class TwoObjectiveAggregator(MultiObjectiveAggregator):
  """Combines (quality, cost) given a target cost; `exponent` (< 0) sets how hard a cost away
  from the target is penalised."""

  cost_objective: float | None = None
  exponent: float = -0.07

  def __post_init__(self):
    if self.cost_objective is None:
      raise ValueError("Param `cost_objective` must be provided.")

  def __call__(self, values: Sequence[float]) -> float | complex:
    if len(values) != 2:
      raise ValueError(
        f"Only two objectives are supported (quality, cost). Encountered: {values!r}"
      )
    return self.aggregate(*values)

  @abc.abstractmethod
  def aggregate(self, quality: float, cost: float) -> float | complex:
    """Returns the combined value."""


class TunasAbsolute(TwoObjectiveAggregator):
  """TuNAS's absolute reward (arXiv:2008.06120): quality + exponent * |cost / target - 1|."""

  def aggregate(self, quality: float, cost: float) -> float | complex:
    return quality + self.exponent * abs(cost / self.cost_objective - 1)


class MnasHard(TwoObjectiveAggregator):
  """MnasNet's hard reward (arXiv:1807.11626): quality * min((cost / target) ** exponent, 1)."""

  def aggregate(self, quality: float, cost: float) -> float | complex:
    return quality * min(pow(cost / self.cost_objective, self.exponent), 1.0)


class MnasSoft(TwoObjectiveAggregator):
  """MnasNet's soft reward: quality * (cost / target) ** exponent."""

  def aggregate(self, quality: float, cost: float) -> float | complex:
    return quality * pow(cost / self.cost_objective, self.exponent)


# Cross-step metric aggregators.


class MultiSubExperimentCrossStepMetricAggregator(CrossStepMetricAggregator):
  """First folds the sub-experiments' step ranges onto one (steps modulo
  SUB_EXPERIMENT_STEP_OFFSET, merging their dicts), then reduces across steps in `call`."""

  def __call__(
    self, metrics_across_steps: Sequence[tuple[int, dict[str, float]]]
  ) -> dict[str, float]:
    by_step = collections.defaultdict(dict)  # Insertion order = first report of each step.
    for step, metrics in metrics_across_steps:
      by_step[step % SUB_EXPERIMENT_STEP_OFFSET].update(metrics)
    return self.call(list(by_step.items()))

  @abc.abstractmethod
  def call(self, merged_metrics_across_steps: Sequence[tuple[int, dict[str, float]]]):
    """Reduces the merged (step, metrics) list to one metrics dict."""


class LastReportedMetricValues(MultiSubExperimentCrossStepMetricAggregator):
  """The metrics of the last reported step."""

  def call(self, merged_metrics_across_steps):
    return merged_metrics_across_steps[-1][1]


class AverageMetricValues(MultiSubExperimentCrossStepMetricAggregator):
  """Each metric's mean over the steps that report it (only its last `last_n` values if set)."""

  last_n: int | None = None

  def call(self, merged_metrics_across_steps):
    series = collections.defaultdict(list)
    for _, step_metrics in merged_metrics_across_steps:
      for key, value in step_metrics.items():
        series[key].append(value)
    averaged = {}
    for key, values in series.items():
      if self.last_n is not None:
        values = values[-self.last_n :]
      averaged[key] = sum(values) / len(values)
    return averaged


def _select_step(merged, metric: Metric | None, better: Callable[[float, float], bool]):
  """The metrics of the step whose `metric` (default: the reward) is best; ties go to the
  later step."""
  metric = metric or Metric("reward")
  best_index, best_value = None, None
  for i, (_, step_metrics) in enumerate(merged):
    value = metric.get_value(step_metrics)
    if best_value is None or better(value, best_value) or value == best_value:
      best_index, best_value = i, value
  return merged[best_index][1]


class MetricsWithMaxValue(MultiSubExperimentCrossStepMetricAggregator):
  """The metrics of the step where `metric` (default: the reward) is largest."""

  metric: Metric | None = None

  def call(self, merged_metrics_across_steps):
    return _select_step(merged_metrics_across_steps, self.metric, lambda a, b: a > b)


class MetricsWithMinValue(MultiSubExperimentCrossStepMetricAggregator):
  """The metrics of the step where `metric` (default: the reward) is smallest."""

  metric: Metric | None = None

  def call(self, merged_metrics_across_steps):
    return _select_step(merged_metrics_across_steps, self.metric, lambda a, b: a < b)


# Population-wise early stopping.


def _watched_value(metric: Metric | None) -> Callable[[pg.tuning.Measurement], float]:
  def value(measurement: pg.tuning.Measurement) -> float:
    if metric is None:
      return measurement.reward
    return metric.get_value(measurement.metrics)

  return value


class EarlyStoppingByValue(BaseEarlyStoppingPolicy):
  """Stops a trial whose watched value at a gating step is worse than the threshold.

  step_values: [(step, threshold)]; metric None watches the reward; maximize=True stops values
  below the threshold (above it otherwise).
  """

  step_values: list[tuple[int, float]] | None = None
  metric: Metric | None = None
  maximize: bool = True

  def __call__(self) -> pg.early_stopping.StepWise:
    return pg.early_stopping.early_stop_by_value(
      step_values=self.step_values, metric=_watched_value(self.metric), maximize=self.maximize
    )()


class EarlyStoppingByRank(BaseEarlyStoppingPolicy):
  """Stops a trial whose watched value ranks below a threshold among trials at a gating step.

  step_ranks: [(step, rank or fraction, min_histogram_size)].
  """

  step_ranks: list[tuple[int, int | float, int]] | None = None
  metric: Metric | None = None
  maximize: bool = True

  def __call__(self) -> pg.early_stopping.StepWise:
    return pg.early_stopping.early_stop_by_rank(
      step_ranks=self.step_ranks, metric=_watched_value(self.metric), maximize=self.maximize
    )()


class EarlyStoppingError(BaseException):
  """Raised by a trial (e.g. from a reward function) to stop it early.

  skip=True marks the trial infeasible (with `skip_reason`). skip=False ends it with a final
  report at `step`: `reward` if given, else the reward computed from `metrics`.
  It derives from BaseException so that user code's `except Exception` does not swallow it.
  """

  def __init__(
    self,
    skip: bool = True,
    skip_reason: str | None = None,
    step: int | None = None,
    reward: float | None = None,
    metrics: dict[str, float] | None = None,
    checkpoint_path: str | None = None,
  ):
    if not skip:
      if step is None:
        raise ValueError("`step` must be provided when `skip` is set to False.")
      if reward is None and metrics is None:
        raise ValueError(
          "At least one of `reward` and `metrics` should be provided when `skip` is set to False."
        )
    super().__init__("Early stopping signal; the tuning loop handles it.")
    self.skip = skip
    self.skip_reason = skip_reason
    self.step = step
    self.reward = reward
    self.metrics = metrics
    self.checkpoint = checkpoint_path


# Parameter sweeps.

COMBINED_DECISION_ATTR = "PARAMETER_SWEEP_COMBINATION"
COMBINED_DECISION_POINT_NAMES = "COMBINED_DECISION_POINT_NAMES"


def _check_combinations(combinations: list[tuple[Any, ...]]) -> None:
  if not isinstance(combinations, list) or len(combinations) < 2:
    raise ValueError(
      "`combinations` must be a list (of tuples) with at least two items: a header of "
      f"attribute names and one row of values per trial. Encountered: {combinations}."
    )
  width = None
  for i, row in enumerate(combinations):
    if not isinstance(row, tuple) or (width is not None and len(row) != width):
      raise ValueError(
        "`combinations` must be a list of tuples of equal length. Encountered bad row "
        f"{row!r} (index={i}) from {combinations!r}"
      )
    width = len(row)
    if width == 0:
      raise ValueError(
        f"`combinations` must have at least 1 columns. Encountered: {combinations!r}"
      )
    if i == 0 and not all(isinstance(name, str) for name in row):
      raise ValueError(
        "The first row of `combinations` must be a list of class attribute names. "
        f"Encountered: {row!r}"
      )


def parameter_sweep(
  combinations: list[tuple[Any, ...]] | None = None,
  *,
  metric: Metric | None = None,
  goal: str = "maximize",
  enable_dataset_tuning: bool = True,
  enable_partitioner_tuning: bool = False,
  enable_train_programs_tuning: bool = False,
  errors_to_skip: ErrorsToSkip = None,
) -> Callable[[Type[Any]], Type[Any]]:
  """Class decorator making an experiment a parameter sweep (a `Sweeping` search).

  Without `combinations` every combination of the experiment's decision points is run. With
  them, the first row names class attributes and each further row is one trial's values:
  `@parameter_sweep([('LR', 'DIMS'), (0.1, 32), (0.01, 64)])`. `metric` (optional) is the
  objective shown to the tuner; otherwise every trial's objective is 0.
  """
  if combinations is not None:
    _check_combinations(combinations)
  search_reward = None
  if metric is not None:
    search_reward = pax_fiddle.Config(SingleObjective, metric=metric, goal=goal)

  def decorator(cls):
    class _ParameterSweeping(cls):
      def search(self):
        return SearchHParams(
          search_algorithm=pax_fiddle.Config(Sweeping),
          search_reward=search_reward,
          treats_early_stopped_trials_as_done=True,
          train_to_end=True,
          enable_dataset_tuning=enable_dataset_tuning,
          enable_partitioner_tuning=enable_partitioner_tuning,
          enable_train_programs_tuning=enable_train_programs_tuning,
          errors_to_skip=errors_to_skip,
        )

    if combinations:
      names = combinations[0]
      missing = [name for name in names if not hasattr(cls, name)]
      if missing:
        raise ValueError(f"Attribute {missing[0]!r} does not exist in {cls!r}")
      # The swept attributes read their column of the one combined decision point.
      for column, name in enumerate(names):
        setattr(
          cls, name, property(lambda self, c=column: getattr(self, COMBINED_DECISION_ATTR)[c])
        )
      setattr(_ParameterSweeping, COMBINED_DECISION_ATTR, pg.oneof(combinations[1:]))
      setattr(_ParameterSweeping, COMBINED_DECISION_POINT_NAMES, names)
      automl_interfaces.enable_class_level_hyper_primitives(_ParameterSweeping)

    _ParameterSweeping.__name__ = cls.__name__
    _ParameterSweeping.__module__ = cls.__module__
    _ParameterSweeping.__qualname__ = cls.__qualname__
    return _ParameterSweeping

  return decorator
