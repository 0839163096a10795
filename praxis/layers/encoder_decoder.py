"""Pax's TransformerEncoderDecoder: a Transformer encoder, a causal decoder and a shared softmax.

    inputs [B, S] ──embedding (+ position)──> encoder stack ──encoder_ln──> encoder output [B, S, D]
    targets [B, T] ──embedding (+ position)──> decoder stack (cross-attends to the encoder output
        when its layers have use_cross_attention) ──decoder_ln──> softmax ──> logits [B, T, V]

Pax users reach it as `praxis.layers.transformer_models.TransformerEncoderDecoder` (re-exported
there). Its fields, children and variable tree are Pax's: `softmax` (a SharedEmbeddingSoftmax by
default, which also embeds the source and target ids), `position_emb` (shared; or separate
`encoder_position_emb` / `decoder_position_emb`), `encoder`, `encoder_ln`, `decoder`,
`decoder_ln`, and the optional `encoder_embedding_lookup`, `decoder_embedding_lookup`,
`encoder_ngrammer`, `decoder_ngrammer`. As in Pax, this layer does not switch on the decoder's
cross-attention: set `use_cross_attention=True` on `decoder_stacked_transformer_tpl` for a decoder
that reads the encoder.

`encoder_post_attention_ngrammer_tpls` / `decoder_post_attention_ngrammer_tpls` are checked (one
per layer) and otherwise have no effect, as in Pax: Pax sets them on the stack's template after
the stack has been built from a copy of it, so Pax's encoder-decoder never runs them and its
variable tree (and so its checkpoints) has no post-attention ngrammer. Use TransformerLm's
`post_attention_ngrammer_tpls` for a working post-attention VQNgrammer.

Decoding (Pax's protocol): `__call__` with mutable=[DECODE_CACHE] is the prefill. It caches the
decoder self-attention keys/values of the given targets, the encoder's keys/values in every
cross-attention, `input_paddings` and the decode counter `time_step` (= start_time_step).
`transform_decode_state(fn)` then reshapes the cache (pad its time dim to the output length,
repeat rows for samples or beams, reorder beams), and `extend_step(targets [B])` feeds one target
position and returns the next position's NestedMap(logits, log_probs, probs), each [B, V].

Shape letters: B batch, S source length, T target length, D model dims, V vocabulary.
"""

from __future__ import annotations

from typing import Any, Sequence

from absl import logging
import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import embedding_softmax
from praxis.layers import normalizations
from praxis.layers import pipeline
from praxis.layers import transformers

Config = base_hyperparams.Config
NestedMap = pytypes.NestedMap
template_field = base_hyperparams.template_field
DECODE_CACHE = base_layer.DECODE_CACHE


def _callable(cfg: Config) -> Any:
  return cfg.__fn_or_cls__


def _is_a(cfg: Config, cls: type) -> bool:
  target = _callable(cfg)
  return isinstance(target, type) and issubclass(target, cls)


def _inner_stack(cfg: Config) -> Config:
  """The StackedTransformer config inside a stack config (itself, `block` or `pipeline_stage`)."""
  if _is_a(cfg, transformers.StackedTransformerRepeated):
    return cfg.block
  if _is_a(cfg, pipeline.PipelinedTransformer):
    return cfg.pipeline_stage
  if _is_a(cfg, transformers.StackedTransformer):
    return cfg
  raise ValueError(
    f"TransformerEncoderDecoder: {_callable(cfg)} is not a supported stack; use "
    "StackedTransformer, StackedTransformerRepeated or PipelinedTransformer."
  )


