"""Pax's metric aggregators (`paxml.base_metrics`): weighted metrics combined across pmap
replicas and across batches, and the loss aggregators a task's learner uses.

A batch metric is a `(value, weight)` pair. Two ways to use an aggregator:
  * inside a pmapped step, `aggregate(batch_metrics)` combines the replicas' values (psum/pmax
    over `PMAP_PARALLEL_AXIS_NAME`);
  * across steps, `store(batch_metrics, reshard=True)` per batch (a host-level value is spread
    over the local devices and aggregated), then `finalize()` (or `summarize(step, prefix)`,
    which also writes the results as summaries).
"""

from __future__ import annotations

import abc
import collections
import dataclasses
from typing import Any, Callable, Sequence

from absl import logging
from clu import metrics as clu_metrics
import flax
import jax
import jax.numpy as jnp
import numpy as np

from paxml import metric_utils
from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle

instantiate = base_hyperparams.instantiate
PMAP_PARALLEL_AXIS_NAME = base_layer.PMAP_PARALLEL_AXIS_NAME
_AXIS = PMAP_PARALLEL_AXIS_NAME


def _spread_over_devices(batch_metrics: Any) -> Any:
  """Each host-level (value, weight) as one copy per local device, the weight split evenly, so a
  pmapped aggregate over the copies gives back the host's value and weight."""
  n = jax.local_device_count()
  spread = type(batch_metrics)()
  for key, (value, weight) in batch_metrics.items():
    if jnp.ndim(weight) != 0:
      raise ValueError(f"metric {key!r}: reshard needs a scalar weight, got shape {weight.shape}")
    spread[key] = (
      jnp.stack([jnp.asarray(value)] * n),
      jnp.full((n,), weight / n, jnp.result_type(weight)),
    )
  return spread


def _pmap_aggregate_metrics(
  combine: Callable[[Any, Any], Any], batch_metrics: Any, metric_keys: Any, reshard: bool
) -> Any:
  """`combine(value, weight)` (a collective over the pmap axis) on each wanted metric; with
  `reshard`, first spread host-level metrics over the local devices and pmap the combine."""

  def per_key(metrics: Any) -> Any:
    out = type(metrics)()
    for key, (value, weight) in metrics.items():
      if not metric_keys or key in metric_keys:
        out[key] = combine(value, weight)
    return out

  if not reshard:
    return per_key(batch_metrics)
  return jax.pmap(per_key, axis_name=_AXIS, out_axes=None)(_spread_over_devices(batch_metrics))


def _over_batches(reduce: Callable[[Any, Any], Any], stored: dict[str, list[Any]]) -> dict:
  """`reduce(values [N, ...], weights [N])` of every key's N stored (value, weight) pairs."""
  return {
    key: reduce(jnp.stack([v for v, _ in pairs]), jnp.stack([w for _, w in pairs]))
    for key, pairs in stored.items()
  }


class BaseMetrics(base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta):
  """An aggregator of (value, weight) metrics; see the module docstring."""

  _metrics: Any = dataclasses.field(init=False, repr=False, default=None)

  def __post_init__(self):
    self._metrics = collections.defaultdict(list)  # key -> [(value, weight) per batch]

  @abc.abstractmethod
  def aggregate(self, batch_metrics: Any, reshard: bool | None = False) -> Any:
    """The metrics combined across replicas (see the module docstring)."""

  @abc.abstractmethod
  def finalize(self) -> dict[str, Any]:
    """The metrics combined over the stored batches; clears the store."""

  def store(self, batch_metrics: Any, reshard: bool | None = False) -> None:
    """Keeps one batch's metrics (aggregated across devices first with `reshard`)."""
    if reshard:
      batch_metrics = self.aggregate(batch_metrics, reshard=True)
    for key, value in batch_metrics.items():
      self._metrics[key].append(value)

  def summarize(self, step_i: int, prefix: str) -> dict[str, Any]:
    """`finalize()`, logged and written as `<prefix>/<key>` and `<prefix>/<key>-weight` to the
    current summary writer (summary_utils.get_summary_writer)."""
    from paxml import summary_utils  # pylint: disable=import-outside-toplevel

    metrics = self.finalize()
    writer = summary_utils._writer()  # pylint: disable=protected-access
    for key, (value, weight) in metrics.items():
      logging.info("  %s=%f (weight=%f)", key, value, weight)
      writer.scalars(step_i, {f"{prefix}/{key}": value, f"{prefix}/{key}-weight": weight})
    return metrics


