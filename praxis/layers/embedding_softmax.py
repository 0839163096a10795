"""Pax's embedding and softmax layers, with Pax's names, fields, defaults and variable trees.

  TokenCounter: counts non-padding tokens seen in training (a non-trainable variable).
  Embedding: ids -> emb_var[V, D] rows.
  FullSoftmax: logits through `logits_ffn` (a FeedForward: linear.w[D, V], bias.b[V]) and the
    softmax cross-entropy; soft cap, label smoothing, z-loss, chunked (scanned) loss.
  SharedEmbeddingSoftmax: a FullSoftmax whose weight also embeds ids (tied embeddings).
  SigmoidCrossEntropy: per-class sigmoid cross-entropy.
  GShardSharedEmbeddingSoftmax: GShard's tied softmax: embedding.w[V, D], no bias, inputs scaled
    by 1/sqrt(D).
  Position embeddings (module position_embeddings, re-exported here): PositionalEmbedding,
    PositionalEmbedding2D, RotaryPositionalEmbedding, TrainablePositionalEmbedding.

Label smoothing is Pax's: it applies to class ids only; the label keeps 1 - p and each of the
other K - 1 classes gets p / (K - 1). (GShardSharedEmbeddingSoftmax keeps GShard's own rule:
p / K on every class.)

Ours, beside Pax's: class_weights / class_ids may also come without the trailing 1 ([..] instead
of [.., 1]); the output has `z_loss` under that name when z_loss_weight > 0.

Letters: B batch, T time, D input dims, V classes.
"""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import base_ops
from praxis.layers import linears
from praxis.layers.position_embeddings import _emb_weight
from praxis.layers.position_embeddings import PositionalEmbedding
from praxis.layers.position_embeddings import PositionalEmbedding2D
from praxis.layers.position_embeddings import RotaryPositionalEmbedding
from praxis.layers.position_embeddings import TrainablePositionalEmbedding

NestedMap = py_utils.NestedMap
WeightHParams = base_layer.WeightHParams
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config
SplitDimsMapping = pytypes.SplitDimsMapping

__all__ = [
  "TokenCounter",
  "Embedding",
  "FullSoftmax",
  "SharedEmbeddingSoftmax",
  "SigmoidCrossEntropy",
  "GShardSharedEmbeddingSoftmax",
  "PositionalEmbedding",
  "PositionalEmbedding2D",
  "RotaryPositionalEmbedding",
  "TrainablePositionalEmbedding",
]


def _compute_z_loss(logits: jax.Array) -> jax.Array:
  """log(sum(exp(logits)))**2 per position; the max is held constant in the gradient."""
  max_logit = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  log_z = jnp.log(jnp.sum(jnp.exp(logits - max_logit), axis=-1, keepdims=True)) + max_logit
  return jnp.square(log_z)


def _with_trailing_one(x: jax.Array | None, lead: tuple[int, ...], name: str):
  """[...] -> [..., 1] (ours: callers may omit the trailing 1); [..., 1] passes through."""
  if x is None:
    return None
  x = jnp.asarray(x)
  if x.shape == lead:
    return x[..., None]
  if x.shape[:-1] == lead:
    return x
  raise ValueError(
    f"{name} must be [..., 1] (or [...]) matching the inputs' leading dims {lead}, got {x.shape}."
  )


def _create_logits_ffn(layer) -> None:
  """The child `logits_ffn` of a softmax layer: its feed_forward_tpl sized D -> num_classes,
  linear, with the layer's bias_init and sharding, and our logical names on w[D, V]."""
  ff = layer.feed_forward_tpl.clone().set(
    input_dims=layer.input_dims,
    output_dims=layer.num_classes,
    activation_tpl=pax_fiddle.Config(activations.Identity),
    bias_init=layer.bias_init,
    # deepcopy: a sharding may be a Config or a built (frozen) WeightSharding.
    weight_split_dims_mapping=copy.deepcopy(layer.weight_split_dims_mapping),
    activation_split_dims_mapping=copy.deepcopy(layer.activation_split_dims_mapping),
  )
  try:
    ff.weight_axes = tuple(layer.weight_axes)  # Linear's default says mlp.
  except (AttributeError, TypeError, ValueError):
    pass  # a feed-forward template of another class: it names its own axes
  layer.create_child("logits_ffn", ff)


