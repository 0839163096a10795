"""Models: a layer plus its loss and metrics, what the trainer calls.

Every model is called as `model.apply(variables, input_batch, ...) -> (metrics, per_example_out)`
where `metrics` maps a name to `(value, weight)`, so that metrics of several batches combine as
sum(value * weight) / sum(weight).

  LanguageModel: a TransformerLm trained on next-token prediction; `decode` generates text.
  ClassificationModel: Pax's image classifier, a network (ResNet by default) and a softmax.

The LM batch (Pax's): NestedMap(ids, labels, paddings, weights [B, T]; segment_ids and
segment_pos [B, T] when packed; prefix_lengths [B] optionally, for decoding). `labels` are the
next tokens of `ids`; a position counts with weight `weights * (1 - paddings)`.

How to apply (the rngs and collections are the caller's choice):
  train:  model.apply(variables, batch, rngs={"dropout": key}, mutable=["aux_loss"])
          A "dropout" rng turns dropout on. Auxiliary losses (z-loss, ...) that layers record
          with `add_aux_loss` are summed into total_loss when "aux_loss" is mutable. Without it,
          the softmax's z-loss is still counted (read from its output) and other aux losses are
          not; such a model logs a missing aux loss as 0.
  eval:   model.apply(variables, batch)
  decode: model.apply(variables, batch, method="decode", rngs={"random": key},
                      mutable=["decoder_cache"])
          (Pax's call; without mutable the decode runs in a nested apply that has the cache).
          "random" is needed when sampling. decoder_tpl picks greedy, sampling or beam search
          (Pax's praxis.decoder_hparams; see lm_decode.py and praxis/sample_decode.py).
"""

from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import base_model
from praxis import decoder_hparams
from praxis import metric_utils
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import embedding_softmax
from praxis.layers import lm_decode
from praxis.layers import linears
from praxis.layers import resnets
from praxis.layers import transformer_models

Config = base_hyperparams.Config
# Pax's decoder settings, which Pax exports from this module too.
DecoderHParams = decoder_hparams.DecoderHParams
GreedyDecoderHParams = decoder_hparams.GreedyDecoderHParams
SampleDecoderHParams = decoder_hparams.SampleDecoderHParams
BeamSearchHParams = decoder_hparams.BeamSearchHParams
FlatBeamSearchHParams = decoder_hparams.FlatBeamSearchHParams
NestedMap = pytypes.NestedMap
WeightedScalars = pytypes.WeightedScalars
template_field = base_hyperparams.template_field


def lm_metrics(
  per_example_xent: jax.Array,
  per_example_argmax: jax.Array,
  labels: jax.Array,
  weights: jax.Array,
  aux_loss: jax.Array | float = 0.0,
  aux_loss_weight: jax.Array | float = 1.0,
) -> WeightedScalars:
  """Pax's LM metrics from per-token cross-entropies and predictions, all [B, T].

  avg_xent = sum(xent * w) / sum(w); log_pplx is the same number (the log of the perplexity);
  total_loss = avg_xent + aux_loss. Every metric but aux_loss and num_predictions is weighted by
  the number of predictions, so averaging over batches weights tokens, not batches.
  """
  weights = weights.astype(jnp.float32)
  num_preds = jnp.sum(weights)
  safe = jnp.maximum(num_preds, 1e-8)  # an all-padding batch gives 0, not NaN
  avg_xent = jnp.sum(per_example_xent.astype(jnp.float32) * weights) / safe
  correct = (per_example_argmax == labels).astype(jnp.float32)
  accuracy = jnp.sum(correct * weights) / safe
  aux_loss = jnp.asarray(aux_loss, jnp.float32)
  # A NestedMap, as Pax's: `metrics.avg_xent` and `metrics["avg_xent"]` both work.
  return NestedMap(
    total_loss=(avg_xent + aux_loss, num_preds),
    avg_xent=(avg_xent, num_preds),
    aux_loss=(aux_loss, jnp.asarray(aux_loss_weight, jnp.float32)),
    log_pplx=(avg_xent, num_preds),
    fraction_of_correct_next_step_preds=(accuracy, num_preds),
    num_predictions=(num_preds, jnp.ones((), jnp.float32)),
  )


