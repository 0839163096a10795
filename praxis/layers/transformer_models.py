"""TransformerLm: a decoder-only Transformer language model built from praxis layers.

    ids [B, T] ──embedding──> [B, T, D] (+ position embedding) ──stacked transformer──>
    final LayerNorm ──softmax──> logits [B, T, V] (and the cross-entropy when labels are given)

The pieces are templates, as in Pax:
  softmax_tpl: SharedEmbeddingSoftmax by default, whose one [V, D] weight both embeds the ids and
    produces the logits (tied embeddings). For untied embeddings set `separate_embedding_tpl` to an
    Embedding and `softmax_tpl` to a FullSoftmax (`TransformerLm.untied_config` does both).
  position_emb_tpl: sinusoidal PositionalEmbedding by default, TrainablePositionalEmbedding for a
    learned table, or None when the attention layers rotate queries and keys (rotary).
  stacked_transformer_tpl: StackedTransformer, or StackedTransformerRepeated (nn.scan) whose
    `block` is a StackedTransformer.
  final_ln_tpl: LayerNorm after the last layer (pre-norm stacks need it).
This layer sets the sizes it knows on its children (model_dims, vocab_size, packed_input), so a
config states them once.

Decoding. Applied with `mutable=["decoder_cache"]`, `__call__` fills the stack's key/value cache
for all T positions (the prefill); `extend_step(ids [B], time_step=t)` then feeds position t of
every row and returns the logits for position t + 1. LanguageModel.decode drives both.

Dropout in the stack runs only with `deterministic=False` (and a "dropout" rng).

Shape letters: B batch, T length, D model dims, V vocabulary.
"""

from __future__ import annotations

import enum

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


class LanguageModelType(str, enum.Enum):
  """Which tokens a position sees (Pax's): the past, or everything."""

  CAUSAL = "causal"
  PREFIX = "prefix"  # bidirectional inside the prompt, causal after it
  BIDIRECTIONAL = "bidirectional"


