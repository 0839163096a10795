"""Pax's SequenceModel (encoder-decoder task) and its DPO models, re-exported by models.py.

  SequenceModel: a TransformerEncoderDecoder with Pax's loss, metrics and decoding. The batch:
    NestedMap(src=NestedMap(ids, paddings [B, S]), tgt=NestedMap(ids, paddings, labels,
    weights [B, T])), plus segment_ids / segment_pos in both when packed.
  LanguageModelDPO: direct preference optimization (Rafailov et al. 2023) of a TransformerLm
    `mdl` against a frozen reference `ref_mdl`, on Pax's flattened DPO batch
    ('y_w/inputs', 'y_w/labels/ids', ..., 'y_l/...'; y_w is preferred over y_l).
  SequenceModelDPO: the same for an encoder-decoder (`model` and `ref_model`), batch keys
    'inputs', 'input_paddings', 'targets_w', 'targets_w/paddings', 'targets_w/labels/ids', ...

The DPO loss (Pax's compute_dpo_loss_helper), per example, with log p the summed target log-prob:
    r_w = beta * (log p_pi(y_w) - log p_ref(y_w)),  r_l = the same for y_l,
    loss = -mean(log_sigmoid(r_w - r_l)),
the reference's log-probs under stop_gradient. Metrics: total_loss only, weighted by the batch.

Models are called as `apply(variables, batch) -> (metrics, per_example_out)`, as LanguageModel.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import decoder_hparams
from praxis import pytypes
from praxis.layers import embedding_softmax
from praxis.layers import encoder_decoder
from praxis.layers import sequence_decode
from praxis.layers import transformer_models

Config = base_hyperparams.Config
NestedMap = pytypes.NestedMap
WeightedScalars = pytypes.WeightedScalars
LanguageModelType = transformer_models.LanguageModelType
template_field = base_hyperparams.template_field
instance_field = base_hyperparams.instance_field


def compute_xent_loss_helper(
  predictions: NestedMap,
  input_batch: NestedMap,
  return_predictions: bool,
  apply_eval_sample_weights: bool = False,
  report_strict_acc: bool = False,
) -> tuple[WeightedScalars, NestedMap]:
  """Pax's LM/sequence metrics from a softmax output and the batch's labels / weights [B, T].

  total_loss, avg_xent, log_pplx, fraction_of_correct_next_step_preds are weighted by the number
  of predictions; aux_loss by 1. per_example_out: labels and scores (-per_sequence_xent), or the
  whole predictions with return_predictions.
  """
  if report_strict_acc:
    raise NotImplementedError("compute_xent_loss_helper(report_strict_acc=True) is not provided.")
  labels = input_batch.labels
  weights = input_batch.weights
  if apply_eval_sample_weights and "eval_sample_weights" in input_batch:
    weights = weights * input_batch.eval_sample_weights[:, None]
  predicted = predictions.per_example_argmax.astype(labels.dtype)
  num_preds = predictions.total_weight
  mean_acc = jnp.sum((labels == predicted) * weights) / jnp.maximum(num_preds, 1)
  weight = jnp.asarray(num_preds, predictions.avg_xent.dtype)
  xent_weight = predictions.get("avg_xent_weight", weight)
  metrics = NestedMap(
    total_loss=(predictions.total_loss, weight),
    avg_xent=(predictions.avg_xent, xent_weight),
    aux_loss=(predictions.aux_loss, jnp.asarray(1.0, predictions.aux_loss.dtype)),
    log_pplx=(predictions.avg_xent, xent_weight),
    fraction_of_correct_next_step_preds=(mean_acc, weight),
    num_predictions=(num_preds, jnp.asarray(1.0, num_preds.dtype)),
  )
  if return_predictions:
    return metrics, predictions
  out = NestedMap(labels=labels, scores=-predictions.per_sequence_xent)
  if apply_eval_sample_weights and "eval_sample_weights" in input_batch:
    out.eval_sample_weights = input_batch.eval_sample_weights
  return metrics, out


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


class LanguageModelDPO(base_layer.BaseLayer):
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


def _model_template(model_tpl: Config, label_smoothing_prob: float | None) -> Config:
  model_p = model_tpl.clone()
  if label_smoothing_prob is not None:
    model_p.softmax_tpl.label_smoothing_prob = label_smoothing_prob
  return model_p


def _encoder_decoder_labels(tgt: NestedMap) -> NestedMap:
  return NestedMap(class_ids=tgt.labels, class_weights=tgt.weights)


class SequenceModel(base_layer.BaseLayer):
  """Pax's sequence (encoder-decoder) task: loss, metrics, encode and decode.

  Attributes (Pax's):
    model_tpl: the TransformerEncoderDecoder (child `model`).
    return_predictions: per_example_out is the whole softmax output.
    decoder_tpl: GreedyDecoderHParams (default), SampleDecoderHParams or BeamSearchHParams.
    label_smoothing_prob: set on the model's softmax when not None.
  """

  model_tpl: Config = template_field(encoder_decoder.TransformerEncoderDecoder)
  return_predictions: bool = False
  decoder_tpl: Any = base_hyperparams.instance_field(decoder_hparams.GreedyDecoderHParams)
  label_smoothing_prob: float | None = None

  def setup(self) -> None:
    self.create_child("model", _model_template(self.model_tpl, self.label_smoothing_prob))

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    kwargs = {}
    if self.model_tpl.packed_input:
      kwargs = dict(
        input_segment_ids=input_batch.src.segment_ids,
        input_segment_pos=input_batch.src.segment_pos,
        target_segment_ids=input_batch.tgt.segment_ids,
        target_segment_pos=input_batch.tgt.segment_pos,
      )
    return self.model(
      inputs=input_batch.src.ids,
      input_paddings=input_batch.src.paddings,
      targets=input_batch.tgt.ids,
      target_paddings=input_batch.tgt.paddings,
      labels=_encoder_decoder_labels(input_batch.tgt),
      **kwargs,
    )

  def compute_loss(self, predictions: NestedMap, input_batch: NestedMap):
    return compute_xent_loss_helper(predictions, input_batch.tgt, self.return_predictions)

  def __call__(self, input_batch: NestedMap):
    return self.compute_loss(self.compute_predictions(input_batch), input_batch)

  def encode(self, input_batch: NestedMap) -> NestedMap:
    """NestedMap(embeddings [B, S, D]): the encoder output of input_batch.ids / paddings."""
    return NestedMap(embeddings=self.model.encode(input_batch.ids, input_batch.paddings))

  def _prepare_guidance_decode_data(self, decode_data: NestedMap) -> NestedMap:
    raise NotImplementedError("SequenceModel does not support guidance.")

  def decode(self, input_batch: NestedMap):
    if not isinstance(self.decoder_tpl, decoder_hparams.DecoderHParams):
      raise ValueError(
        f"p.decoder must be DecoderHParams type, but it is a type of {type(self.decoder_tpl)}"
      )
    return self.decode_with_params(input_batch, self.decoder_tpl)

  def decode_with_params(self, input_batch: NestedMap, decoder_params: Any):
    """Decodes the batch's src with decoder_params; returns (metrics, decode_out, clu metrics).

    The decoder starts from tgt.ids[:, 0] (the start token). decode_out holds Pax's fields
    ([B, N, ...]: output_ids, decode_lengths, logprobs, prefix_lengths, ...; beam search also
    scores) plus the batch's src and tgt; metrics: num_decoded.
    """
    if decoder_params.seqlen <= 0:
      raise ValueError(
        f"Must set p.decoder_tpl.seqlen > 0, current value = {decoder_params.seqlen}"
      )
    batch_size = input_batch.tgt.ids.shape[0]
    src, tgt = input_batch.src, input_batch.tgt
    if isinstance(decoder_params, decoder_hparams.FlatBeamSearchHParams):
      raise NotImplementedError("flat beam search not supported")
    if isinstance(decoder_params, decoder_hparams.BeamSearchHParams):
      result = self._beam_search(src, tgt, decoder_params)
    elif isinstance(decoder_params, decoder_hparams.SampleDecoderHParams):
      result = self._sample(input_batch, decoder_params)
    elif isinstance(decoder_params, decoder_hparams.GreedyDecoderHParams):
      result = sequence_decode.sample_decode(
        self,
        _extend_step,
        _transform_decode_state,
        self._first_target_fprop(src, tgt),
        tgt.ids,
        tgt.paddings,
        decoder_params.seqlen,
        prefix_lengths=input_batch.get("prefix_lengths"),
        eos_id=decoder_params.eos_id,
      )
    else:
      raise NotImplementedError(f"Decoding algorithm {type(decoder_params)} is not implemented.")
    result.update(input_batch)
    if "eval_sample_weights" in result:
      num_decoded = jnp.sum(result.eval_sample_weights)
    else:
      num_decoded = jnp.asarray(batch_size, jnp.float32)
    metrics = NestedMap(num_decoded=(num_decoded, jnp.asarray(1, jnp.float32)))
    return metrics, result, NestedMap()

  def _first_target_fprop(self, src: NestedMap, tgt: NestedMap):
    """Pax's fprop_fn: the model on the source and the first target position (the cache)."""

    def fprop_fn(mdl, ids, paddings):
      del ids, paddings
      mdl.model(
        inputs=src.ids,
        input_paddings=src.paddings,
        targets=tgt.ids[:, :1],
        target_paddings=tgt.paddings[:, :1],
      )

    return fprop_fn

  def _sample(self, input_batch: NestedMap, hp: Any) -> NestedMap:
    decode_data = NestedMap(
      input_ids=input_batch.src.ids,
      input_paddings=input_batch.src.paddings,
      target_ids=input_batch.tgt.ids,
      target_paddings=input_batch.tgt.paddings,
    )
    if getattr(hp, "cf_guidance_scale", None) is not None:
      decode_data = self._prepare_guidance_decode_data(decode_data)
    for name in ("p", "next_token_sampler_tpl", "sample_constraint", "controlled_decoding"):
      if getattr(hp, name, None) is not None:
        raise NotImplementedError(
          f"SequenceModel decoding: SampleDecoderHParams.{name} is not implemented here; "
          "leave it None."
        )
    return sequence_decode.sample_decode(
      self,
      _extend_step,
      _transform_decode_state,
      self._first_target_fprop(input_batch.src, input_batch.tgt),
      decode_data.target_ids,
      decode_data.target_paddings,
      hp.seqlen,
      num_samples=hp.num_samples,
      top_k=hp.k,
      temperature=hp.temperature,
      max_decode_steps=hp.max_decode_steps,
      prefix_lengths=input_batch.get("prefix_lengths"),
      eos_id=hp.eos_id,
      sort_samples=bool(hp.sort_samples),
      top_k_recall_target=hp.top_k_recall_target,
    )

  def _beam_search(self, src: NestedMap, tgt: NestedMap, hp: Any) -> NestedMap:
    if hp.fprop_for_prefix:
      raise NotImplementedError("SequenceModel beam search: fprop_for_prefix is not supported.")
    if not isinstance(hp.max_decode_steps, int):
      raise NotImplementedError(
        "SequenceModel beam search needs one int max_decode_steps (it sizes the output)."
      )
    start_ids = tgt.ids[:, 0]

    def prefill(mdl):
      # Pax's: the start token as a padded one-position target.
      mdl(
        inputs=src.ids,
        input_paddings=src.paddings,
        targets=start_ids[:, None],
        target_paddings=jnp.ones((start_ids.shape[0], 1), tgt.paddings.dtype),
      )

    return sequence_decode.beam_search(
      self.model,
      prefill,
      start_ids,
      beam_size=hp.beam_size,
      max_decode_steps=hp.max_decode_steps,
      eos_id=hp.eos_id,
      length_norm_alpha=hp.length_norm_alpha,
      min_decode_steps=hp.min_decode_steps,
      tokens_per_beam=hp.tokens_per_beam,
      output_id_offset=hp.output_id_offset,
    )


def _extend_step(mdl: SequenceModel, ids: jax.Array, segment_pos: jax.Array) -> jax.Array:
  del segment_pos  # The encoder-decoder keeps its own time step.
  return mdl.model.extend_step(ids).logits


def _transform_decode_state(mdl: SequenceModel, transform_fn: Any) -> None:
  mdl.model.transform_decode_state(transform_fn)


class SequenceModelDPO(base_layer.BaseLayer):
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
    model_p = _model_template(self.model_tpl, self.label_smoothing_prob)
    self.create_child("model", model_p)
    self.create_child("ref_model", model_p.clone())

  def compute_predictions(self, input_batch: Mapping[str, Any]) -> NestedMap:
    if "src" in input_batch:
      return self.model(
        inputs=input_batch.src.ids,
        input_paddings=input_batch.src.paddings,
        targets=input_batch.tgt.ids,
        target_paddings=input_batch.tgt.paddings,
        labels=_encoder_decoder_labels(input_batch.tgt),
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
      return compute_xent_loss_helper(predictions, input_batch.tgt, False)
    return compute_dpo_loss_helper(self, predictions)

  def __call__(self, input_batch: Mapping[str, Any]):
    return self.compute_loss(self.compute_predictions(input_batch), input_batch)