def _sown_aux_losses(variables: Any) -> dict[tuple[str, ...], tuple[Any, ...]]:
  """{path: (entry, ...)} of the "aux_loss" collection; each entry is (value, weight)."""
  collection = variables.get(base_layer.AUX_LOSS, {})
  return flax.traverse_util.flatten_dict(flax.core.unfreeze(collection)) if collection else {}


def _sum_new_aux_losses(before: dict, after: dict) -> jax.Array:
  """The sum of the aux-loss values recorded between two snapshots of the collection.

  Counting only new entries keeps values that came in with the variables (an `init` records
  them too) from being added again.
  """
  total = jnp.zeros((), jnp.float32)
  for path, entries in after.items():
    for value, _ in entries[len(before.get(path, ())) :]:
      # A repeated (scanned) layer's entry holds one value per repeat: sum them all.
      total = total + jnp.sum(jnp.asarray(value, jnp.float32))
  return total


def _with_new_aux_losses(layer: base_layer.BaseLayer, compute: Any) -> tuple[Any, Any]:
  """(compute(), the sum of the aux losses it recorded), or (compute(), None) when the
  "aux_loss" collection is not mutable in this call, so nothing can be recorded."""
  if not layer.is_mutable_collection(base_layer.AUX_LOSS):
    return compute(), None
  before = _sown_aux_losses(layer.variables)
  out = compute()
  return out, _sum_new_aux_losses(before, _sown_aux_losses(layer.variables))