class TransformerLm(base_layer.BaseLayer):
  """Causal Transformer LM: embedding, position embedding, stacked transformer, LN, softmax.

  Children (Pax's names): `softmax`, `embedding_lookup` (when untied), `position_emb` (unless
  None), `transformer`, `final_ln`.

  Attributes:
    model_dims: D, set on the embedding, softmax, position embedding and stack.
    vocab_size: V, set on the embedding and softmax.
    packed_input: rows hold several segments (segment_ids / segment_pos; without them each row
      is one segment, padding folded in as segment 0); set on the stack.
    model_type: CAUSAL (a position sees itself and the past), BIDIRECTIONAL (every position of
      its segment) or PREFIX (causal where the call's causal_attention_mask is 1, bidirectional
      among the 0 positions: the prompt of an input -> target example). Sets the stack's
      mask_self_attention, as Pax. Only CAUSAL LMs decode.
    record_activations_in_xent_output: also return the final activations [B, T, D] as
      `activations` (Pax's; for a pooler on top).
    ngrammer_tpl: Pax's Ngrammer / VQNgrammer (praxis.layers.ngrammer), mixing hashed bi-gram
      embeddings into the token embeddings before the position embedding.
    post_attention_ngrammer_tpls: Pax's per-layer VQNgrammer inside each self-attention (one
      entry per layer; set on the stack's ngrammer_tpls).
    softmax_tpl: output layer; SharedEmbeddingSoftmax (tied) or FullSoftmax (with an embedding).
    separate_embedding_tpl: Embedding for untied embeddings; None means the softmax embeds.
    position_emb_tpl: PositionalEmbedding, TrainablePositionalEmbedding, or None (no absolute
      position embedding, e.g. with rotary attention).
    stacked_transformer_tpl: StackedTransformer or StackedTransformerRepeated.
    final_ln_tpl: normalisation after the stack; None for none.
  """

  model_dims: int = 0
  vocab_size: int = 0
  packed_input: bool = False
  model_type: LanguageModelType = LanguageModelType.CAUSAL
  record_activations_in_xent_output: bool = False
  ngrammer_tpl: Config | None = template_field(None)
  post_attention_ngrammer_tpls: list[Config] | None = template_field(None)
  softmax_tpl: Config = template_field(embedding_softmax.SharedEmbeddingSoftmax)
  separate_embedding_tpl: Config | None = template_field(None)
  position_emb_tpl: Config | None = template_field(embedding_softmax.PositionalEmbedding)
  stacked_transformer_tpl: Config = template_field(transformers.StackedTransformer)
  final_ln_tpl: Config | None = template_field(normalizations.LayerNorm)
  # Pax's: return the final activations [B, T, D] instead of the softmax's outputs.
  skip_compute_loss: bool = False

  @classmethod
  def untied_config(cls, **kwargs) -> Config:
    """A config with a separate input Embedding and a FullSoftmax (untied embeddings)."""
    cfg = cls.HParams.config(**kwargs)
    cfg.separate_embedding_tpl = embedding_softmax.Embedding.HParams.config()
    cfg.softmax_tpl = embedding_softmax.FullSoftmax.HParams.config()
    return cfg

  # Pax's config-level sharding (mesh-axis mappings in the templates): transformer_sharding's.
  @classmethod
  def set_sharding_params_v1(cls, lm_p, **kwargs) -> Config:
    from praxis.layers import transformer_sharding  # noqa: PLC0415 (it imports the layers)

    return transformer_sharding.set_sharding_params_v1(lm_p, **kwargs)

  @classmethod
  def set_custom_sharding_params(cls, lm_p, **kwargs) -> Config:
    from praxis.layers import transformer_sharding  # noqa: PLC0415 (it imports the layers)

    return transformer_sharding.set_custom_sharding_params(lm_p, **kwargs)

  @property
  def tied(self) -> bool:
    return self.separate_embedding_tpl is None

  def setup(self):
    if self.model_dims <= 0 or self.vocab_size <= 0:
      raise ValueError(
        f"TransformerLm needs positive model_dims and vocab_size, got "
        f"{self.model_dims} and {self.vocab_size}; set them on the config."
      )
    self.softmax = self.create_child(
      self.softmax_tpl, input_dims=self.model_dims, num_classes=self.vocab_size
    )
    if not self.tied:
      self.embedding_lookup = self.create_child(
        self.separate_embedding_tpl, num_classes=self.vocab_size, input_dims=self.model_dims
      )
    elif not hasattr(self.softmax, "emb_lookup"):
      raise ValueError(
        f"TransformerLm: softmax_tpl {type(self.softmax).__name__} cannot embed "
        "ids (no emb_lookup); use SharedEmbeddingSoftmax, or set "
        "separate_embedding_tpl to an Embedding (see TransformerLm.untied_config)."
      )
    if self.ngrammer_tpl is not None:
      self.create_child("ngrammer", self.ngrammer_tpl)
    if self.position_emb_tpl is not None:
      self.position_emb = self.create_child(self.position_emb_tpl, embedding_dims=self.model_dims)
    self.transformer = self.create_child(self._stack_template())
    if self.final_ln_tpl is not None:
      self.final_ln = self.create_child(self.final_ln_tpl, dim=self.model_dims)

  def _stack_template(self) -> Config:
    """The stack's template with this model's sizes set (inside `block` for a repeated stack,
    inside `pipeline_stage` for a pipelined one)."""
    cfg = self.stacked_transformer_tpl.clone()
    inner = cfg.pipeline_stage if _is_a(cfg, pipeline.PipelinedTransformer) else cfg
    inner = inner.block if _is_repeated(inner) else inner
    inner.model_dims = self.model_dims
    inner.packed_input = self.packed_input
    # As Pax: the model type decides the stack's self-attention mask (PREFIX passes its own).
    inner.mask_self_attention = self.model_type == LanguageModelType.CAUSAL
    if self.post_attention_ngrammer_tpls is not None:
      if len(self.post_attention_ngrammer_tpls) != inner.num_layers:
        raise ValueError(
          f"TransformerLm: post_attention_ngrammer_tpls has "
          f"{len(self.post_attention_ngrammer_tpls)} entries for {inner.num_layers} layers; "
          "give one (or None) per layer."
        )
      inner.ngrammer_tpls = list(self.post_attention_ngrammer_tpls)
    return cfg

  # -- pieces ------------------------------------------------------------------------------------

  def _emb_lookup(self, ids: jax.Array) -> jax.Array:
    """ids [B, T] -> token embeddings [B, T, D]."""
    if self.tied:
      return self.softmax.emb_lookup(ids)  # [B, T, D]
    return self.embedding_lookup(ids)  # [B, T, D]

  def _ngrammer_emb_var(self) -> jax.Array | None:
    """The [V, D] token embedding table (VQNgrammer's full cache updates read it)."""
    if not self.tied:
      return self.embedding_lookup.theta.emb_var
    if hasattr(self.softmax, "logits_ffn"):
      return jnp.transpose(self.softmax.logits_ffn.linear.theta.w)  # [V, D]
    return None

  def _embed(self, emb: jax.Array, position: jax.Array) -> jax.Array:
    """Token embeddings [B, T, D] plus the position embedding of positions [B, T]."""
    if self.position_emb_tpl is not None:
      emb = emb + self.position_emb(position=position).astype(emb.dtype)  # [B, T, D]
    return self.maybe_shard(emb.astype(self.compute_dtype), ("batch", "length", "embed"))

  def _final_norm(self, x: jax.Array) -> jax.Array:
    return x if self.final_ln_tpl is None else self.final_ln(x)

  # -- forward -----------------------------------------------------------------------------------

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array,
    labels: NestedMap | None = None,
    segment_ids: jax.Array | None = None,
    segment_pos: jax.Array | None = None,
    deterministic: bool = True,
    causal_attention_mask: jax.Array | None = None,
    start_time_step: int = 0,
  ) -> NestedMap:
    """Runs the model on ids `inputs` [B, T] with `paddings` [B, T] (1 = padded).

    Args:
      inputs: token ids [B, T].
      paddings: [B, T], 1.0 at padded positions.
      labels: NestedMap(class_ids [B, T], class_weights [B, T]) of the next tokens; without it
        only logits are computed.
      segment_ids: [B, T] segment of each token (packed inputs); None means one segment.
      segment_pos: [B, T] position inside its segment; None means 0..T-1.
      deterministic: False enables dropout (needs a "dropout" rng).
      causal_attention_mask: [B, T], PREFIX only: 1 where causality applies (the target), 0 on
        the prompt, whose positions see each other.
      start_time_step: where the cache's decode counter starts (Pax's; the prompt length when
        decoding continues after a prompt).

    Returns:
      The softmax's NestedMap (logits, log_probs, per_example_xent, per_example_argmax,
      total_xent, total_weight, avg_xent, ...) with labels, else NestedMap(logits [B, T, V]).
    """
    batch, length = inputs.shape
    if self.packed_input and (segment_ids is None) != (segment_pos is None):
      raise ValueError(
        "TransformerLm(packed_input=True) needs both segment_ids and segment_pos, or neither "
        "(then, as Pax, each row is one segment and its padding is folded in as segment 0)."
      )
    if self.packed_input and segment_ids is None:
      segment_ids = (1 - paddings).astype(jnp.int32)
    if segment_pos is None:
      segment_pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
    emb = self._emb_lookup(inputs)  # [B, T, D]
    if self.ngrammer_tpl is not None:
      emb = self.ngrammer(
        input_ids=inputs,
        input_embs=emb,
        paddings=paddings,
        segment_pos=segment_pos,
        emb_var=self._ngrammer_emb_var(),
      )  # [B, T, D]
    emb = self._embed(emb, segment_pos)  # [B, T, D]
    # segment_pos also feeds rotary attention, when the stack's attention uses it.
    stack_ids = segment_ids if self.packed_input else None
    segment_mask = None
    if self.model_type == LanguageModelType.PREFIX:
      if causal_attention_mask is None:
        raise ValueError(
          "TransformerLm(model_type=PREFIX) needs causal_attention_mask [B, T] (0 on the prompt, "
          "1 on the target); LanguageModel passes 1 - inputs_indicator."
        )
      if stack_ids is None:  # As Pax: paddings folded in as segment 0.
        stack_ids = (1.0 - paddings).astype(jnp.int32)
      segment_mask = attentions.causal_segment_mask(
        stack_ids, jnp.float32, causal_attention_mask
      )  # [B, 1, T, T]
    output = self.transformer(
      emb,
      paddings,
      segment_mask=segment_mask,
      segment_ids=stack_ids,
      segment_pos=segment_pos,
      deterministic=deterministic,
    )  # [B, T, D]
    output = self._final_norm(output)
    if self.is_mutable_collection(base_layer.DECODE_CACHE) and not self.is_initializing():
      # Pax's decode counter: extend_step without a time_step continues from start_time_step.
      self.put_variable(
        base_layer.DECODE_CACHE, "time_step", jnp.asarray(start_time_step, jnp.int32)
      )
      if self.ngrammer_tpl is not None:
        # The bi-gram partner of the first decoded token: an empty (id 0, zero embedding) slot,
        # which the ngrammer pairs as PAD, as a forward pass does at position 0.
        self.update_decode_state("ngrammer_prefix", jnp.zeros((batch, 1), jnp.int32))
        self.update_decode_state(
          "ngrammer_prefix_emb", jnp.zeros((batch, 1, self.model_dims), emb.dtype)
        )
        self.update_decode_state("ngrammer_prefix_segment_pos", jnp.zeros((batch, 1), jnp.int32))
    if self.skip_compute_loss:
      return output  # [B, T, D]
    if labels is None:
      out = NestedMap(logits=self.softmax.get_logits(output))
    else:
      out = self.softmax(
        output,
        class_weights=labels.class_weights[..., None].astype(jnp.float32),
        class_ids=labels.class_ids[..., None],
      )
      # Pax's: the aux losses recorded so far (MoE load balance, z-loss), their summed weights,
      # and total_loss = avg_xent + aux_loss, the loss to minimise.
      out.aux_loss, out.aux_loss_weight = base_layer.aux_loss_totals(self.variables)
      out.total_loss = out.avg_xent + out.aux_loss
    if self.record_activations_in_xent_output:
      out.activations = output
    return out

  def extend_step(
    self,
    inputs: jax.Array,
    segment_pos: jax.Array | None = None,
    atten_mask: jax.Array | None = None,
    *,
    time_step: jax.Array | None = None,
  ) -> NestedMap:
    """Feeds ids `inputs` [B] (one position) or [B, L] (L positions) using the decoder cache.

    Apply with `mutable=["decoder_cache"]` after a prefill (`__call__` with the same mutable).
    The first position is `time_step` when given; otherwise, as in Pax, the cache's own
    `time_step` counter (start_time_step after the prefill), which each call advances by the
    number of positions fed.

    Args:
      inputs: [B] ids of this position, or [B, L] ids of L consecutive positions.
      segment_pos: [B] (or [B, L]) each row's positions (default the time steps for all rows).
      atten_mask: Pax's additive mask over the cache, [B, 1, S] (or [B, 1, L, S], required
        with [B, L] ids); default for one position: causal (it sees the cache up to itself).
      time_step: int scalar position, or None for the cache's counter.

    Returns:
      NestedMap(logits, log_probs, probs), each [B, V] (or [B, L, V]) for the next positions.
    """
    if inputs.ndim not in (1, 2):
      raise ValueError(f"TransformerLm.extend_step takes ids [B] or [B, L], got {inputs.shape}.")
    if self.model_type == LanguageModelType.BIDIRECTIONAL:
      raise ValueError("TransformerLm.extend_step: a BIDIRECTIONAL LM cannot decode.")
    single = inputs.ndim == 1
    ids = inputs[:, None] if single else inputs  # [B, L]
    batch, length = ids.shape
    if segment_pos is not None:
      if segment_pos.shape != inputs.shape:
        raise ValueError(
          f"TransformerLm.extend_step: segment_pos {segment_pos.shape} must have the shape of "
          f"inputs {inputs.shape}."
        )
      segment_pos = segment_pos[:, None] if single else segment_pos  # [B, L]
    counter = time_step is None
    if counter:
      if not self.has_variable(base_layer.DECODE_CACHE, "time_step"):
        raise ValueError(
          "TransformerLm.extend_step without time_step needs the cache's counter: apply "
          "__call__ with mutable=['decoder_cache'] first (the prefill)."
        )
      time_step = self.get_variable(base_layer.DECODE_CACHE, "time_step")
    time_step = jnp.asarray(time_step, jnp.int32)
    token_emb = self._emb_lookup(ids)  # [B, L, D]
    emb = self._ngrammer_step(ids, token_emb, segment_pos)  # [B, L, D]
    position = segment_pos
    if position is None:
      position = jnp.broadcast_to(time_step + jnp.arange(length, dtype=jnp.int32), (batch, length))
    emb = self._embed(emb, position)  # [B, L, D]
    if single:
      output = self.transformer.extend_step(
        emb[:, 0],
        time_step=time_step,
        segment_pos=None if segment_pos is None else segment_pos[:, 0],
        atten_mask=atten_mask,
      )[:, None]  # [B, 1, D]
    else:
      if atten_mask is None:
        raise ValueError(
          "TransformerLm.extend_step with [B, L] ids needs atten_mask [B, 1, L, S] (Pax's "
          "multi-step extend), e.g. rows time_step..time_step+L-1 of a causal mask over S."
        )
      output = self.transformer.extend_step(
        emb, time_step=time_step, segment_pos=position, atten_mask=atten_mask
      )  # [B, L, D]
    output = self._final_norm(output)
    logits = self.softmax.get_logits(output)  # [B, L, V]
    if counter:
      self.put_variable(base_layer.DECODE_CACHE, "time_step", time_step + length)
    if single:
      logits, output = logits[:, 0], output[:, 0]
    out = NestedMap(logits=logits)
    # As Pax: the normalisations in float32 for stability.
    out.log_probs = jax.nn.log_softmax(logits.astype(jnp.float32)).astype(logits.dtype)
    out.probs = jax.nn.softmax(logits.astype(jnp.float32)).astype(logits.dtype)
    if self.record_activations_in_xent_output:
      out.activations = output
    return out

  # Per-row decode states of this layer (the ngrammer's last token), without a time dim.
  _ROW_STATES = ("ngrammer_prefix", "ngrammer_prefix_emb", "ngrammer_prefix_segment_pos")

  def transform_decode_state(self, transform_fn) -> None:
    """Pax's: applies transform_fn(x, batch_dim, time_dim) to every decode state."""
    self.transformer.transform_decode_state(transform_fn)
    for name in self._ROW_STATES:
      if self.has_variable(base_layer.DECODE_CACHE, name):
        self.update_decode_state(name, transform_fn(self.get_decode_state(name), 0, -1))

  def lazy_broadcast_prefix(self, num_suffix_samples: int, suffix_length: int) -> None:
    """Pax's: the samples share the cached prefix (attention layers with lazy broadcast)."""
    self.transformer.lazy_broadcast_prefix(num_suffix_samples, suffix_length)
    for name in self._ROW_STATES:
      if self.has_variable(base_layer.DECODE_CACHE, name):
        state = jnp.repeat(self.get_decode_state(name), num_suffix_samples, axis=0)
        self.update_decode_state(name, state)

  def _ngrammer_step(
    self, ids: jax.Array, token_emb: jax.Array, segment_pos: jax.Array | None
  ) -> jax.Array:
    """The ngrammer's output [B, L, D] for L decoded positions: the previous call's last token
    (cached) is prepended so the first position gets its bi-gram partner, then dropped."""
    if self.ngrammer_tpl is None:
      return token_emb
    prev_ids = self.get_decode_state("ngrammer_prefix")  # [B, 1]
    prev_emb = self.get_decode_state("ngrammer_prefix_emb").astype(token_emb.dtype)  # [B, 1, D]
    all_pos = None
    if segment_pos is not None:
      prev_pos = self.get_decode_state("ngrammer_prefix_segment_pos")  # [B, 1]
      all_pos = jnp.concatenate([prev_pos, segment_pos], axis=1)  # [B, 1 + L]
    out = self.ngrammer(
      jnp.concatenate([prev_ids, ids], axis=1),
      jnp.concatenate([prev_emb, token_emb], axis=1),
      segment_pos=all_pos,
      check_time_step_zero=True,
    )[:, 1:]  # [B, L, D]
    self.update_decode_state("ngrammer_prefix", ids[:, -1:])
    self.update_decode_state("ngrammer_prefix_emb", token_emb[:, -1:])
    if segment_pos is not None:
      self.update_decode_state("ngrammer_prefix_segment_pos", segment_pos[:, -1:])
    return out


def _is_a(cfg: Config, cls: type) -> bool:
  target = cfg.__fn_or_cls__
  return isinstance(target, type) and issubclass(target, cls)


def _is_repeated(cfg: Config) -> bool:
  return _is_a(cfg, transformers.StackedTransformerRepeated)


# Pax's encoder-decoder lives in its own module; Pax users reach it under this module's name.
from praxis.layers.encoder_decoder import TransformerEncoderDecoder  # noqa: E402, F401
from praxis import pax_fiddle

# Pax's module-level names for the types and variable collections this module's API uses.
AUX_LOSS = base_layer.AUX_LOSS
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
