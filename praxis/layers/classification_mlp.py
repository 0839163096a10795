"""Pax's `ClassificationMLPModel`: an MLPBlock between a tied embedding lookup and its softmax.

The model behind Pax's lm_cloud LargeMlp / SmallMlp (paxml.tasks.lm.model_params.
ClassificationModelAdam): ids are embedded by the softmax's own table, run through `mlp_tpl`
and scored against themselves. As in Pax, its `total_loss` is the accuracy of predicting each
id (a value with no gradient): the experiments time the MLP, they do not learn.

Children: `mlp_layers_0` (mlp_tpl, sized from its ff_tpl's input_dims / output_dims as Pax
sizes it) and `softmax` (SharedEmbeddingSoftmax).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pytypes
from praxis.base_hyperparams import template_field
from praxis.layers import embedding_softmax
from praxis.layers import linears

NestedMap = pytypes.NestedMap


class ClassificationMLPModel(base_layer.BaseLayer):
  """Pax's ClassificationMLPModel (module docstring).

  Attributes:
    mlp_tpl: the MLPBlock; its ff_tpl's input_dims / output_dims size it, as in Pax.
    softmax_tpl: the SharedEmbeddingSoftmax that embeds the ids and scores the MLP's output.
  """

  mlp_tpl: base_layer.LayerTpl = template_field(linears.MLPBlock)
  softmax_tpl: base_layer.LayerTpl = template_field(embedding_softmax.SharedEmbeddingSoftmax)

  def setup(self):
    self.create_child("mlp_layers_0", self.mlp_tpl)
    self.create_child("softmax", self.softmax_tpl)

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    embs = self.softmax.emb_lookup(input_batch.ids)  # [B, T, D]
    outputs = self.mlp_layers_0(embs)  # [B, T, D]
    return self.softmax(
      outputs,
      class_weights=input_batch.weights[:, :, jnp.newaxis],
      class_ids=input_batch.ids[:, :, jnp.newaxis],
    )

  def compute_loss(
    self, predictions: NestedMap, input_batch: NestedMap
  ) -> tuple[dict[str, tuple[jax.Array, jax.Array]], NestedMap]:
    labels, weights = input_batch.labels, input_batch.weights
    predicted = predictions.per_example_argmax.astype(labels.dtype)
    num_predictions = jnp.sum(weights)
    accuracy = jnp.sum((labels == predicted) * weights) / jnp.maximum(num_predictions, 1)
    return {"total_loss": (accuracy, accuracy)}, NestedMap()

  def __call__(self, input_batch: NestedMap) -> tuple[dict, NestedMap]:
    return self.compute_loss(self.compute_predictions(input_batch), input_batch)