def _require_pmap() -> None:
  if not base_layer.is_running_under_pmap():
    raise RuntimeError(
      "aggregate() without reshard combines replicas and must run inside jax.pmap with "
      f"axis_name={_AXIS!r}; outside pmap use store(batch_metrics, reshard=True)"
    )


class MeanMetrics(BaseMetrics):
  """Weighted means of `metric_keys` (all metrics when None)."""

  metric_keys: Sequence[str] | None = None

  def aggregate(self, batch_metrics, reshard: bool | None = False):
    def mean(value, weight):
      _require_pmap()
      total_weight = jax.lax.psum(weight, axis_name=_AXIS)
      return jax.lax.psum(value * weight, axis_name=_AXIS) / (total_weight + 1e-8), total_weight

    return _pmap_aggregate_metrics(mean, batch_metrics, self.metric_keys, bool(reshard))

  def finalize(self):
    def mean(values, weights):
      total = jnp.sum(weights)
      return jnp.sum(values * weights, axis=0) / total, total

    metrics = _over_batches(mean, self._metrics)
    self._metrics = collections.defaultdict(list)
    return metrics


class MaxMetrics(BaseMetrics):
  """Maxima of `metric_keys` (all metrics when None); the weights are summed."""

  metric_keys: Sequence[str] | None = None

  def aggregate(self, batch_metrics, reshard: bool | None = False):
    def maximum(value, weight):
      _require_pmap()
      return jax.lax.pmax(value, axis_name=_AXIS), jax.lax.psum(weight, axis_name=_AXIS)

    return _pmap_aggregate_metrics(maximum, batch_metrics, self.metric_keys, bool(reshard))

  def finalize(self):
    metrics = _over_batches(
      lambda values, weights: (np.max(values, axis=0), np.sum(weights, axis=0)), self._metrics
    )
    self._metrics = collections.defaultdict(list)
    return metrics


class HistogramMetrics(BaseMetrics):
  """Counts under `histogram_key` ([..., num_classes], summed over replicas and batches), reported
  as `<key>_pplx`, `<key>_entropy` and `<key>_coverage` (fraction of classes seen)."""

  histogram_key: str | None = None

  def aggregate(self, batch_metrics, reshard: bool | None = False):
    def total(value, weight):
      _require_pmap()
      return jax.lax.psum(value, axis_name=_AXIS), jax.lax.psum(weight, axis_name=_AXIS)

    return _pmap_aggregate_metrics(total, batch_metrics, [self.histogram_key], bool(reshard))

  def finalize(self):
    metrics = {}
    for key, pairs in self._metrics.items():
      histogram = np.sum(np.stack([v for v, _ in pairs]), axis=0)  # [..., C]
      weight = np.sum(np.stack([w for _, w in pairs]))
      groups = histogram.shape[0] if histogram.ndim > 0 else 1
      probs = histogram / jnp.maximum(np.sum(histogram) / groups, 1.0)
      neg_entropy = jnp.sum(jnp.log(jnp.maximum(1e-30, probs)) * probs, -1)
      pplx = jnp.mean(jnp.exp(-neg_entropy))
      covered = jnp.mean(jnp.sum((histogram > 0).astype(jnp.float32), -1))
      metrics[f"{key}_pplx"] = (pplx, weight)
      metrics[f"{key}_entropy"] = (jnp.log(pplx), weight)
      metrics[f"{key}_coverage"] = (covered / histogram.shape[-1], weight)
    return metrics


