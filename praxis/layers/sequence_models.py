"""Pax's SequenceModel: an encoder-decoder task with Pax's loss, metrics and decoding.

The batch: NestedMap(src=NestedMap(ids, paddings [B, S]), tgt=NestedMap(ids, paddings, labels,
weights [B, T])), plus segment_ids / segment_pos in both when packed. Called as
`apply(variables, batch) -> (metrics, per_example_out)`, as LanguageModel; decoded with
`apply(variables, batch, method="decode", mutable=[DECODE_CACHE], rngs={"random": key})`.
Re-exported by praxis.layers.models (Pax's module), with the DPO models of dpo_models.py.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import base_model
from praxis import beam_search as beam_search_lib
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import pytypes
from praxis import sample_decode
from praxis.layers import encoder_decoder

Config = base_hyperparams.Config
NestedMap = pytypes.NestedMap
WeightedScalars = pytypes.WeightedScalars
template_field = base_hyperparams.template_field
DECODE_CACHE = base_layer.DECODE_CACHE


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


def model_template(model_tpl: Config, label_smoothing_prob: float | None) -> Config:
  """The model template with label_smoothing_prob set on its softmax (when not None)."""
  model_p = model_tpl.clone()
  if label_smoothing_prob is not None:
    model_p.softmax_tpl.label_smoothing_prob = label_smoothing_prob
  return model_p


def encoder_decoder_labels(tgt: NestedMap) -> NestedMap:
  """The encoder-decoder's labels from the batch's tgt."""
  return NestedMap(class_ids=tgt.labels, class_weights=tgt.weights)


class SequenceModel(base_model.BaseModel):
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
    self.create_child("model", model_template(self.model_tpl, self.label_smoothing_prob))

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
      labels=encoder_decoder_labels(input_batch.tgt),
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

    As Pax's: the model runs once on the source and the first target position (filling the
    decode cache), then greedy and sampling go through `praxis.sample_decode`'s loop with the
    encoder-decoder's extend_step, starting from tgt.ids[:, 0]. decode_out holds Pax's fields
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
      result = sample_decode.greedy_decode(
        self,
        _extend_step,
        tgt.ids,
        tgt.paddings,
        decoder_params.seqlen,
        prefix_lengths=input_batch.get("prefix_lengths"),
        eos_id=decoder_params.eos_id,
        fprop_fn=_first_target_fprop(src.ids, src.paddings, tgt),
        transform_state_fn=_transform_decode_state,
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

  def _sample(self, input_batch: NestedMap, hp: Any) -> NestedMap:
    decode_data = NestedMap(
      input_ids=input_batch.src.ids,
      input_paddings=input_batch.src.paddings,
      target_ids=input_batch.tgt.ids,
      target_paddings=input_batch.tgt.paddings,
    )
    if hp.cf_guidance_scale is not None:
      decode_data = self._prepare_guidance_decode_data(decode_data)
    # Pax's SequenceModel copies these onto the sampler unconditionally.
    sampler_p = hp.next_token_sampler_tpl.clone()
    sampler_p.top_k = hp.k
    sampler_p.top_p = hp.p
    sampler_p.global_normalize = hp.global_normalize
    sampler_p.top_k_recall_target = hp.top_k_recall_target
    sampler_p.use_top_k_for_logprobs = hp.use_top_k_for_logprobs
    random = hp.k > 1 or (hp.k == 0 and hp.temperature > 0.0)
    if random and not self.has_rng(base_layer.RANDOM):
      raise ValueError(
        "SequenceModel.decode samples (SampleDecoderHParams with k != 1) and needs a 'random' "
        "rng: apply(..., method='decode', rngs={'random': key})."
      )
    return sample_decode.sample_decode(
      self,
      _extend_step,
      transform_state_fn=_transform_decode_state,
      lazy_broadcast_prefix_fn=None,
      next_token_sampler=base_hyperparams.instantiate(sampler_p),
      prefix_ids=decode_data.target_ids,
      prefix_paddings=decode_data.target_paddings,
      prefix_lengths=input_batch.get("prefix_lengths"),
      seq_len=hp.seqlen,
      fprop_fn=_first_target_fprop(
        decode_data.input_ids, decode_data.input_paddings, input_batch.tgt
      ),
      num_samples=hp.num_samples,
      fprop_for_prefix=hp.fprop_for_prefix,
      temperature=hp.temperature,
      max_decode_steps=hp.max_decode_steps,
      eos_id=hp.eos_id,
      cf_guidance_scale=hp.cf_guidance_scale,
      controlled_decoding=hp.controlled_decoding,
      sort_samples=bool(hp.sort_samples),
      top_k_recall_target=hp.top_k_recall_target,
      use_top_k_for_logprobs=hp.use_top_k_for_logprobs,
      process_result_fn=hp.process_result_fn,
      early_exit=hp.early_exit,
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

    return _beam_search_from_start(
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


def _first_target_fprop(src_ids: jax.Array, src_paddings: jax.Array, tgt: NestedMap):
  """Pax's fprop_fn: the model on the source and the first target position (fills the cache);
  the loop's prompt arguments are not used."""

  def fprop_fn(mdl: SequenceModel, ids: jax.Array, paddings: jax.Array) -> None:
    del ids, paddings
    mdl.model(
      inputs=src_ids,
      input_paddings=src_paddings,
      targets=tgt.ids[:, :1],
      target_paddings=tgt.paddings[:, :1],
    )

  return fprop_fn