class TransformerEncoderDecoder(base_layer.BaseLayer):
  """Pax's encoder-decoder Transformer (module docstring for the layout and decoding).

  Attributes (Pax's):
    position_emb_tpl: position embedding shared by encoder and decoder; None for separate ones
      (then set encoder_position_emb_tpl / decoder_position_emb_tpl, or none at all).
    encoder_position_emb_tpl: the encoder's own position embedding (position_emb_tpl None).
    encoder_stacked_transformer_tpl: the encoder stack; must be unmasked (bidirectional).
    encoder_ngrammer_tpl: Ngrammer / VQNgrammer on the source embeddings.
    encoder_post_attention_ngrammer_tpls: one ngrammer per encoder layer; checked, then unused
      (Pax's behaviour; module docstring).
    encoder_embedding_tpl: the source ids' own embedding; None shares the target embedding.
    decoder_position_emb_tpl: the decoder's own position embedding (position_emb_tpl None).
    decoder_stacked_transformer_tpl: the decoder stack; must be masked (causal).
    decoder_ngrammer_tpl: Ngrammer / VQNgrammer on the target embeddings.
    decoder_post_attention_ngrammer_tpls: one ngrammer per decoder layer; checked, then unused
      (Pax's behaviour; module docstring).
    decoder_embedding_tpl: the target ids' own embedding; None embeds with the softmax weight.
    model_dims: D, set on the stacks, norms, position embeddings and softmax.
    softmax_tpl: output layer (SharedEmbeddingSoftmax ties it to the embeddings).
    packed_input: rows hold several segments (set on both stacks).
    encoder_ln_tpl: norm of the encoder output.
    decoder_ln_tpl: norm of the decoder output (None for none).
  """

  position_emb_tpl: Config | None = template_field(embedding_softmax.PositionalEmbedding)
  encoder_position_emb_tpl: Config | None = template_field(None)
  encoder_stacked_transformer_tpl: Config | None = template_field(None)
  encoder_ngrammer_tpl: Config | None = template_field(None)
  encoder_post_attention_ngrammer_tpls: Sequence[Config] | None = template_field(None)
  encoder_embedding_tpl: Config | None = template_field(None)
  decoder_position_emb_tpl: Config | None = template_field(None)
  decoder_stacked_transformer_tpl: Config | None = template_field(None)
  decoder_ngrammer_tpl: Config | None = template_field(None)
  decoder_post_attention_ngrammer_tpls: Sequence[Config] | None = template_field(None)
  decoder_embedding_tpl: Config | None = template_field(None)
  model_dims: int = 0
  softmax_tpl: Config = template_field(embedding_softmax.SharedEmbeddingSoftmax)
  packed_input: bool = False
  encoder_ln_tpl: Config = template_field(normalizations.LayerNorm)
  decoder_ln_tpl: Config = template_field(normalizations.LayerNorm)

  # -- construction ------------------------------------------------------------------------------

  def _clone_layer_params(self, layer_tpl: Config) -> Config:
    """Pax's hook for subclasses that switch a child's class (e.g. a streaming version)."""
    return layer_tpl.clone()

  def _validate_encoder_mask_self_attention(self, mask_self_attention: bool) -> None:
    if mask_self_attention:
      raise ValueError(
        "Encoder attention should be un-masked in TransformerEncoderDecoder: set "
        "mask_self_attention=False on encoder_stacked_transformer_tpl."
      )

  def _validate_decoder_mask_self_attention(self, mask_self_attention: bool) -> None:
    if not mask_self_attention:
      raise ValueError(
        "Decoder attention should be masked in TransformerEncoderDecoder: set "
        "mask_self_attention=True on decoder_stacked_transformer_tpl."
      )

  def _side_children(self, side: str) -> None:
    """The encoder's or decoder's children: position embedding, stack, embedding, ngrammer, norm."""

    def tpl(field: str) -> Any:
      return getattr(self, f"{side}_{field}")

    if tpl("position_emb_tpl") is not None:
      self._position_emb_child(f"{side}_position_emb", tpl("position_emb_tpl"))
    self._stack_child(
      side,
      tpl("stacked_transformer_tpl"),
      tpl("post_attention_ngrammer_tpls"),
      encoder=side == "encoder",
    )
    if tpl("embedding_tpl") is not None:
      self._embedding_child(f"{side}_embedding_lookup", tpl("embedding_tpl"))
    if tpl("ngrammer_tpl") is not None:
      self.create_child(f"{side}_ngrammer", tpl("ngrammer_tpl"))
    if tpl("ln_tpl") is not None:
      self.create_child(f"{side}_ln", tpl("ln_tpl").clone().set(dim=self.model_dims))

  def _position_emb_child(self, name: str, tpl: Config) -> None:
    tpl = self._clone_layer_params(tpl)
    if tpl.embedding_dims not in (0, self.model_dims):
      raise ValueError(
        f"TransformerEncoderDecoder.{name}: embedding_dims {tpl.embedding_dims} differs from "
        f"model_dims {self.model_dims}; leave it 0."
      )
    tpl.embedding_dims = self.model_dims
    self.create_child(name, tpl)

  def _stack_child(self, name: str, tpl: Config | None, ngrammer_tpls, encoder: bool) -> None:
    if tpl is None:
      raise ValueError(
        f"{'Encoder' if encoder else 'Decoder'} stack must be specified for "
        f"TransformerEncoderDecoder: set {name}_stacked_transformer_tpl."
      )
    params = self._clone_layer_params(tpl)
    inner = _inner_stack(params)
    if inner.model_dims not in (0, self.model_dims):
      raise ValueError(
        f"TransformerEncoderDecoder: the {name} stack's model_dims {inner.model_dims} differs "
        f"from model_dims {self.model_dims}; leave it 0 or equal."
      )
    inner.model_dims = self.model_dims
    inner.packed_input = self.packed_input
    if encoder:
      self._validate_encoder_mask_self_attention(inner.mask_self_attention)
      # The encoder runs once per decode: its self-attention keeps no cache.
      layer_tpls = inner.transformer_layer_params_tpl
      for layer_tpl in layer_tpls if isinstance(layer_tpls, (list, tuple)) else [layer_tpls]:
        layer_tpl.tr_atten_tpl.decode_cache = False
    else:
      self._validate_decoder_mask_self_attention(inner.mask_self_attention)
    if ngrammer_tpls is not None:
      if len(ngrammer_tpls) != inner.num_layers:
        raise ValueError(
          f"The length of {name}_post_attention_ngrammer_tpls ({len(ngrammer_tpls)}) must match "
          f"the number of {name} layers ({inner.num_layers})."
        )
      # Pax assigns them to the stack template only after building the stack, so they never
      # take effect; keeping that keeps Pax's variable tree (module docstring).
      logging.warning(
        "TransformerEncoderDecoder.%s_post_attention_ngrammer_tpls has no effect (as in Pax); "
        "use TransformerLm.post_attention_ngrammer_tpls for a post-attention ngrammer.",
        name,
      )
    self.create_child(name, params)

  def _embedding_child(self, name: str, tpl: Config) -> None:
    params = tpl.clone()
    if params.input_dims not in (0, self.model_dims):
      raise ValueError(
        f"TransformerEncoderDecoder.{name}: input_dims {params.input_dims} differs from "
        f"model_dims {self.model_dims}; leave it 0."
      )
    params.input_dims = self.model_dims
    self.create_child(name, params)

  def setup(self) -> None:
    if self.model_dims <= 0:
      raise ValueError("TransformerEncoderDecoder needs a positive model_dims.")
    if self.position_emb_tpl is not None:
      if self.encoder_position_emb_tpl is not None or self.decoder_position_emb_tpl is not None:
        raise ValueError(
          "TransformerEncoderDecoder: separate encoder/decoder position embeddings must not be "
          "set when the shared position_emb_tpl is; set position_emb_tpl=None to use them."
        )
      self._position_emb_child("position_emb", self.position_emb_tpl)
    for side in ("encoder", "decoder"):
      self._side_children(side)
    softmax = self.softmax_tpl.clone()
    if softmax.input_dims not in (0, self.model_dims):
      raise ValueError(
        f"TransformerEncoderDecoder.softmax_tpl: input_dims {softmax.input_dims} differs from "
        f"model_dims {self.model_dims}; leave it 0."
      )
    softmax.input_dims = self.model_dims
    self.create_child("softmax", softmax)

  # -- pieces ------------------------------------------------------------------------------------

  def _source_emb(self, inputs: jax.Array) -> jax.Array:
    """Source ids [B, S] -> [B, S, D]: own table, else the decoder's, else the softmax's."""
    if self.encoder_embedding_tpl is not None:
      return self.encoder_embedding_lookup.emb_lookup(inputs)
    return self._target_emb(inputs)

  def _target_emb(self, targets: jax.Array) -> jax.Array:
    if self.decoder_embedding_tpl is not None:
      return self.decoder_embedding_lookup.emb_lookup(targets)
    return self.softmax.emb_lookup(targets)

  def _add_position_emb(self, emb: jax.Array, position: jax.Array, decoder: bool) -> jax.Array:
    """emb [B, L, D] plus the (shared or own) position embedding of position [B, L]."""
    own = self.decoder_position_emb_tpl if decoder else self.encoder_position_emb_tpl
    if self.position_emb_tpl is not None:
      layer = self.position_emb
    elif own is not None:
      layer = self.decoder_position_emb if decoder else self.encoder_position_emb
    else:
      return emb
    return emb + layer(seq_length=emb.shape[1], position=position).astype(emb.dtype)

  def _decoder_norm(self, x: jax.Array) -> jax.Array:
    return x if self.decoder_ln_tpl is None else self.decoder_ln(x)

  # -- forward -----------------------------------------------------------------------------------

  def encode(
    self,
    inputs: jax.Array,
    input_paddings: jax.Array,
    input_segment_ids: jax.Array | None = None,
    input_segment_pos: jax.Array | None = None,
    input_segment_mask: jax.Array | None = None,
  ) -> jax.Array:
    """Source ids [B, S] with paddings [B, S] -> the normed encoder output [B, S, D].

    Without segment ids (unpacked), the paddings are folded in as segment 0, as Pax does.
    """
    batch, length = inputs.shape[:2]
    emb = self._source_emb(inputs)  # [B, S, D]
    if input_segment_ids is None:
      if input_segment_pos is not None:
        raise ValueError("TransformerEncoderDecoder.encode: input_segment_pos needs segment ids.")
      input_segment_ids = jnp.asarray(1 - input_paddings, jnp.int32)
      input_segment_pos = jnp.tile(jnp.arange(length, dtype=jnp.int32)[None, :], [batch, 1])
    if self.encoder_ngrammer_tpl is not None:
      emb = self.encoder_ngrammer(
        input_ids=inputs,
        input_embs=emb,
        paddings=input_paddings,
        segment_pos=input_segment_pos,
      )
    emb = self._add_position_emb(emb, input_segment_pos, decoder=False)
    if input_segment_mask is None:
      input_segment_mask = attentions.segment_mask(input_segment_ids, dtype=emb.dtype)
    output = self.encoder(
      emb, input_paddings, segment_mask=input_segment_mask, segment_pos=input_segment_pos
    )  # [B, S, D]
    return output if self.encoder_ln_tpl is None else self.encoder_ln(output)

  def compute_loss(self, activations: jax.Array, labels: NestedMap | None = None) -> NestedMap:
    """Decoder output [B, T, D] -> the softmax's NestedMap.

    Without labels: logits, log_probs and probs [B, T, V] (normalised in float32). With labels
    (class_ids and / or class_probabilities, class_weights [B, T]): the softmax's cross-entropy
    outputs plus per_token_xent [B, T], per_sequence_xent [B], aux_loss and total_loss.
    """
    if labels is None:
      logits = self.softmax.get_logits(activations)
      out = NestedMap(logits=logits)
      as_f32 = logits.astype(jnp.float32)
      out.log_probs = jax.nn.log_softmax(as_f32).astype(logits.dtype)
      out.probs = jax.nn.softmax(as_f32).astype(logits.dtype)
      return out
    kwargs = {}
    if "class_ids" in labels:
      kwargs["class_ids"] = labels.class_ids[:, :, None]
    if "class_probabilities" in labels:
      kwargs["class_probabilities"] = labels.class_probabilities
    out = self.softmax(activations, labels.class_weights[:, :, None], **kwargs)
    out.per_token_xent = out.per_example_xent * labels.class_weights.astype(jnp.float32)
    out.per_sequence_xent = jnp.sum(out.per_token_xent, -1, dtype=jnp.float32)  # [B]
    aux_loss, aux_weight = base_layer.aux_loss_totals(self.variables)
    out.aux_loss = aux_loss
    out.aux_loss_weight = aux_weight
    self.add_summary("total_aux_loss", aux_loss)
    self.add_summary("total_aux_loss_weight", aux_weight)
    out.total_loss = out.avg_xent + aux_loss
    return out

  def fprop_with_encoder_output(
    self,
    encoder_output: jax.Array,
    input_paddings: jax.Array,
    targets: jax.Array,
    target_paddings: jax.Array,
    labels: NestedMap | None = None,
    input_segment_ids: jax.Array | None = None,
    input_segment_pos: jax.Array | None = None,
    target_segment_ids: jax.Array | None = None,
    target_segment_pos: jax.Array | None = None,
    target_segment_mask: jax.Array | None = None,
    cross_segment_mask: jax.Array | None = None,
    start_time_step: int = 0,
  ) -> NestedMap:
    """The decoder over targets [B, T] given the encoder output [B, S, D]; see compute_loss."""
    batch, length = targets.shape[:2]
    emb = self._target_emb(targets)  # [B, T, D]
    if self.decoder_ngrammer_tpl is not None:
      emb = self.decoder_ngrammer(
        input_ids=targets,
        input_embs=emb,
        paddings=target_paddings,
        segment_pos=target_segment_pos,
      )
    if input_segment_ids is None:
      input_segment_ids = jnp.asarray(1 - input_paddings, jnp.int32)
    if target_segment_ids is None:
      target_segment_ids = jnp.asarray(1 - target_paddings, jnp.int32)
      target_segment_pos = jnp.tile(jnp.arange(length, dtype=jnp.int32)[None, :], [batch, 1])
    emb = self._add_position_emb(emb, target_segment_pos, decoder=True)
    if cross_segment_mask is None:
      cross_segment_mask = attentions.segment_mask(
        target_segment_ids, input_segment_ids, emb.dtype
      )  # [B, 1, T, S]
    if target_segment_mask is None:
      target_segment_mask = attentions.causal_segment_mask(target_segment_ids, emb.dtype)
    if self.is_mutable_collection(DECODE_CACHE) and not self.is_initializing():
      self.update_decode_state("time_step", jnp.asarray(start_time_step, jnp.int32))
      self.update_decode_state("input_paddings", input_paddings)
    output = self.decoder(
      emb,
      target_paddings,
      target_segment_mask,
      cross_inputs=encoder_output,
      cross_paddings=input_paddings,
      cross_segment_mask=cross_segment_mask,
      segment_pos=target_segment_pos,
    )  # [B, T, D]
    return self.compute_loss(self._decoder_norm(output), labels)

  def __call__(
    self,
    inputs: jax.Array,
    input_paddings: jax.Array,
    targets: jax.Array,
    target_paddings: jax.Array,
    labels: NestedMap | None = None,
    input_segment_ids: jax.Array | None = None,
    input_segment_pos: jax.Array | None = None,
    input_segment_mask: jax.Array | None = None,
    target_segment_ids: jax.Array | None = None,
    target_segment_pos: jax.Array | None = None,
    target_segment_mask: jax.Array | None = None,
    cross_segment_mask: jax.Array | None = None,
    start_time_step: int = 0,
  ) -> NestedMap:
    """Encodes inputs [B, S], decodes targets [B, T]; returns compute_loss's NestedMap.

    Masks and segments are Pax's: the segment masks default to ones built from the segment ids
    (the paddings folded in as segment 0 when unpacked); start_time_step is where the decode
    counter starts when applied with a mutable DECODE_CACHE.
    """
    encoder_output = self.encode(
      inputs, input_paddings, input_segment_ids, input_segment_pos, input_segment_mask
    )
    return self.fprop_with_encoder_output(
      encoder_output=encoder_output,
      input_paddings=input_paddings,
      targets=targets,
      target_paddings=target_paddings,
      labels=labels,
      input_segment_ids=input_segment_ids,
      input_segment_pos=input_segment_pos,
      target_segment_ids=target_segment_ids,
      target_segment_pos=target_segment_pos,
      target_segment_mask=target_segment_mask,
      cross_segment_mask=cross_segment_mask,
      start_time_step=start_time_step,
    )

  # -- decoding ----------------------------------------------------------------------------------

  def transform_decode_state(self, transform_fn: Any) -> None:
    """Applies Pax's transform_fn(x, batch_dim, time_dim) to the decoder's self-attention cache.

    The decoder StackedTransformer transforms all of its state, including (ours beside Pax) the
    prefill's target paddings [B, T] it caches so that extend_step keeps hiding padded positions.
    """
    if not _is_a(self.decoder_stacked_transformer_tpl, transformers.StackedTransformer):
      raise NotImplementedError(
        "TransformerEncoderDecoder decodes with a StackedTransformer decoder only: this praxis' "
        f"{_callable(self.decoder_stacked_transformer_tpl).__name__} cannot transform its decode "
        "cache (pad / repeat / reorder). Train with it, and decode with a StackedTransformer of "
        "the same layers."
      )
    self.decoder.transform_decode_state(transform_fn)

  def init_states(self, inputs: jax.Array, input_paddings: jax.Array, *args, **kwargs) -> None:
    del inputs, input_paddings, args, kwargs
    raise NotImplementedError(
      f"{type(self).__name__}.init_states: fill the cache with __call__ (mutable "
      "DECODE_CACHE), as Pax does."
    )

  def extend_step(self, targets: jax.Array) -> NestedMap:
    """Feeds target ids [B] (or [B, P], the last column fed) at the cache's time_step.

    B may be a multiple of the prefill's batch (samples or beams of each row): the encoder's
    cached keys/values and paddings are shared by the rows' copies. Returns NestedMap(logits,
    log_probs, probs), each [B, V], and advances time_step.
    """
    input_paddings = self.get_decode_state("input_paddings")  # [b, S]
    if targets.ndim == 1:
      targets = targets[:, None]  # [B, P]
    emb = self._target_emb(targets)  # [B, P, D]
    time_step = self.get_decode_state("time_step")
    if self.decoder_ngrammer_tpl is not None:
      emb = self.decoder_ngrammer(targets, emb, paddings=None, segment_pos=None)
    emb = emb[:, -1:, :]  # [B, 1, D]
    position = jnp.zeros((targets.shape[0], 1), jnp.float32) + time_step  # [B, 1]
    emb = self._add_position_emb(emb, position, decoder=True)
    output = self.decoder.extend_step(
      emb[:, 0, :], time_step=time_step, cross_paddings=input_paddings
    )  # [B, D]
    self.update_decode_state("time_step", time_step + 1)
    return self.compute_loss(self._decoder_norm(output))