class CompositeMetrics(BaseMetrics):
  """Several aggregators (`metrics_p`) as one; their results are merged into one dict."""

  metrics_p: Sequence[pax_fiddle.Config[BaseMetrics]] | None = None
  metrics_calcs: Any = dataclasses.field(init=False, repr=False, default=None)

  def __post_init__(self):
    super().__post_init__()
    self.metrics_calcs = [instantiate(p) for p in self.metrics_p or ()]

  def aggregate(self, batch_metrics, reshard: bool | None = False):
    merged = {}
    for calc in self.metrics_calcs:
      merged.update(calc.aggregate(batch_metrics, reshard))
    return merged

  def store(self, batch_metrics, reshard: bool | None = False) -> None:
    for calc in self.metrics_calcs:
      calc.store(batch_metrics, reshard)

  def finalize(self):
    merged = {}
    for calc in self.metrics_calcs:
      merged.update(calc.finalize())
    return merged


def _loss_and_weight(metric: Any) -> tuple[Any, Any]:
  if metric_utils.is_weighted_scalar(metric):
    return metric
  if isinstance(metric, WeightedScalarCluMetric):
    return metric.compute(), metric.weight
  raise TypeError(
    f"loss aggregators read (value, weight) pairs or WeightedScalarCluMetric, got {type(metric)};"
    " write a LossAggregator subclass for other metric types"
  )


def _normalized(loss: Any, weight: Any) -> tuple[Any, Any, Any]:
  """Under pmap: (this replica's share of the weighted loss, the mean over replicas, its
  normalised weight); outside pmap the loss itself (weight unchanged)."""
  weight = jax.lax.stop_gradient(weight)
  if not base_layer.is_running_under_pmap():
    return loss, loss, weight
  weight = weight / (jax.lax.psum(weight, axis_name=_AXIS) + 1e-8)
  weighted = loss * weight
  return weighted, jax.lax.psum(weighted, axis_name=_AXIS), weight


class LossAggregator(base_hyperparams.FiddleBaseParameterizable):
  """The training loss: `loss_key`'s metric, weighted across replicas.

  `aggregate` returns (weighted loss, mean loss across replicas, loss weight): the weighted loss
  (value x weight / total weight) is what gradients are taken of.
  """

  loss_key: str | None = None

  def aggregate(self, batch_metrics) -> tuple[Any, Any, Any]:
    return _normalized(*_loss_and_weight(batch_metrics[self.loss_key]))


class MultiLossAggregator(LossAggregator):
  """The sum of several losses (`loss_keys`), each weighted across replicas; no single weight."""

  loss_keys: Sequence[str] | None = None

  def aggregate(self, batch_metrics) -> tuple[Any, Any, None]:
    weighted_total, mean_total = 0.0, 0.0
    for key in self.loss_keys:
      if key not in batch_metrics:
        raise KeyError(f"loss {key!r} is not among the metrics {sorted(batch_metrics)}")
      weighted, mean, _ = _normalized(*_loss_and_weight(batch_metrics[key]))
      weighted_total += weighted
      mean_total += mean
    return weighted_total, mean_total, None


@flax.struct.dataclass
class WeightedScalarCluMetric(clu_metrics.Metric):
  """A clu metric for a weighted average: build it with `create(value, weight)`."""

  weighted_value: jnp.float32
  weight: jnp.float32

  @classmethod
  def create(cls, value: jnp.ndarray, weight: jnp.ndarray) -> WeightedScalarCluMetric:
    return cls(weighted_value=jnp.sum(value * weight), weight=jnp.sum(weight))

  def merge(self, other: WeightedScalarCluMetric) -> WeightedScalarCluMetric:
    return type(self)(
      weighted_value=self.weighted_value + other.weighted_value, weight=self.weight + other.weight
    )

  def compute(self) -> Any:
    return self.weighted_value / self.weight