class LanguageModel(base_model.BaseModel):
  """A TransformerLm with Pax's LM loss, metrics and decoding.

  Children: `lm` (and `token_counter` with count_tokens).

  Attributes (Pax's):
    lm_tpl: the language model (TransformerLm).
    return_predictions: per_example_out is the LM's whole prediction NestedMap (logits, ...).
    decoder_tpl: how `decode` generates: Pax's GreedyDecoderHParams (the default; set its
      seqlen), SampleDecoderHParams or BeamSearchHParams (see praxis.layers.lm_decode); the
      seed's praxis.layers.sample_decode.DecoderHParams is a SampleDecoderHParams.
    model_type: set on the LM (TransformerLm.model_type); PREFIX reads `inputs_indicator` [B, T]
      (1 on the prompt) from the batch. CAUSAL and PREFIX models decode.
    count_tokens: count the non-padded training tokens in a non-trainable variable.
    apply_eval_sample_weights: multiply every token's weight by its row's
      `eval_sample_weights` [B] (so padded eval examples count for nothing).
  """

  lm_tpl: Config = template_field(transformer_models.TransformerLm)
  return_predictions: bool = False
  decoder_tpl: decoder_hparams.DecoderHParams | None = base_hyperparams.instance_field(
    decoder_hparams.GreedyDecoderHParams
  )
  model_type: transformer_models.LanguageModelType = transformer_models.LanguageModelType.CAUSAL
  count_tokens: bool = False
  apply_eval_sample_weights: bool = False

  def setup(self):
    if self.count_tokens:
      self.token_counter = self.create_child(Config(embedding_softmax.TokenCounter))
    self.lm = self.create_child(self.lm_tpl, model_type=self.model_type)

  def _weights(self, input_batch: NestedMap) -> jax.Array:
    paddings = input_batch.paddings.astype(jnp.float32)
    weights = input_batch.get("weights")
    weights = 1.0 - paddings if weights is None else weights.astype(jnp.float32) * (1.0 - paddings)
    if self.apply_eval_sample_weights:
      per_row = input_batch.get("eval_sample_weights")
      if per_row is None:
        raise ValueError(
          "LanguageModel(apply_eval_sample_weights=True) needs eval_sample_weights [B] in the "
          "batch; add them or turn the option off."
        )
      weights = weights * jnp.asarray(per_row, jnp.float32)[:, None]
    return weights

  def compute_predictions(
    self, input_batch: NestedMap, deterministic: bool | None = None
  ) -> NestedMap:
    """Runs the LM on the batch; returns the softmax output (logits, per_example_xent, ...).

    `deterministic=None` means dropout runs exactly when a "dropout" rng was given.
    """
    if deterministic is None:
      deterministic = not self.has_rng("dropout")
    if self.count_tokens:
      self.token_counter(input_batch.ids, input_batch.paddings)
    labels = NestedMap(class_ids=input_batch.labels, class_weights=self._weights(input_batch))
    kwargs = {}
    # As Pax: the batch's segments reach the LM only when it is packed (an unpacked LM numbers
    # its positions 0..T-1 itself).
    if getattr(self.lm_tpl, "packed_input", False):
      kwargs["segment_ids"] = input_batch.get("segment_ids")
      kwargs["segment_pos"] = input_batch.get("segment_pos")
    if self.model_type == transformer_models.LanguageModelType.PREFIX:
      if "inputs_indicator" not in input_batch:
        raise ValueError(
          "LanguageModel(model_type=PREFIX) needs inputs_indicator [B, T] in the batch "
          "(1 on the prompt, 0 on the target)."
        )
      kwargs["causal_attention_mask"] = 1 - jnp.asarray(input_batch.inputs_indicator, jnp.int32)
    return self.lm(
      input_batch.ids,
      input_batch.paddings,
      labels=labels,
      deterministic=deterministic,
      **kwargs,
    )

  def compute_loss(
    self, predictions: NestedMap, input_batch: NestedMap, aux_loss: jax.Array | float = 0.0
  ) -> tuple[WeightedScalars, NestedMap]:
    """Pax's metrics (see `lm_metrics`) and per-sequence outputs from the predictions."""
    weights = self._weights(input_batch)  # [B, T]
    metrics = lm_metrics(
      predictions.per_example_xent,
      predictions.per_example_argmax,
      input_batch.labels,
      weights,
      aux_loss,
    )
    if self.return_predictions:
      return metrics, predictions
    per_sequence_xent = jnp.sum(predictions.per_example_xent * weights, axis=-1)  # [B]
    per_example_out = NestedMap(
      labels=input_batch.labels,
      # Pax's per-example score: the weighted sum of the tokens' log-probs.
      scores=-per_sequence_xent,
      per_sequence_xent=per_sequence_xent,
      num_predictions=jnp.sum(weights, axis=-1),  # [B]
    )
    if self.apply_eval_sample_weights:
      per_example_out.eval_sample_weights = input_batch.eval_sample_weights
    return metrics, per_example_out

  def __call__(
    self, input_batch: NestedMap, deterministic: bool | None = None
  ) -> tuple[WeightedScalars, NestedMap]:
    predictions, aux_loss = _with_new_aux_losses(
      self, lambda: self.compute_predictions(input_batch, deterministic)
    )
    if aux_loss is None:
      # The softmax's z-loss is in its output as well; other aux losses are unreachable here.
      aux_loss = predictions.get("z_loss", 0.0)
    return self.compute_loss(predictions, input_batch, aux_loss)

  # -- decoding ----------------------------------------------------------------------------------

  def decode(
    self,
    input_batch: NestedMap,
    result_callback: Any = None,
    return_result_for_suffix_score: bool = False,
  ) -> tuple[Any, ...]:
    """Continues each row's prompt with `decoder_tpl`, using the LM's decode cache.

    With one of Pax's decoder settings (praxis.decoder_hparams) this is Pax's decode
    (`lm_decode.decode_with_params`): it returns (metrics, decode_out, decode_metrics) with a
    samples / beam dim in every per-row output. Pax applies it with
    `mutable=["decoder_cache"]`; applied without, it runs in a nested apply that has the cache.

    The seed's `praxis.layers.sample_decode.DecoderHParams` is one of Pax's settings (a
    SampleDecoderHParams with one sample) and returns Pax's form too.
    """
    hp = self.decoder_tpl
    if hp is None:
      raise ValueError(
        "LanguageModel.decode needs decoder_tpl; set it to a decoder_hparams setting "
        "(GreedyDecoderHParams(seqlen=...), ...) in the model config."
      )
    if not isinstance(hp, decoder_hparams.DecoderHParams):
      raise TypeError(
        f"LanguageModel.decoder_tpl must be one of Pax's decoder settings "
        f"(praxis.decoder_hparams), got {type(hp).__name__}."
      )
    if not self.is_mutable_collection(base_layer.DECODE_CACHE):
      return lm_decode.decode_with_own_cache(
        self,
        input_batch,
        result_callback=result_callback,
        return_result_for_suffix_score=return_result_for_suffix_score,
      )
    return self.decode_with_params(hp, input_batch, result_callback, return_result_for_suffix_score)

  def decode_with_params(
    self,
    decoder_params: decoder_hparams.DecoderHParams,
    input_batch: NestedMap,
    result_callback: Any = None,
    return_result_for_suffix_score: bool = False,
  ) -> tuple[Any, ...]:
    """Pax's: `decode` with the given decoder settings instead of decoder_tpl."""
    return lm_decode.decode_with_params(
      self, decoder_params, input_batch, result_callback, return_result_for_suffix_score
    )