def _scale_and_shard(layer, embs: jax.Array) -> jax.Array:
  """What Embedding and SharedEmbeddingSoftmax do after the lookup: the optional sqrt(D) scale and
  the output sharding annotation."""
  if layer.scale_sqrt_depth:
    embs = embs * layer.input_dims**0.5
  return base_layer.maybe_shard(
    embs, layer.activation_split_dims_mapping.emb_out_split_dims_mapping, layer.mesh_axis_names
  )


def _lookup(layer, table: jax.Array, ids: jax.Array, num_classes: int) -> jax.Array:
  if layer.lookup_style == "index":
    return layer.array_lookup(jnp.asarray(table), (ids,))
  if layer.lookup_style == "matmul":
    one_hot = jax.nn.one_hot(ids, num_classes, dtype=layer.fprop_dtype)
    return layer.einsum("...y,yz->...z", one_hot, table)
  raise ValueError(f"lookup_style must be 'index' or 'matmul', got {layer.lookup_style!r}.")


class TokenCounter(base_layer.BaseLayer):
  """Counts the non-padding tokens seen in training, in millions (`approx_total_tokens_mm`)."""

  def setup(self) -> None:
    self.create_variable(
      "approx_total_tokens_mm",
      WeightHParams(
        shape=(),
        init=base_layer.WeightInit.Constant(0.0),
        collections=[
          base_layer.WeightHParamsCollection.REQUIRES_SUM_SYNC,
          base_layer.WeightHParamsCollection.DISALLOW_BFLOAT16_CONVERSION,
        ],
      ),
      trainable=False,
    )

  def __call__(self, inputs: jax.Array, paddings: jax.Array) -> None:
    """inputs [B, T] ids (unused), paddings [B, T] (1 = padding)."""
    del inputs
    if self.do_eval:
      return
    count = self.get_var("approx_total_tokens_mm")
    self.add_summary("approx_total_tokens_mm", count)
    batch_mm = jnp.sum(1.0 - paddings).astype(jnp.float32) / jnp.float32(1e6)
    # float32 on purpose: a bf16 counter would stop counting in the millions.
    self.update_var("approx_total_tokens_mm", count.astype(jnp.float32) + batch_mm)


class Embedding(base_layer.BaseLayer):
  """Embedding lookup: ids [...] -> emb_var[num_classes, input_dims] rows [..., input_dims].

  Attributes:
    num_classes: vocabulary size V.
    input_dims: embedding size D (Pax's name, shared with the softmax layers).
    lookup_style: 'index' (gather) or 'matmul' (one-hot einsum).
    scale_sqrt_depth: multiply the embeddings by sqrt(D).
    set_nan_for_oob_id: NaN embeddings for ids >= num_classes (debugging).
    array_lookup_tpl, einsum_tpl: the lookup ops.
  """

  num_classes: int = 0
  input_dims: int = 0
  lookup_style: str = "index"
  scale_sqrt_depth: bool = False
  set_nan_for_oob_id: bool = False
  array_lookup_tpl: LayerTpl = template_field(base_ops.ArrayLookup)
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """emb_out_split_dims_mapping: mesh split of the output embeddings."""

    emb_out_split_dims_mapping: SplitDimsMapping = None

  def setup(self) -> None:
    if self.num_classes <= 0 or self.input_dims <= 0:
      raise ValueError(
        f"Embedding needs positive num_classes and input_dims, got "
        f"{self.num_classes} and {self.input_dims}."
      )
    self.create_variable(
      "emb_var", _emb_weight(self, [self.num_classes, self.input_dims], ("vocab", "embed"))
    )
    self.create_child("array_lookup", self.array_lookup_tpl.clone())
    self.create_child("einsum", self.einsum_tpl.clone())

  def __call__(self, ids: jax.Array) -> jax.Array:
    return self.emb_lookup(ids)

  def emb_lookup(self, ids: jax.Array) -> jax.Array:
    embs = _lookup(self, self.theta.emb_var, ids, self.num_classes)
    if self.set_nan_for_oob_id:
      embs = jnp.where(ids[..., None] < self.num_classes, embs, jnp.nan)
    return _scale_and_shard(self, embs)

  def extend_step(self, ids: jax.Array, *, time_step: jax.Array) -> jax.Array:
    del time_step  # A lookup has no state.
    return self.emb_lookup(ids)


