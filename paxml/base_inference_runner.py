"""Pax's `BaseInferenceRunner`: how to run inference on a model and what its outputs look like.

A subclass implements `infer(train_state, prng_key, var_weight_hparams, input_batch)` (pure, so
it can be jitted or pmapped) and `output_schema`, a NestedMap of `tfds.features` connectors;
`serialize_outputs` turns a batch of outputs into one serialized example per row.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

from paxml import train_states
from praxis import base_hyperparams
from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
NestedWeightHParams = base_layer.NestedWeightHParams
PRNGKey = pytypes.PRNGKey
TrainState = train_states.TrainState


class BaseInferenceRunner(base_hyperparams.FiddleBaseParameterizable, abc.ABC):
  """Inference for one model (`model`); see the module docstring."""

  _model: Any = dataclasses.field(init=False, repr=False, default=None)
  model: Any = None

  def __post_init__(self):
    self._model = self.model

  @abc.abstractmethod
  def infer(
    self,
    train_state: TrainState,
    prng_key: PRNGKey,
    var_weight_hparams: NestedWeightHParams,
    input_batch: NestedMap,
  ) -> NestedMap:
    """The outputs for `input_batch` (a NestedMap of [B, ...] arrays)."""

  @property
  @abc.abstractmethod
  def output_schema(self) -> NestedMap:
    """A NestedMap of `tfds.features.FeatureConnector`s with the structure of one output row,
    e.g. `NestedMap(ids=tfds.features.Tensor(shape=(32,), dtype=tf.int32))`."""

  def serialize_outputs(self, outputs: NestedMap) -> list[bytes]:
    """One serialized example (bytes, per `output_schema`) per row of `outputs` ([B, ...])."""
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel  (slow import)

    features = tfds.features.FeaturesDict(self.output_schema)
    return [features.serialize_example(row) for row in py_utils.tree_unstack(outputs, 0)]