def _extend_step(mdl: SequenceModel, ids: jax.Array, segment_pos: jax.Array) -> jax.Array:
  del segment_pos  # The encoder-decoder keeps its own time step.
  return mdl.model.extend_step(ids).logits


def _transform_decode_state(mdl: SequenceModel, transform_fn: Any) -> None:
  mdl.model.transform_decode_state(transform_fn)


def _beam_search_from_start(
  model: Any,
  prefill_fn: Callable[[Any], None],
  start_ids: jax.Array,
  *,
  beam_size: int,
  max_decode_steps: int,
  eos_id: int | Sequence[int],
  length_norm_alpha: float,
  min_decode_steps: int = 0,
  tokens_per_beam: int | None = None,
  output_id_offset: int = 0,
) -> NestedMap:
  """Beam search from one start token per row, in Pax's SequenceModel output form.

  `praxis.beam_search` is a pure function of a cache pytree, not Pax's module-driven loop, so
  this adapter prefills and steps a pure copy of the encoder-decoder. `model` is the bound
  encoder-decoder; prefill_fn(mdl) runs it (mutable DECODE_CACHE) on the
  batch with the start tokens `start_ids` [B] as a one-position target. The search itself is
  `praxis.beam_search.beam_search_over_fn` over a pure copy of the model.

  Returns NestedMap(output_ids [B, K, 1 + max_decode_steps] (generated tokens from position 0,
  as Pax's, whose start token is padding), scores, decode_lengths (generated tokens, EOS
  included), prefix_lengths (0), original_lengths (0) [B, K], logprobs [B, K, 1 + steps],
  prefix_ids [B, 1, 1]).
  """
  mdl = model.clone(parent=None)
  skip = (DECODE_CACHE, base_layer.AUX_LOSS, base_layer.SUMMARIES)
  weights = {k: v for k, v in model.variables.items() if k not in skip}

  def prefill(m):
    prefill_fn(m)
    m.transform_decode_state(decoder_utils.pad_state_fn(max_decode_steps))

  _, cache = mdl.apply(weights, method=prefill, mutable=[DECODE_CACHE])

  def extend_fn(state, ids, time_step):
    # The model's own counter (its cache's time_step) equals time_step: both start at 0 and
    # advance once per call.
    del time_step
    out, updated = mdl.apply(
      {**weights, DECODE_CACHE: state}, ids, method="extend_step", mutable=[DECODE_CACHE]
    )
    return updated[DECODE_CACHE], out.logits

  batch = start_ids.shape[0]
  buffer = jnp.zeros((batch, 1 + max_decode_steps), jnp.int32).at[:, 0].set(start_ids)
  result = beam_search_lib.beam_search_over_fn(
    extend_fn,
    cache[DECODE_CACHE],
    buffer,
    jnp.ones([batch], jnp.int32),
    beam_size=beam_size,
    max_decode_steps=max_decode_steps,
    eos_id=eos_id,
    length_norm_alpha=length_norm_alpha,
    min_decode_steps=min_decode_steps,
    tokens_per_beam=tokens_per_beam,
    output_id_offset=output_id_offset,
  )

  def drop_start(x):  # [B, K, S] -> the same without position 0, zero-padded at the end
    return jnp.pad(x[:, :, 1:], [(0, 0), (0, 0), (0, 1)])

  zeros = jnp.zeros((batch, beam_size), jnp.int32)
  return NestedMap(
    output_ids=drop_start(result.output_ids),
    logprobs=drop_start(result.logprobs),
    scores=result.scores,
    decode_lengths=result.decode_lengths - 1,
    prefix_lengths=zeros,
    original_lengths=zeros,
    prefix_ids=jnp.zeros((batch, 1, 1), jnp.int32),
  )