class FullSoftmax(base_layer.BaseLayer):
  """Softmax over all classes with cross-entropy outputs.

  Attributes:
    input_dims: D.
    num_classes: V.
    soft_cap_logits: if set, logits become cap * tanh(logits / cap).
    bi_tempered_loss_tpl: Pax's bi-tempered loss; not supported here (leave None).
    label_smoothing_prob: p: the label keeps 1 - p, the other classes p / (V - 1) each.
    label_smoothing_apply_for_eval: smooth in eval too.
    z_loss_weight: weight of the z-loss (PaLM), added as aux loss `aux_z_loss`.
    bias_init: initial value of the logits bias.
    feed_forward_tpl: the logits projection (`logits_ffn`); None uses the inputs as logits.
    scale_before_logits: multiply the inputs by 1/sqrt(D) first.
    chunk_size: compute the loss in chunks of this many positions under lax.scan (saves
      memory; logits and log_probs are then not returned).
    weight_axes: (ours) logical axes of the logits weight for the sharding rules.
  """

  input_dims: int = 0
  num_classes: int = 0
  soft_cap_logits: float | None = 0.0
  bi_tempered_loss_tpl: LayerTpl | None = template_field(None)
  label_smoothing_prob: float = 0.0
  label_smoothing_apply_for_eval: bool = True
  z_loss_weight: float = 0.0
  bias_init: float | None = 0.0
  feed_forward_tpl: LayerTpl | None = template_field(linears.FeedForward)
  scale_before_logits: bool = False
  chunk_size: int | None = None
  weight_axes: tuple[str | None, str | None] = ("embed", "vocab")

  def setup(self) -> None:
    if self.bi_tempered_loss_tpl is not None:
      raise NotImplementedError(
        f"{type(self).__name__}.bi_tempered_loss_tpl is not supported here; leave it None."
      )
    if self.feed_forward_tpl is not None:
      _create_logits_ffn(self)

  def get_logits(self, inputs: jax.Array, input_ids: jax.Array | None = None) -> jax.Array:
    """inputs [..., D] -> logits [..., V] (soft-capped if configured)."""
    del input_ids  # Pax's signature.
    if self.scale_before_logits:
      inputs = inputs * self.input_dims**-0.5
    logits = self.logits_ffn(inputs) if self.feed_forward_tpl is not None else inputs
    if self.soft_cap_logits:
      logits = self.soft_cap_logits * jnp.tanh(logits / self.soft_cap_logits)
    return logits

  def logits_to_logp(self, logits: jax.Array) -> jax.Array:
    return jax.nn.log_softmax(logits)

  def _smoothing_prob(self) -> float:
    """Pax's label smoothing probability, or 0 where it does not apply (eval without it)."""
    if self.do_eval and not self.label_smoothing_apply_for_eval:
      return 0.0
    return self.label_smoothing_prob

  def _compute_xent(self, inputs, class_ids=None, class_probabilities=None):
    """-> (per_example_xent [...], per_example_argmax [...], logits, log_probs [..., V]).

    With class ids the cross-entropy is logsumexp(logits) - logits[label]: no one-hot target.
    The label logit is gathered (`take_along_axis`), so its gradient is a scatter of one value
    per position into the logits' gradient; a masked sum over V (`where(arange(V) == label)`)
    would make XLA keep a third [..., V] float32 buffer through the backward pass (+500 MiB at
    8 x 512 x 32k). Smoothing p, Pax's rule: the label keeps 1 - p and each other class
    gets p / (V - 1), so xent = lse - (1 - p) l_y - p / (V - 1) (sum_c l_c - l_y) (an id outside
    [0, V) has no label term, as Pax's all-zero one-hot). The logits stay
    in their dtype; each reduction upcasts to float32 inside its own fusion. log_probs is only
    computed by XLA if used.
    """
    logits = self.get_logits(inputs)  # [..., V]
    logits32 = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits32, axis=-1)  # [...]
    log_probs = logits32 - lse[..., None]
    if class_probabilities is not None:
      per_example_xent = -jnp.sum(log_probs * class_probabilities, axis=-1, dtype=jnp.float32)
    else:
      v = self.num_classes
      ids = class_ids.astype(jnp.int32)  # Pax's one-hot target takes float ids too.
      # Pax's one-hot target is all zeros for an id outside [0, V) or not a whole number: no
      # label term then (the gather reads a clipped id, whose value the mask drops).
      in_range = ((ids >= 0) & (ids < v) & (ids == class_ids))[..., 0]  # [...]
      label_logit = jnp.take_along_axis(logits32, jnp.clip(ids, 0, v - 1), axis=-1)
      label_logp = jnp.where(in_range, label_logit[..., 0] - lse, 0.0)  # [...]
      per_example_xent = -label_logp
      p = self._smoothing_prob()
      if p > 0.0:
        # Every class but the label gets p / (V - 1): their log-probs sum to
        # sum_c logits_c - V lse - label_logp.
        others_logp = jnp.sum(logits32, axis=-1) - v * lse - label_logp  # [...]
        per_example_xent = (1.0 - p) * per_example_xent - p / (v - 1) * others_logp
    per_example_argmax = jax.lax.stop_gradient(jnp.argmax(logits, axis=-1))
    return per_example_xent, per_example_argmax, logits32, log_probs

  def _compute_xent_scan(self, inputs: jax.Array, class_ids: jax.Array):
    """The loss of [B, L, D] inputs in chunks of chunk_size positions (one scan step each)."""
    c = self.chunk_size
    length = inputs.shape[1]
    num_chunks = -(-length // c)
    extra = num_chunks * c - length

    def to_chunks(x):  # [B, L, ...] -> [U, B, c, ...]
      x = jnp.pad(x, [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2))
      x = x.reshape((x.shape[0], num_chunks, c) + x.shape[2:])
      return jnp.swapaxes(x, 0, 1)

    def from_chunks(x):  # [U, B, c] -> [B, L]
      x = jnp.swapaxes(x, 0, 1)
      return x.reshape((x.shape[0], num_chunks * c))[:, :length]

    def step(carry, chunk):
      xent, argmax, _, _ = self._compute_xent(chunk[0], chunk[1])
      return carry, (xent, argmax)

    chunks = (to_chunks(inputs), to_chunks(class_ids))
    # Flax creates weights lazily, which cannot happen inside scan: touch them first.
    step(None, (chunks[0][0, :, :1], chunks[1][0, :, :1]))
    _, (xent, argmax) = jax.lax.scan(jax.remat(step), None, chunks)
    return from_chunks(xent), from_chunks(argmax)

  def __call__(
    self,
    inputs: jax.Array,
    class_weights: jax.Array,
    class_ids: jax.Array | None = None,
    class_probabilities: jax.Array | None = None,
    input_ids: jax.Array | None = None,
  ) -> NestedMap:
    """Logits and the weighted cross-entropy.

    Args:
      inputs: [..., D].
      class_weights: [..., 1] weight of each position (0 = padding).
      class_ids: [..., 1] int labels; give these or class_probabilities.
      class_probabilities: [..., V] target distributions.
      input_ids: unused (Pax's signature).

    Returns:
      NestedMap: logits, log_probs [..., V] (None when chunked); per_example_argmax,
      per_example_xent [...]; total_xent, total_weight, avg_xent = total_xent /
      (total_weight + 1e-6); accuracy (with class_ids); z_loss (with z_loss_weight).
    """
    del input_ids
    if class_ids is None and class_probabilities is None:
      raise ValueError("FullSoftmax needs class_ids [..., 1] or class_probabilities [..., V].")
    lead = inputs.shape[:-1]
    class_weights = _with_trailing_one(class_weights, lead, "class_weights")
    class_ids = _with_trailing_one(class_ids, lead, "class_ids")
    chunk = self.chunk_size or 0
    full = (
      chunk == 0
      or class_probabilities is not None
      or inputs.ndim != 3
      or inputs.shape[1] < chunk
      or self.z_loss_weight > 0.0
    )
    if full:
      per_example_xent, per_example_argmax, logits, log_probs = self._compute_xent(
        inputs, class_ids, class_probabilities
      )
    else:
      per_example_xent, per_example_argmax = self._compute_xent_scan(inputs, class_ids)
      logits = log_probs = None
    total_xent = jnp.sum(per_example_xent[..., None] * class_weights, dtype=jnp.float32)
    total_weight = jnp.sum(class_weights, dtype=jnp.float32)
    out = NestedMap(
      logits=None if logits is None else logits.astype(inputs.dtype),
      log_probs=None if log_probs is None else log_probs.astype(inputs.dtype),
      per_example_argmax=per_example_argmax,
      per_example_xent=per_example_xent.astype(jnp.float32),
      total_xent=total_xent,
      total_weight=total_weight,
      avg_xent=(total_xent / (total_weight + 1e-6)).astype(jnp.float32),
    )
    if class_ids is not None:
      correct = per_example_argmax[..., None] == class_ids
      out.accuracy = jnp.sum(correct * class_weights) / total_weight
    if self.z_loss_weight > 0.0:
      z_loss = jnp.sum(_compute_z_loss(logits) * class_weights, dtype=jnp.float32) / total_weight
      z_loss = z_loss * self.z_loss_weight
      self.add_summary("aux_z_loss", z_loss)
      self.add_aux_loss("aux_z_loss", z_loss)
      out.z_loss = z_loss
    return out


class SharedEmbeddingSoftmax(FullSoftmax):
  """A FullSoftmax whose logits weight logits_ffn.linear.w[D, V] also embeds ids (its rows).

  Attributes:
    lookup_style: 'index' or 'matmul'.
    scale_sqrt_depth: multiply the looked-up embeddings by sqrt(D).
    array_lookup_tpl, einsum_tpl: the lookup ops.
  """

  lookup_style: str = "index"
  scale_sqrt_depth: bool = False
  array_lookup_tpl: LayerTpl = template_field(base_ops.ArrayLookup)
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """emb_out_split_dims_mapping: of the embeddings; extend_step_out: of one decode step."""

    emb_out_split_dims_mapping: SplitDimsMapping = None
    extend_step_out: SplitDimsMapping = None

  def setup(self) -> None:
    super().setup()
    self.create_child("array_lookup", self.array_lookup_tpl.clone())
    self.create_child("einsum", self.einsum_tpl.clone())

  def emb_lookup(self, ids: jax.Array) -> jax.Array:
    if self.is_initializing():
      # Flax builds children lazily: an init that only embeds would create the weight but not
      # the bias. One logits call makes init create the whole tree.
      self.get_logits(jnp.zeros((1, self.input_dims), self.fprop_dtype))
    w = self.logits_ffn.linear.theta.w  # [D, V]
    if self.lookup_style == "index":
      # Columns of w, not rows of its transpose: the gradient is then a scatter-add into w's own
      # [D, V] gradient (which the logits already write), where rows of transpose(w) would
      # scatter into a separate zero-filled [V, D] buffer live through the backward pass.
      embs = jnp.moveaxis(self.array_lookup(jnp.asarray(w), (slice(None), ids)), 0, -1)
    else:
      embs = _lookup(self, jnp.transpose(w), ids, self.num_classes)  # [..., D]
    return _scale_and_shard(self, embs)

  def extend_step(self, ids: jax.Array, *, time_step: jax.Array) -> jax.Array:
    del time_step  # A lookup has no state.
    return self.emb_lookup(ids)


class SigmoidCrossEntropy(base_layer.BaseLayer):
  """Independent sigmoid per class with its cross-entropy (multi-label).

  Attributes:
    input_dims: D.
    num_classes: V.
    soft_cap_logits: if set, logits become cap * tanh(logits / cap).
    bias_init: initial value of the bias.
    feed_forward_tpl: the logits projection; None requires input_dims == num_classes.
    weight_axes: (ours) logical axes of the logits weight for the sharding rules.
  """

  input_dims: int = 0
  num_classes: int = 0
  soft_cap_logits: float | None = 0.0
  bias_init: float | None = 0.0
  feed_forward_tpl: LayerTpl | None = template_field(linears.FeedForward)
  weight_axes: tuple[str | None, str | None] = ("embed", "vocab")

  def setup(self) -> None:
    if self.feed_forward_tpl:
      _create_logits_ffn(self)
    elif self.input_dims != self.num_classes:
      raise ValueError(
        f"SigmoidCrossEntropy without feed_forward_tpl needs input_dims == "
        f"num_classes, got {self.input_dims} and {self.num_classes}."
      )

  def get_logits(self, inputs: jax.Array) -> jax.Array:
    if not self.feed_forward_tpl:
      return inputs
    logits = self.logits_ffn(inputs)
    if self.soft_cap_logits:
      logits = self.soft_cap_logits * jnp.tanh(logits / self.soft_cap_logits)
    return logits

  def logits_to_logp(self, logits: jax.Array) -> jax.Array:
    return jax.nn.log_sigmoid(logits.astype(jnp.float32))

  def __call__(
    self,
    inputs: jax.Array,
    class_weights: jax.Array,
    class_ids: jax.Array | None = None,
    class_probabilities: jax.Array | None = None,
  ) -> NestedMap:
    """class_weights [..., 1] (per position) or [..., V] (per class); targets as FullSoftmax."""
    if class_ids is None and class_probabilities is None:
      raise ValueError("SigmoidCrossEntropy needs class_ids [..., 1] or class_probabilities.")
    dtype = inputs.dtype
    logits = self.get_logits(inputs)
    log_probs = self.logits_to_logp(logits)
    if class_probabilities is None:
      if self.num_classes == 1:
        raise ValueError(
          "SigmoidCrossEntropy with num_classes=1 cannot one-hot class_ids; "
          "pass class_probabilities [..., 1]."
        )
      class_probabilities = jax.lax.stop_gradient(
        jax.nn.one_hot(jnp.squeeze(class_ids, -1), self.num_classes, dtype=jnp.float32)
      )
    if class_weights.shape[-1] == self.num_classes:
      per_class_weight = class_weights
      per_example_weight = jnp.ones(class_weights.shape[:-1] + (1,))
    elif class_weights.shape[-1] == 1:
      per_class_weight = jnp.ones(class_weights.shape[:-1] + (self.num_classes,))
      per_example_weight = class_weights
    else:
      raise ValueError(
        f"class_weights must be [..., 1] or [..., {self.num_classes}], got {class_weights.shape}."
      )
    # max(x, 0) - x * z + log(1 + exp(-|x|)): stable for either sign of x.
    per_class_xent = (
      jnp.maximum(logits, 0) - logits * class_probabilities + jnp.log1p(jnp.exp(-jnp.abs(logits)))
    )
    per_example_xent = jnp.sum(per_class_xent * per_class_weight, axis=-1, dtype=jnp.float32)
    per_example_argmax = jax.lax.stop_gradient(jnp.argmax(logits.astype(jnp.float32), -1))
    total_xent = jnp.sum(per_example_xent[..., None] * per_example_weight, dtype=jnp.float32)
    total_weight = jnp.sum(class_weights, dtype=jnp.float32)
    return NestedMap(
      logits=logits.astype(dtype),
      log_probs=log_probs.astype(dtype),
      per_example_argmax=per_example_argmax,
      per_example_xent=per_example_xent.astype(dtype),
      total_xent=total_xent.astype(dtype),
      total_weight=total_weight,
      avg_xent=(total_xent / (total_weight + 1e-6)).astype(dtype),
    )


class GShardSharedEmbeddingSoftmax(base_layer.BaseLayer):
  """GShard's tied softmax: embedding.w[V, D] ~ N(0, 1), no bias, inputs scaled by 1/sqrt(D).

  Attributes:
    input_dims: D.
    num_classes: V.
    use_tgt_labels_size_as_loss_denominator: average over all positions (padding included)
      rather than over the total weight.
    soft_cap_logits: tanh soft cap, applied before logits_abs_max.
    logits_abs_max: clip logits to [-max, max].
    z_loss_weight: weight of the z-loss.
    label_smoothing_prob: GShard's smoothing (p / V on every class), in training only.
  """

  input_dims: int = 0
  num_classes: int = 0
  use_tgt_labels_size_as_loss_denominator: bool = True
  soft_cap_logits: float | None = 0.0
  logits_abs_max: float | None = 0.0
  z_loss_weight: float = 0.0
  label_smoothing_prob: float = 0.0

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """emb_out_split_dims_mapping: of the embeddings; extend_step_out: of one decode step."""

    emb_out_split_dims_mapping: SplitDimsMapping = None
    extend_step_out: SplitDimsMapping = None

  def setup(self) -> None:
    self.create_child(
      "embedding",
      pax_fiddle.Config(
        linears.Linear,
        input_dims=self.num_classes,
        output_dims=self.input_dims,
        params_init=base_layer.WeightInit.Gaussian(),
        weight_axes=("vocab", "embed"),
        weight_split_dims_mapping=self.weight_split_dims_mapping.clone(),
        activation_split_dims_mapping=self.activation_split_dims_mapping.clone(),
      ),
    )

  def emb_lookup(self, ids: jax.Array) -> jax.Array:
    one_hot = jax.nn.one_hot(ids, self.num_classes, dtype=self.fprop_dtype)  # [..., V]
    embs = linears.project_last_dim(one_hot, self.embedding.theta.w)  # [..., D]
    return base_layer.maybe_shard(
      embs, self.activation_split_dims_mapping.emb_out_split_dims_mapping, self.mesh_axis_names
    )

  def _out_split(self, ndim: int):
    ap = self.activation_split_dims_mapping
    if ndim == 2:
      if ap.extend_step_out is not None and len(ap.extend_step_out) == 2:
        return ap.extend_step_out
      if ap.out is not None and len(ap.out) == 3:
        return [ap.out[0], ap.out[2]]
    return ap.out

  def get_logits(self, inputs: jax.Array, input_ids: jax.Array | None = None) -> jax.Array:
    del input_ids
    inputs = inputs * self.input_dims**-0.5
    logits = linears.project_last_dim(inputs, jnp.transpose(self.embedding.theta.w))
    logits = base_layer.maybe_shard(logits, self._out_split(logits.ndim), self.mesh_axis_names)
    if self.soft_cap_logits:
      logits = self.soft_cap_logits * jnp.tanh(logits / self.soft_cap_logits)
    if self.logits_abs_max:
      logits = jnp.clip(logits, -self.logits_abs_max, self.logits_abs_max)
    return logits

  def __call__(
    self,
    inputs: jax.Array,
    class_weights: jax.Array,
    class_ids: jax.Array | None = None,
    class_probabilities: jax.Array | None = None,
    input_ids: jax.Array | None = None,
  ) -> NestedMap:
    """As FullSoftmax; also avg_xent_weight (the loss denominator)."""
    del input_ids
    if class_ids is None and class_probabilities is None:
      raise ValueError("GShardSharedEmbeddingSoftmax needs class_ids or class_probabilities.")
    dtype = inputs.dtype
    logits = self.get_logits(inputs).astype(jnp.float32)
    log_probs = jax.nn.log_softmax(logits)
    if class_probabilities is None:
      class_probabilities = jax.nn.one_hot(
        jnp.squeeze(class_ids, -1), self.num_classes, dtype=jnp.float32
      )
    unsmoothed = None
    if self.label_smoothing_prob > 0.0 and not self.do_eval:
      unsmoothed = class_probabilities
      off = self.label_smoothing_prob / self.num_classes
      on = 1.0 - self.label_smoothing_prob + off
      class_probabilities = on * class_probabilities + off * (1.0 - class_probabilities)
    class_probabilities = jax.lax.stop_gradient(class_probabilities)
    per_example_xent = -jnp.sum(log_probs * class_probabilities, axis=-1, dtype=jnp.float32)
    per_example_argmax = jax.lax.stop_gradient(jnp.argmax(logits, axis=-1))
    total_xent = jnp.sum(per_example_xent[..., None] * class_weights, dtype=jnp.float32)
    total_weight = jnp.sum(class_weights, dtype=jnp.float32)
    if self.use_tgt_labels_size_as_loss_denominator:
      denominator = jnp.sum(jnp.ones_like(class_weights), dtype=jnp.float32)
    else:
      denominator = total_weight
    z_loss = self.z_loss_weight * (jnp.sum(_compute_z_loss(logits) * class_weights) / denominator)
    self.add_summary("aux_z_loss", z_loss)
    self.add_aux_loss("aux_z_loss", z_loss)
    if unsmoothed is not None:
      plain = -jnp.sum(log_probs * unsmoothed, axis=-1, dtype=jnp.float32)
      plain_total = jnp.sum(plain[..., None] * class_weights, dtype=jnp.float32)
      self.add_summary(
        "avg_xent_prior_to_label_smoothing", (plain_total / denominator).astype(dtype)
      )
    return NestedMap(
      logits=logits.astype(dtype),
      log_probs=log_probs.astype(dtype),
      per_example_argmax=per_example_argmax,
      per_example_xent=per_example_xent.astype(jnp.float32),
      total_xent=total_xent.astype(dtype),
      avg_xent_weight=denominator,
      avg_xent=(total_xent / denominator).astype(jnp.float32),
      total_weight=total_weight,
    )

  def extend_step(self, ids: jax.Array, *, time_step: jax.Array) -> jax.Array:
    del time_step  # A lookup has no state.
    return self.emb_lookup(ids)


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
instance_field = base_layer.instance_field
