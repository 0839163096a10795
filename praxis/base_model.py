"""Pax's `BaseModel`: the API every model (a layer the task trains and decodes) implements.

A model is a BaseLayer with
  * `compute_predictions(input_batch)` -> Predictions (logits, a NestedMap, ...);
  * `compute_loss(predictions, input_batch)` -> (metrics, per_example_out): metrics map a name to
    a (value, weight) pair (WeightedScalars) or to a clu metric; per_example_out holds tensors
    whose leading dim is the batch;
  * `__call__(input_batch)`: compute_predictions then compute_loss (what training applies);
  * `decode(input_batch)` -> DecodeOut: (weighted scalars, decoder outputs NestedMap, metrics);
  * `process_decode_out(input_obj, decode_out)` -> ProcessDecodeOut: (weighted scalars,
    [(key, value) per example], metrics), run on the host with the input's tokenizer at hand.
The first two, and decode / process_decode_out where a model decodes, are the subclass's.

praxis.layers.models' LanguageModel, ClassificationModel, SequenceModel and the DPO models are
BaseModels.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
Metrics = pytypes.Metrics
WeightedScalars = pytypes.WeightedScalars
Predictions = Union[JTensor, NestedMap, dict[str, Any], dict[int, Any]]
DecodeOut = tuple[Union[WeightedScalars, Metrics], NestedMap, Metrics]
ProcessDecodeOut = tuple[WeightedScalars, Sequence[tuple[str, Any]], Metrics]


def _must_override(model: Any, method: str) -> NotImplementedError:
  return NotImplementedError(
    f"{type(model).__name__}.{method} is not defined: a BaseModel subclass implements "
    f"{method} itself (see praxis.base_model)."
  )


class BaseModel(base_layer.BaseLayer):
  """The base of every model; see the module docstring for the methods a model implements."""

  def compute_predictions(self, input_batch: NestedMap) -> Predictions:
    """What the network predicts for `input_batch` (logits, a NestedMap, ...)."""
    raise _must_override(self, "compute_predictions")

  def compute_loss(
    self, predictions: Predictions, input_batch: NestedMap
  ) -> tuple[WeightedScalars | Metrics, dict[str, Any]]:
    """(metrics, per_example_out) for `predictions` (see the module docstring)."""
    raise _must_override(self, "compute_loss")

  def __call__(self, input_batch: NestedMap) -> tuple[WeightedScalars | Metrics, dict[str, Any]]:
    """One forward pass: compute_loss(compute_predictions(input_batch), input_batch)."""
    predictions = self.compute_predictions(input_batch)
    return self.compute_loss(predictions, input_batch)

  def decode(self, input_batch: NestedMap) -> DecodeOut:
    """(weighted scalars, decoder outputs, metrics) for `input_batch`."""
    raise _must_override(self, "decode")

  def process_decode_out(self, input_obj: Any, decode_out: NestedMap) -> ProcessDecodeOut:
    """(weighted scalars, [(key, value) per example], metrics) from one batch of `decode`
    outputs; `input_obj` (a BaseInput) gives the tokenizer."""
    raise _must_override(self, "process_decode_out")