class ClassificationModel(base_model.BaseModel):
  """Pax's image classifier: a network (ResNet-50 by default) and a softmax over its features.

  The batch (Pax's): NestedMap(image [B, H, W, C] (the `input_field`), label_probs [B, K] (the
  `label_field`), weight [B] optional).

  Children: `network` and `softmax` (FullSoftmax; set its input_dims to the network's feature
  size and num_classes, as Pax's users do on `softmax_tpl`).

  Metrics (value, weight): avg_xent, num_predictions, accuracy, error, and with more than 5
  classes acc5, error5 (Pax's); total_loss = avg_xent plus the aux losses recorded when
  "aux_loss" is mutable (ours: what the trainer minimises).

  Attributes:
    network_tpl: the feature network, images -> [B, D].
    softmax_tpl: the classifier.
    input_field: the batch key of the images.
    label_field: the batch key of the target distributions [B, K].
  """

  network_tpl: Config = template_field(resnets.ResNet)
  softmax_tpl: Config = template_field(embedding_softmax.FullSoftmax)
  input_field: str = "image"
  label_field: str = "label_probs"

  def setup(self):
    self.create_child("network", self.network_tpl)
    self.create_child("softmax", self.softmax_tpl)

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    """features [B, D], softmax_output (the softmax's NestedMap) and example_weights [B]."""
    inputs = input_batch[self.input_field]
    features = self.network(inputs)  # [B, D]
    batch = inputs.shape[0]
    weights = input_batch.get("weight")
    if weights is None:
      weights = jnp.ones([batch])
    elif weights.shape != (batch,):
      raise ValueError(f"ClassificationModel: weight must be [{batch}], got {weights.shape}.")
    softmax_output = self.softmax(
      features,
      class_weights=weights[:, None],
      class_probabilities=input_batch[self.label_field],
    )
    return NestedMap(features=features, softmax_output=softmax_output, example_weights=weights)

  def compute_loss(
    self, predictions: NestedMap, input_batch: NestedMap, aux_loss: jax.Array | float = 0.0
  ) -> tuple[WeightedScalars, NestedMap]:
    out = predictions.softmax_output
    label_probs = input_batch[self.label_field]
    num = out.total_weight
    metrics = NestedMap(
      avg_xent=(out.avg_xent, num),
      num_predictions=(num, jnp.array(1.0, num.dtype)),
      total_loss=(out.avg_xent + aux_loss, num),
    )
    for k, acc_name, err_name in ((1, "accuracy", "error"), (5, "acc5", "error5")):
      if k > 1 and out.logits.shape[-1] <= k:
        continue  # top-5 of 5 or fewer classes says nothing
      acc = metric_utils.top_k_accuracy(
        k, out.logits, label_probs=label_probs, weights=predictions.example_weights
      )
      metrics[acc_name] = (acc, num)
      metrics[err_name] = (1.0 - acc, num)
      self.add_summary(f"acc{k}", acc)
    return metrics, NestedMap(labels=label_probs, scores=out.logits)

  def predict(self, input_batch: NestedMap) -> NestedMap:
    """logits [B, K] and their log-probabilities."""
    logits = self.softmax.get_logits(self.network(input_batch[self.input_field]))
    return NestedMap(logits=logits, logp=self.softmax.logits_to_logp(logits))

  def __call__(self, input_batch: NestedMap) -> tuple[WeightedScalars, NestedMap]:
    predictions, aux_loss = _with_new_aux_losses(
      self, lambda: self.compute_predictions(input_batch)
    )
    return self.compute_loss(predictions, input_batch, 0.0 if aux_loss is None else aux_loss)


