"""Pax's helpers for metric values (`paxml.metric_utils`): clu metrics to their values, weighted
scalars and SeqIO/clu scalars to floats.

A weighted scalar is a `(value, weight)` pair of numbers or arrays; a list of them averages to
`sum(value * weight) / sum(weight)`.
"""

import numbers
from typing import Any, Mapping

from absl import logging
import clu.metrics as clu_metrics
import clu.values as clu_values
import jax
import numpy as np
import seqio

from praxis import pytypes

Metrics = pytypes.Metrics
WeightedScalar = pytypes.WeightedScalar
WeightedScalars = pytypes.WeightedScalars
WeightedScalarsList = pytypes.WeightedScalarsList
NestedMap = pytypes.NestedMap

# compute_value() results kept as they are (one summary each).
_SINGLE_VALUES = (
  clu_values.Scalar,
  clu_values.Image,
  clu_values.Text,
  clu_values.Histogram,
  clu_values.Audio,
)


def compute_metric_values(metrics: Metrics) -> dict[str, Any]:
  """{summary name: value} of every clu metric's `compute_value()`, flattened.

  A dict result gives `<metric>/<key>` (a list under a key: `<metric>/<key>_<i>`), a list
  `<metric>/<metric>_<i>`, a single clu value `<metric>`.

  Raises:
    ValueError: a metric's `compute_value()` returned something else.
  """
  values: dict[str, Any] = {}
  for name, metric in metrics.items():
    logging.info("Computing metric %s", name)
    value = metric.compute_value()
    if isinstance(value, dict):
      for key, item in value.items():
        if isinstance(item, (list, tuple)):
          values.update({f"{name}/{key}_{i}": sub for i, sub in enumerate(item)})
        else:
          values[f"{name}/{key}"] = item
    elif isinstance(value, (list, tuple)):
      values.update({f"{name}/{name}_{i}": item for i, item in enumerate(value)})
    elif isinstance(value, _SINGLE_VALUES):
      values[name] = value
    else:
      raise ValueError(
        f"metric {name!r}: compute_value() returned {type(value)}; it must return a clu value "
        "(Scalar, Image, Text, Histogram, Audio), or a list or dict of them"
      )
  return values


def is_scalar(v: Any) -> bool:
  """Whether `v` is a number or an array (what a weighted scalar is made of)."""
  return isinstance(v, (numbers.Number, np.ndarray, jax.Array))


def is_weighted_scalar(v: Any) -> bool:
  """Whether `v` is a `(value, weight)` tuple of scalars."""
  return isinstance(v, tuple) and len(v) == 2 and is_scalar(v[0]) and is_scalar(v[1])


def is_float_convertible(metric_value: Any) -> bool:
  """Whether `as_float` accepts `metric_value`: a number, a clu or SeqIO Scalar, a weighted
  scalar or a list of them."""
  if isinstance(metric_value, (numbers.Number, clu_values.Scalar, seqio.metrics.Scalar)):
    return True
  if is_weighted_scalar(metric_value):
    return True
  return isinstance(metric_value, list) and all(is_weighted_scalar(v) for v in metric_value)


def as_float(metric_value: Any) -> float:
  """One float from a number, a clu/SeqIO Scalar, or (a list of) weighted scalars (their
  weighted mean)."""
  if is_weighted_scalar(metric_value):
    metric_value = [metric_value]
  if isinstance(metric_value, list):
    if not all(is_weighted_scalar(v) for v in metric_value):
      raise ValueError(f"expected a list of (value, weight) pairs, got {metric_value!r}")
    values = np.stack([v for v, _ in metric_value])
    weights = np.stack([w for _, w in metric_value])
    return np.sum(values * weights) / np.sum(weights)
  if isinstance(metric_value, (clu_values.Scalar, seqio.metrics.Scalar)):
    return metric_value.value
  if not isinstance(metric_value, numbers.Number):
    raise ValueError(f"cannot convert {type(metric_value)} to float: {metric_value!r}")
  return float(metric_value)


def as_float_dict(
  metric_output: Mapping[str, Any], raise_on_non_float_convertible: bool = False
) -> dict[str, float]:
  """The float-convertible items of `metric_output` as floats; others are left out (or raise
  ValueError with `raise_on_non_float_convertible`)."""
  floats = {}
  for key, value in metric_output.items():
    if is_float_convertible(value):
      floats[key] = as_float(value)
    elif raise_on_non_float_convertible:
      raise ValueError(f"Summary value cannot be converted to float: {value}.")
  return floats


def update_float_dict(
  target: dict[str, float], source: dict[str, float], prefix: str | None = None
) -> dict[str, float]:
  """Adds `source` to `target` (keys as `<prefix>/<key>` when `prefix` is given); returns it."""
  if prefix is None:
    target.update(source)
  else:
    target.update({f"{prefix}/{k}": v for k, v in source.items()})
  return target


def merge_clu_metrics(metrics: Metrics, updated_metrics: Metrics) -> Metrics:
  """`metrics` with each metric merged with its update (`updated_metrics` when `metrics` is
  empty). Raises ValueError when the two have different keys."""
  if not metrics:
    return updated_metrics
  if set(metrics) != set(updated_metrics):
    raise ValueError(
      f"metrics and updated_metrics keys don't match: {sorted(metrics)} vs "
      f"{sorted(updated_metrics)}"
    )
  for key in metrics:
    metrics[key] = metrics[key].merge(updated_metrics[key])
  return metrics


def extract_weighted_scalars_and_clu_metrics(
  metrics: dict[str, Any],
) -> tuple[WeightedScalars, Metrics]:
  """(metrics, {}) when the model's metrics are weighted scalars, ({}, metrics) when they are
  clu metrics (judged by the first value). Raises TypeError otherwise or when empty."""
  values = metrics.Flatten() if isinstance(metrics, NestedMap) else list(metrics.values())
  first = values[0] if values else None
  if first is not None and is_weighted_scalar(first):
    return metrics, {}
  if isinstance(first, clu_metrics.Metric):
    return {}, metrics
  raise TypeError(
    f"`metrics` must be WeightedScalars or clu metrics; its first value is {type(first)}"
  )
