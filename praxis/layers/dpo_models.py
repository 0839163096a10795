"""Pax's DPO models: LanguageModelDPO (decoder-only) and SequenceModelDPO (encoder-decoder).

Direct preference optimization (Rafailov et al. 2023) trains a policy against a frozen reference
on pairs of targets where y_w is preferred over y_l:
  LanguageModelDPO: TransformerLms `mdl` and `ref_mdl`, on Pax's flattened batch
    ('y_w/inputs', 'y_w/paddings', 'y_w/labels/ids', 'y_w/labels/weights', 'y_w/segment_ids',
    'y_w/segment_pos', 'y_w/inputs_indicator', and the same for y_l).
  SequenceModelDPO: encoder-decoders `model` and `ref_model`, batch keys 'inputs',
    'input_paddings', 'targets_w', 'targets_w/paddings', 'targets_w/labels/ids',
    'targets_w/labels/weights' (and _l); a batch with `src` gets SequenceModel's metrics instead.

The loss (Pax's compute_dpo_loss_helper), with log p the summed target log-prob of a sequence:
    r_w = beta * (log p_pi(y_w) - log p_ref(y_w)),  r_l = the same for y_l,
    loss = -mean(log_sigmoid(r_w - r_l)),
the reference's log-probs under stop_gradient. Metrics: total_loss only, weighted by the batch.
Re-exported by praxis.layers.models (Pax's module).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import base_model
from praxis import pytypes
from praxis.layers import embedding_softmax
from praxis.layers import encoder_decoder
from praxis.layers import sequence_models
from praxis.layers import transformer_models

Config = base_hyperparams.Config
NestedMap = pytypes.NestedMap
WeightedScalars = pytypes.WeightedScalars
LanguageModelType = transformer_models.LanguageModelType
template_field = base_hyperparams.template_field
instance_field = base_hyperparams.instance_field


def _per_sequence_log_p(out: NestedMap, class_weights: jax.Array) -> jax.Array:
  """Each sequence's summed target log-prob [B] from a softmax output (float32 required).

  Pax's models return per_sequence_xent; our TransformerLm returns per_example_xent [B, T]
  only, so the sum is taken here with the labels' weights.
  """
  if out.per_example_xent.dtype != jnp.float32:
    raise ValueError(
      f"per_example_xent is expected to be float32 for DPO (bfloat16 is unstable), but got "
      f"{out.per_example_xent.dtype}."
    )
  xent = out.get("per_sequence_xent")
  if xent is None:
    xent = jnp.sum(out.per_example_xent * class_weights.astype(jnp.float32), axis=-1)
  if xent.ndim != 1:
    raise ValueError(f"per_sequence_xent is expected to be [batch], but got {xent.shape}.")
  return -xent


def compute_dpo_loss_helper(model: Any, predictions: NestedMap) -> tuple[WeightedScalars, dict]:
  """Pax's DPO loss (module docstring) from predictions y_w_ref, y_l_ref, y_w_pi, y_l_pi.

  Each prediction is a softmax output with `class_weights` [B, T] attached (see
  `_per_sequence_log_p`); `model.beta` scales the rewards. Summaries are Pax's dpo/*.
  """

  def log_p(name):
    out = predictions[name]
    return _per_sequence_log_p(out, out.class_weights)

  # The reference is frozen: no gradient reaches it.
  y_w_ref = jax.lax.stop_gradient(log_p("y_w_ref"))
  y_l_ref = jax.lax.stop_gradient(log_p("y_l_ref"))
  y_w_pi = log_p("y_w_pi")
  y_l_pi = log_p("y_l_pi")
  r_w = model.beta * (y_w_pi - y_w_ref)  # [B]
  r_l = model.beta * (y_l_pi - y_l_ref)  # [B]
  loss = -jnp.mean(jax.nn.log_sigmoid(r_w - r_l))
  for name, value in (
    ("y_w_ref_log_p", y_w_ref),
    ("y_w_pi_log_p", y_w_pi),
    ("y_l_ref_log_p", y_l_ref),
    ("y_l_pi_log_p", y_l_pi),
    ("r_hat_y_w", r_w),
    ("r_hat_y_l", r_l),
    ("delta_r_hat", r_w - r_l),
  ):
    model.add_summary(f"dpo/{name}", jnp.mean(value))
    model.add_summary(f"dpo/{name}", value, summary_type=base_layer.SummaryType.HISTOGRAM)
  model.add_summary("dpo/r_hat_y_w_std", jnp.std(r_w))
  model.add_summary("dpo/r_hat_y_l_std", jnp.std(r_l))
  model.add_summary("dpo/delta_r_hat_std", jnp.std(r_w - r_l))
  model.add_summary("dpo/dpo_loss", loss)
  model.add_summary("_dpo_topline/p_correct_ranking", jnp.mean(jax.nn.sigmoid(r_w - r_l)))
  batch = predictions.y_l_ref.per_example_xent.shape[0]
  return NestedMap(total_loss=(loss, jnp.asarray(batch, loss.dtype))), {}


def _as_nested_map(obj: Any) -> Any:
  """A (nested) dataclass as a NestedMap of its fields (Pax's NestedMap.FromNestedDataclass)."""
  if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
    return NestedMap(
      {f.name: _as_nested_map(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    )
  return obj


@dataclasses.dataclass(kw_only=True, slots=True)
class Labels:
  """The target ids [B, T] and their weights [B, T] of one DPO half."""

  class_ids: Any
  class_weights: Any


@dataclasses.dataclass(kw_only=True, slots=True)
class DPOExampleHalf:
  """One rated sequence of a decoder-only DPO example (no packing)."""

  inputs: Any
  labels: Labels
  paddings: Any
  segment_ids: Any
  segment_pos: Any
  inputs_indicator: Any = None
  causal_attention_mask: Any = None

  def as_xformer_lm_input(self) -> NestedMap:
    """TransformerLm's keyword arguments (inputs_indicator is the model's, not the LM's)."""
    out = _as_nested_map(self)
    del out["inputs_indicator"]
    return out


@dataclasses.dataclass(kw_only=True, slots=True)
class DPOExample:
  """A DPO batch: y_w is preferred over y_l."""

  y_w: DPOExampleHalf
  y_l: DPOExampleHalf

  @classmethod
  def from_feature_converter(cls, example: Mapping[str, Any]) -> "DPOExample":
    def half(p):
      return DPOExampleHalf(
        inputs=example[f"{p}/inputs"],
        inputs_indicator=example[f"{p}/inputs_indicator"],
        labels=Labels(
          class_ids=example[f"{p}/labels/ids"], class_weights=example[f"{p}/labels/weights"]
        ),
        paddings=example[f"{p}/paddings"],
        segment_ids=example[f"{p}/segment_ids"],
        segment_pos=example[f"{p}/segment_pos"],
      )

    return cls(y_w=half("y_w"), y_l=half("y_l"))


@dataclasses.dataclass(kw_only=True, slots=True, frozen=True)
class DPOExampleHalfSeq2Seq:
  """One rated target of an encoder-decoder DPO example."""

  inputs: Any
  input_paddings: Any
  targets: Any
  target_paddings: Any
  labels: Labels

  def as_xformer_encdec_input(self) -> NestedMap:
    return _as_nested_map(self)


@dataclasses.dataclass(kw_only=True, slots=True)
class DPOExampleSeq2Seq:
  """An encoder-decoder DPO batch: the same inputs, target y_w preferred over y_l."""

  y_w: DPOExampleHalfSeq2Seq
  y_l: DPOExampleHalfSeq2Seq

  @classmethod
  def from_feature_converter(cls, example: Mapping[str, Any]) -> "DPOExampleSeq2Seq":
    def half(p):
      return DPOExampleHalfSeq2Seq(
        inputs=example["inputs"],
        input_paddings=example["input_paddings"],
        targets=example[p],
        target_paddings=example[f"{p}/paddings"],
        labels=Labels(
          class_ids=example[f"{p}/labels/ids"], class_weights=example[f"{p}/labels/weights"]
        ),
      )

    return cls(y_w=half("targets_w"), y_l=half("targets_l"))


def _with_weights(out: NestedMap, labels: Any) -> NestedMap:
  """The softmax output with its labels' weights attached (the DPO loss sums with them)."""
  out.class_weights = labels.class_weights
  return out


class LanguageModelDPO(base_model.BaseModel):
  """Pax's DPO over a pair of TransformerLms (module docstring for the loss and the batch).

  Attributes (Pax's):
    ref_mdl: the reference LM (never trained: its log-probs are under stop_gradient).
    mdl: the LM being optimized.
    beta: weight of the implicit KL regularization (scales the rewards).
    token_counter: counts the non-padded tokens of both halves.
    apply_eval_sample_weights: multiply the label weights by the batch's eval_sample_weights.
    model_type: CAUSAL, PREFIX (1 - inputs_indicator is the causal mask) or BIDIRECTIONAL.
  """

  ref_mdl: Any = instance_field(transformer_models.TransformerLm)
  mdl: Any = instance_field(transformer_models.TransformerLm)
  beta: float = 0.1
  token_counter: Any = instance_field(embedding_softmax.TokenCounter)
  apply_eval_sample_weights: bool = False
  model_type: LanguageModelType = LanguageModelType.CAUSAL

  def _prepare_predict_data(self, batch: DPOExampleHalf, example: Mapping[str, Any]):
    if self.apply_eval_sample_weights:
      if "eval_sample_weights" not in example:
        raise ValueError(
          "LanguageModelDPO(apply_eval_sample_weights=True) needs eval_sample_weights [B] in "
          "the batch."
        )
      per_row = jnp.asarray(example["eval_sample_weights"], jnp.float32)[:, None]
      batch.labels.class_weights = batch.labels.class_weights * per_row
    self.token_counter(batch.inputs, batch.paddings)
    if self.model_type == LanguageModelType.BIDIRECTIONAL:
      batch.causal_attention_mask = jnp.zeros_like(batch.inputs)
    elif self.model_type == LanguageModelType.PREFIX:
      batch.causal_attention_mask = 1 - batch.inputs_indicator
    else:
      batch.causal_attention_mask = None
    return batch

  def compute_predictions(self, input_batch: Mapping[str, Any]) -> NestedMap:
    """The four softmax outputs: both halves under the reference and the policy."""
    batch = DPOExample.from_feature_converter(input_batch)
    y_l = self._prepare_predict_data(batch.y_l, input_batch)
    y_w = self._prepare_predict_data(batch.y_w, input_batch)
    return NestedMap(
      y_l_ref=_with_weights(self.ref_mdl(**y_l.as_xformer_lm_input()), y_l.labels),
      y_l_pi=_with_weights(self.mdl(**y_l.as_xformer_lm_input()), y_l.labels),
      y_w_ref=_with_weights(self.ref_mdl(**y_w.as_xformer_lm_input()), y_w.labels),
      y_w_pi=_with_weights(self.mdl(**y_w.as_xformer_lm_input()), y_w.labels),
    )

  def compute_loss(self, predictions: NestedMap, input_batch: Any) -> tuple[WeightedScalars, dict]:
    del input_batch
    return compute_dpo_loss_helper(self, predictions)

  def __call__(self, input_batch: Mapping[str, Any]) -> tuple[WeightedScalars, dict]:
    return self.compute_loss(self.compute_predictions(input_batch), input_batch)


class SequenceModelDPO(base_model.BaseModel):
  """Pax's DPO for an encoder-decoder: children `model` (trained) and `ref_model` (frozen).

  A batch with `src` (eval during training) gets SequenceModel's cross-entropy metrics from
  `model`; a DPO batch (module docstring) gets the DPO loss.

  Attributes (Pax's):
    model_tpl: the TransformerEncoderDecoder; the reference is a copy of it.
    beta: weight of the implicit KL regularization.
    label_smoothing_prob: set on the softmax when not None.
  """

  model_tpl: Config = template_field(encoder_decoder.TransformerEncoderDecoder)
  beta: float = 0.1
  label_smoothing_prob: float | None = None

  def setup(self) -> None:
    model_p = sequence_models.model_template(self.model_tpl, self.label_smoothing_prob)
    self.create_child("model", model_p)
    self.create_child("ref_model", model_p.clone())

  def compute_predictions(self, input_batch: Mapping[str, Any]) -> NestedMap:
    if "src" in input_batch:
      return self.model(
        inputs=input_batch.src.ids,
        input_paddings=input_batch.src.paddings,
        targets=input_batch.tgt.ids,
        target_paddings=input_batch.tgt.paddings,
        labels=sequence_models.encoder_decoder_labels(input_batch.tgt),
      )
    batch = DPOExampleSeq2Seq.from_feature_converter(input_batch)
    y_l, y_w = batch.y_l.as_xformer_encdec_input(), batch.y_w.as_xformer_encdec_input()
    return NestedMap(
      y_l_ref=_with_weights(self.ref_model(**y_l), y_l.labels),
      y_l_pi=_with_weights(self.model(**y_l), y_l.labels),
      y_w_ref=_with_weights(self.ref_model(**y_w), y_w.labels),
      y_w_pi=_with_weights(self.model(**y_w), y_w.labels),
    )

  def compute_loss(self, predictions: NestedMap, input_batch: Mapping[str, Any]):
    if "src" in input_batch:
      return sequence_models.compute_xent_loss_helper(predictions, input_batch.tgt, False)
    return compute_dpo_loss_helper(self, predictions)

  def __call__(self, input_batch: Mapping[str, Any]):
    return self.compute_loss(self.compute_predictions(input_batch), input_batch)