# Pax's SequenceModel and DPO models live in their own modules; Pax users reach them here.
from praxis.layers.dpo_models import (  # noqa: E402, F401
  DPOExample,
  DPOExampleHalf,
  DPOExampleHalfSeq2Seq,
  DPOExampleSeq2Seq,
  Labels,
  LanguageModelDPO,
  SequenceModelDPO,
  compute_dpo_loss_helper,
)
from praxis.layers.sequence_models import SequenceModel, compute_xent_loss_helper  # noqa: E402, F401


class ClassificationMLPModel(base_model.BaseModel):
  """Pax's toy token classifier: embed `ids`, an MLP, then a softmax sharing the embedding.

  The batch (Pax's): NestedMap(ids, labels, weights), each [B, T]. The shared softmax embeds
  `ids` (`emb_lookup`), the MLP maps each embedding, and the softmax scores every position
  against its own id (`class_ids=ids`, as Pax does).

  Children: `mlp_layers_0` (the MLPBlock; Pax's name, kept for checkpoints) and `softmax`.
  Set the softmax's input_dims / num_classes and the MLP's ff_tpl input/output dims to match.

  Metrics: as in Pax, total_loss is the weighted accuracy of the softmax's argmax against
  `labels` (value and weight both the accuracy, Pax's pair); the cross-entropy stays in the
  predictions (`avg_xent`, `per_example_xent`).

  Attributes:
    mlp_tpl: the MLP applied to each position's embedding.
    softmax_tpl: the embedding-sharing softmax.
  """

  mlp_tpl: Config = template_field(linears.MLPBlock)
  softmax_tpl: Config = template_field(embedding_softmax.SharedEmbeddingSoftmax)

  def setup(self) -> None:
    self.create_child("mlp_layers_0", self.mlp_tpl)
    self.create_child("softmax", self.softmax_tpl)

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    ids = input_batch.ids  # [B, T]
    embs = self.softmax.emb_lookup(ids)  # [B, T, D]
    features = self.mlp_layers_0(embs)  # [B, T, D]
    return self.softmax(
      features,
      class_weights=input_batch.weights[:, :, None],  # [B, T, 1]
      class_ids=ids[:, :, None],  # [B, T, 1]
    )

  def compute_loss(
    self, predictions: NestedMap, input_batch: NestedMap
  ) -> tuple[WeightedScalars, NestedMap]:
    labels, weights = input_batch.labels, input_batch.weights  # [B, T]
    predicted = predictions.per_example_argmax.astype(labels.dtype)  # [B, T]
    count = jnp.maximum(jnp.sum(weights), 1)
    accuracy = jnp.sum((labels == predicted) * weights) / count
    return NestedMap(total_loss=(accuracy, accuracy)), NestedMap()


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
