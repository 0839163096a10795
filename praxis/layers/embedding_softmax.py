"""Token embeddings, output softmaxes and position embeddings.

Layers:
  Embedding: ids [B, T] -> [B, T, D] from `emb_var[V, D]`.
  FullSoftmax: inputs [B, T, D] -> logits [B, T, V] and the cross-entropy, with optional logit
    soft-capping, label smoothing and z-loss.
  SharedEmbeddingSoftmax: a FullSoftmax whose weight is also the input embedding (tied).
  PositionalEmbedding: sinusoidal position signal [B|1, T, D].
  RotaryPositionalEmbedding: rotates query/key features by position (RoPE).
  TrainablePositionalEmbedding: a learned table `emb_var[max_seq_length, D]`.

Shape letters: B batch, T time, D model dims, V vocabulary (num_classes), N heads, H head dims.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import linears

NestedMap = pytypes.NestedMap
_LOOKUP_STYLES = ("index", "matmul")


def _lookup(table: jax.Array, ids: jax.Array, style: str, nan_for_oob: bool) -> jax.Array:
  """Rows of `table` [V, D] at `ids` [...] -> [..., D].

  "index" gathers (fast on GPU/CPU); "matmul" multiplies a one-hot (fast on TPU and exact in
  the backward pass as well). Out-of-range ids read a clipped row ("index") or zeros ("matmul"),
  or NaN rows when `nan_for_oob`, so that a bad id is noticed.
  """
  if style not in _LOOKUP_STYLES:
    raise ValueError(f"lookup_style {style!r} is not one of {_LOOKUP_STYLES}.")
  if style == "matmul":
    one_hot = jax.nn.one_hot(ids, table.shape[0], dtype=table.dtype)  # [..., V]
    embs = jnp.einsum("...v,vd->...d", one_hot, table)  # [..., D]
  else:
    embs = jnp.take(table, ids, axis=0, mode="clip")  # [..., D]
  if nan_for_oob:
    # Explicit, because a gather would read -1 as the last row, as numpy indexing does.
    oob = (ids < 0) | (ids >= table.shape[0])
    embs = jnp.where(oob[..., None], jnp.nan, embs)
  return embs


def _shard_like_sequence(layer: base_layer.BaseLayer, x: jax.Array, last_axis: str) -> jax.Array:
  """Annotates [B, T, X] activations; other ranks (a single decode step, say) are left alone."""
  return layer.maybe_shard(x, ("batch", "length", last_axis)) if x.ndim == 3 else x


class Embedding(base_layer.BaseLayer):
  """Looks up `emb_var[num_classes, input_dims]` rows: ids [...] -> [..., input_dims].

  Attributes:
    num_classes: vocabulary size V.
    input_dims: embedding size D.
    lookup_style: "index" (gather) or "matmul" (one-hot matmul).
    scale_sqrt_depth: multiply the embeddings by sqrt(D), as in "Attention is all you need".
    set_nan_for_oob_id: give NaN embeddings for ids outside [0, V) instead of clipping.
    weight_axes: logical axes of `emb_var`.
  """

  num_classes: int = 0
  input_dims: int = 0
  lookup_style: str = "index"
  scale_sqrt_depth: bool = False
  set_nan_for_oob_id: bool = False
  weight_axes: tuple[str | None, str | None] = ("vocab", "embed")

  def setup(self):
    if self.num_classes <= 0 or self.input_dims <= 0:
      raise ValueError(f"Embedding needs positive num_classes and input_dims, got "
                       f"{self.num_classes} and {self.input_dims}; set them on the config.")
    self.emb_var = self.create_variable("emb_var", (self.num_classes, self.input_dims),
                                        self.weight_axes)

  def __call__(self, ids: jax.Array) -> jax.Array:
    return self.emb_lookup(ids)

  def emb_lookup(self, ids: jax.Array) -> jax.Array:
    embs = _lookup(self.emb_var.astype(self.compute_dtype), ids, self.lookup_style,
                   self.set_nan_for_oob_id)  # [..., D]
    if self.scale_sqrt_depth:
      embs = embs * jnp.asarray(math.sqrt(self.input_dims), embs.dtype)
    return _shard_like_sequence(self, embs, "embed")


class FullSoftmax(base_layer.BaseLayer):
  """Logits = inputs @ w + b over all classes, and the softmax cross-entropy.

  The weights are those of a FeedForward child `logits_ffn` with no activation:
  `logits_ffn.linear.w[input_dims, num_classes]` and `logits_ffn.bias.b[num_classes]`.

  z-loss (Chowdhery et al., PaLM 2022) penalises log(sum(exp(logits)))**2 so that the softmax
  normaliser stays near 1, which keeps bf16 logits well-conditioned. It is computed as the
  weighted mean over positions, times `z_loss_weight`, returned as `z_loss` AND recorded with
  `add_aux_loss("z_loss", ...)`: a model adds the aux-loss collection to its loss, so it must not
  add the returned value too.

  Attributes:
    input_dims: size of the last input dim D.
    num_classes: number of classes V.
    has_bias: whether the logits have a bias.
    bias_init: initial value of the bias.
    soft_cap_logits: if > 0, logits become soft_cap * tanh(logits / soft_cap) (Gemma-style).
    z_loss_weight: weight of the z-loss; 0 disables it.
    label_smoothing_prob: mass moved from the label to a uniform distribution over all classes.
    weight_axes: logical axes of the logits weight; the bias uses the last.
  """

  input_dims: int = 0
  num_classes: int = 0
  has_bias: bool = True
  bias_init: float = 0.0
  soft_cap_logits: float = 0.0
  z_loss_weight: float = 0.0
  label_smoothing_prob: float = 0.0
  weight_axes: tuple[str | None, str | None] = ("embed", "vocab")

  def setup(self):
    if self.num_classes <= 0 or self.input_dims <= 0:
      raise ValueError(f"{type(self).__name__} needs positive input_dims and num_classes, got "
                       f"{self.input_dims} and {self.num_classes}; set them on the config.")
    self.logits_ffn = self.create_child(
        linears.FeedForward.HParams(
            input_dims=self.input_dims, output_dims=self.num_classes, has_bias=self.has_bias,
            weight_axes=self.weight_axes,
            # The softmax's params_init is its weight's (e.g. Pax's N(0, 1/D) for a tied
            # embedding); children do not inherit it otherwise.
            linear_tpl=linears.Linear.HParams(params_init=self.params_init),
            bias_tpl=linears.Bias.HParams(bias_init=self.bias_init),
            activation_tpl=activations.Identity.HParams()))

  def get_logits(self, inputs: jax.Array) -> jax.Array:
    """inputs [..., D] -> logits [..., V] in float32 (soft-capped if configured)."""
    logits = self.logits_ffn(inputs).astype(jnp.float32)  # [..., V]
    if self.soft_cap_logits > 0.0:
      logits = self.soft_cap_logits * jnp.tanh(logits / self.soft_cap_logits)
    return _shard_like_sequence(self, logits, "vocab")

  def __call__(self, inputs: jax.Array, class_weights: jax.Array,
               class_ids: jax.Array | None = None,
               class_probabilities: jax.Array | None = None) -> NestedMap:
    """Logits and the weighted cross-entropy.

    Args:
      inputs: [B, T, D] (any leading dims work).
      class_weights: [B, T, 1] (or [B, T]); 0 leaves a position out (padding).
      class_ids: [B, T, 1] (or [B, T]) integer labels; give this or class_probabilities.
      class_probabilities: [B, T, V] target distributions.

    Returns:
      NestedMap with logits [B, T, V], log_probs [B, T, V], per_example_xent [B, T],
      per_example_argmax [B, T] (int32), total_xent, total_weight, avg_xent and z_loss (scalars,
      float32). avg_xent = total_xent / total_weight (0 when every weight is 0).
    """
    logits = self.get_logits(inputs)
    log_probs = jax.nn.log_softmax(logits, axis=-1)  # [..., V]
    lead = logits.shape[:-1]
    weights = _drop_trailing_one(class_weights, lead, "class_weights").astype(jnp.float32)
    if class_probabilities is None:
      if class_ids is None:
        raise ValueError("FullSoftmax needs class_ids [B, T, 1] or class_probabilities [B, T, V].")
      ids = _drop_trailing_one(class_ids, lead, "class_ids")
      class_probabilities = jax.nn.one_hot(ids, self.num_classes, dtype=jnp.float32)  # [..., V]
    if self.label_smoothing_prob > 0.0:
      p = self.label_smoothing_prob
      class_probabilities = (1.0 - p) * class_probabilities + p / self.num_classes
    class_probabilities = jax.lax.stop_gradient(class_probabilities)
    per_example_xent = -jnp.sum(class_probabilities * log_probs, axis=-1)  # [...]
    total_xent = jnp.sum(per_example_xent * weights)
    total_weight = jnp.sum(weights)
    # Guarded division: an all-padding batch gives 0, not NaN.
    safe_weight = jnp.maximum(total_weight, 1e-8)
    out = NestedMap(
        logits=logits,
        log_probs=log_probs,
        per_example_xent=per_example_xent,
        per_example_argmax=jnp.argmax(logits, axis=-1).astype(jnp.int32),
        total_xent=total_xent,
        total_weight=total_weight,
        avg_xent=total_xent / safe_weight,
        z_loss=jnp.zeros((), jnp.float32))
    if self.z_loss_weight > 0.0:
      log_z = jax.nn.logsumexp(logits, axis=-1)  # [...]
      out.z_loss = self.z_loss_weight * jnp.sum(jnp.square(log_z) * weights) / safe_weight
      self.add_aux_loss("z_loss", out.z_loss)
      self.add_summary("z_loss", out.z_loss)
    return out


def _drop_trailing_one(x: jax.Array, lead: tuple[int, ...], name: str) -> jax.Array:
  """[..., 1] -> [...]; an array already of shape `lead` passes through."""
  if x.shape == lead:
    return x
  if x.shape == lead + (1,):
    return x[..., 0]
  raise ValueError(f"{name} must have shape {lead + (1,)} (or {lead}) to match the inputs' "
                   f"leading dims, got {x.shape}.")


class SharedEmbeddingSoftmax(FullSoftmax):
  """A FullSoftmax whose weight `w[D, V]` also embeds the input ids (tied embeddings).

  `emb_lookup(ids)` returns rows of `w.T`, times sqrt(D) when `scale_sqrt_depth`; both uses
  train the one weight `logits_ffn.linear.w`.

  Attributes:
    lookup_style: "index" or "matmul" (see Embedding).
    scale_sqrt_depth: multiply the looked-up embeddings by sqrt(input_dims).
    set_nan_for_oob_id: NaN embeddings for ids outside [0, num_classes).
  """

  lookup_style: str = "index"
  scale_sqrt_depth: bool = False
  set_nan_for_oob_id: bool = False

  def emb_lookup(self, ids: jax.Array) -> jax.Array:
    if self.is_initializing():
      # Flax builds children lazily: an init through emb_lookup alone would create the weight
      # but not the bias. One dummy logits call makes init create every weight of the layer.
      self.get_logits(jnp.zeros((1, self.input_dims), self.compute_dtype))
    w = self.logits_ffn.linear.theta.w.astype(self.compute_dtype)  # [D, V]
    embs = _lookup(w.T, ids, self.lookup_style, self.set_nan_for_oob_id)  # [..., D]
    if self.scale_sqrt_depth:
      embs = embs * jnp.asarray(math.sqrt(self.input_dims), embs.dtype)
    return _shard_like_sequence(self, embs, "embed")


def _positions(seq_length: int | None, position: jax.Array | None, name: str) -> jax.Array:
  """position [B, T] as float32, or [1, T] = 0..T-1 from seq_length."""
  if position is None:
    if seq_length is None:
      raise ValueError(f"{name} needs seq_length or position [B, T].")
    return jnp.arange(seq_length, dtype=jnp.float32)[None, :]  # [1, T]
  return position.astype(jnp.float32)


class PositionalEmbedding(base_layer.BaseLayer):
  """Sinusoidal position signal: [sin(p * f_0..f_{D/2-1}), cos(p * f_0..f_{D/2-1})].

  Frequencies f_i = 1 / (min_timescale * (max_timescale / min_timescale)**(i / (D/2 - 1))),
  geometric from 1/min_timescale down to 1/max_timescale. Sines fill the first half of the
  features and cosines the second (Pax's layout, not interleaved); an odd D gets a zero last
  feature. No weights.

  Attributes:
    embedding_dims: D.
    min_timescale: shortest wavelength / (2 pi).
    max_timescale: longest wavelength / (2 pi).
  """

  embedding_dims: int = 0
  min_timescale: float = 1.0
  max_timescale: float = 10_000.0

  def __call__(self, seq_length: int | None = None,
               position: jax.Array | None = None) -> jax.Array:
    """Returns [1, seq_length, D] for positions 0..T-1, or [B, T, D] for given `position` [B, T]."""
    pos = _positions(seq_length, position, "PositionalEmbedding")  # [B|1, T]
    num_timescales = self.embedding_dims // 2
    log_increment = math.log(self.max_timescale / self.min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = (1.0 / self.min_timescale) * jnp.exp(
        -log_increment * jnp.arange(num_timescales, dtype=jnp.float32))  # [D/2]
    scaled_time = pos[..., None] * inv_timescales  # [B|1, T, D/2]
    signal = jnp.concatenate([jnp.sin(scaled_time), jnp.cos(scaled_time)], axis=-1)
    if self.embedding_dims % 2:
      signal = jnp.pad(signal, [(0, 0), (0, 0), (0, 1)])  # [B|1, T, D]
    return signal.astype(self.compute_dtype)


class RotaryPositionalEmbedding(base_layer.BaseLayer):
  """Rotary position embedding (RoPE, Su et al. 2021) for query/key features [B, T, N, H].

  Feature i of the first half and feature i of the second half form a pair that is rotated by
  the angle position * f_i, with f_i = 1 / (min_timescale * (max_timescale/min_timescale)**(2i/H)).
  (Pax's half-split layout, not GPT-J's interleaved pairs.) The dot product of a rotated query
  and key then depends on their positions only through the difference. No weights.

  Attributes:
    embedding_dims: H, the per-head dims (even).
    min_timescale: timescale of the fastest-rotating pair.
    max_timescale: sets the slowest; 10000 as in the paper.
  """

  embedding_dims: int = 0
  min_timescale: float = 1.0
  max_timescale: float = 10_000.0

  def __call__(self, inputs: jax.Array, position: jax.Array | None = None) -> jax.Array:
    """inputs [B, T, N, H], position [B, T] (default 0..T-1) -> rotated [B, T, N, H]."""
    if inputs.ndim != 4 or inputs.shape[-1] != self.embedding_dims or self.embedding_dims % 2:
      raise ValueError(f"RotaryPositionalEmbedding expects inputs [B, T, N, {self.embedding_dims}]"
                       f" with an even last dim, got {inputs.shape}.")
    half = self.embedding_dims // 2
    fraction = 2.0 * jnp.arange(half, dtype=jnp.float32) / self.embedding_dims  # [H/2]
    timescale = self.min_timescale * (self.max_timescale / self.min_timescale)**fraction
    pos = _positions(inputs.shape[1], position, "RotaryPositionalEmbedding")  # [B|1, T]
    angle = pos[:, :, None, None] / timescale  # [B|1, T, 1, H/2]
    sin, cos = jnp.sin(angle), jnp.cos(angle)
    x = inputs.astype(jnp.float32)
    first, second = x[..., :half], x[..., half:]  # [B, T, N, H/2] each
    rotated = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return rotated.astype(inputs.dtype)


class TrainablePositionalEmbedding(base_layer.BaseLayer):
  """A learned position table `emb_var[max_seq_length, embedding_dims]`.

  Attributes:
    max_seq_length: number of positions the table holds.
    embedding_dims: D.
    lookup_style: "index" or "matmul" (see Embedding).
    weight_axes: logical axes of `emb_var` (positions are not sharded by default).
  """

  max_seq_length: int = 0
  embedding_dims: int = 0
  lookup_style: str = "index"
  weight_axes: tuple[str | None, str | None] = (None, "embed")

  def setup(self):
    if self.max_seq_length <= 0 or self.embedding_dims <= 0:
      raise ValueError(f"TrainablePositionalEmbedding needs positive max_seq_length and "
                       f"embedding_dims, got {self.max_seq_length} and {self.embedding_dims}.")
    self.emb_var = self.create_variable("emb_var", (self.max_seq_length, self.embedding_dims),
                                        self.weight_axes)

  def __call__(self, seq_length: int | None = None,
               position: jax.Array | None = None) -> jax.Array:
    """Returns [1, seq_length, D] for positions 0..T-1, or [B, T, D] for `position` [B, T]."""
    if position is None:
      if seq_length is None:
        raise ValueError("TrainablePositionalEmbedding needs seq_length or position [B, T].")
      if seq_length > self.max_seq_length:
        raise ValueError(f"seq_length {seq_length} exceeds max_seq_length "
                         f"{self.max_seq_length}; raise max_seq_length in the config.")
      position = jnp.arange(seq_length)[None, :]  # [1, T]
    table = self.emb_var.astype(self.compute_dtype)
    return _lookup(table, position.astype(jnp.int32), self.lookup_style, False)  # [B|1, T, D]
