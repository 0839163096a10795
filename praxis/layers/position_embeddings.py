"""Pax's position embeddings: sinusoidal (1-d and 2-d), rotary and trainable.

All are re-exported by `praxis.layers.embedding_softmax`, where Pax users find them.

Sinusoidal (Pax's formula): with n = D // 2 timescales,
    inv_timescale_i = min_timescale * exp(-i * log(max_timescale / min_timescale) / max(n - 1, 1))
    signal = [sin(p * inv_timescale), cos(p * inv_timescale)]   (sines first, then cosines)
and a zero feature appended when D is odd. Note the factor is min_timescale itself (not its
inverse): the frequencies run from min_timescale down to min_timescale**2 / max_timescale.

Rotary (RoPE): feature i of the first half and feature i of the second half form a pair rotated
by the angle p / timescale_i, timescale_i = min_timescale * (max/min)**(2i / D).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import base_ops

WeightHParams = base_layer.WeightHParams
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config
SplitDimsMapping = pytypes.SplitDimsMapping


def _emb_weight(layer: base_layer.BaseLayer, shape, logical_axes) -> WeightHParams:
  """WeightHParams with the layer's mesh split and (when supported) our logical axis names."""
  kwargs = dict(
    shape=list(shape),
    mesh_shape=layer.mesh_shape,
    tensor_split_dims_mapping=layer.weight_split_dims_mapping.wt,
  )
  if "logical_axes" in {f.name for f in dataclasses.fields(WeightHParams)}:
    kwargs["logical_axes"] = tuple(logical_axes)
  return WeightHParams(**kwargs)


class PositionalEmbedding(base_layer.BaseLayer):
  """Sinusoidal position signal (module docstring for the formula). No weights.

  Attributes:
    min_timescale: start of the geometric sequence of timescales.
    max_timescale: its end.
    embedding_dims: D.
  """

  min_timescale: int = 1
  max_timescale: int = 10_000
  embedding_dims: int = 0

  def __call__(self, seq_length: int | None = None, position: jax.Array | None = None) -> jax.Array:
    """[1, seq_length, D] for positions 0..T-1, or [B, T, D] for `position` [B, T]."""
    if position is None:
      if seq_length is None:
        raise ValueError(f"{type(self).__name__} needs seq_length or position [B, T].")
      position = jnp.arange(seq_length, dtype=jnp.float32)[None, :]
    elif position.ndim != 2:
      raise ValueError(f"position must be [B, T], got {position.shape}.")
    num_timescales = self.embedding_dims // 2
    log_increment = math.log(float(self.max_timescale) / float(self.min_timescale)) / max(
      num_timescales - 1, 1
    )
    inv_timescales = self.min_timescale * jnp.exp(
      jnp.arange(num_timescales, dtype=jnp.float32) * -log_increment
    )  # [D/2]
    scaled_time = position[:, :, None] * inv_timescales[None, None, :]  # [B, T, D/2]
    signal = jnp.concatenate([jnp.sin(scaled_time), jnp.cos(scaled_time)], axis=2)
    signal = signal.astype(self.fprop_dtype)
    return jnp.pad(signal, [(0, 0), (0, 0), (0, self.embedding_dims % 2)])


class PositionalEmbedding2D(base_layer.BaseLayer):
  """ViT's 2-d sinusoidal embedding of h x w patches (flattened), with optional CLS slots.

  Half of the features encode the row, half the column, each with base-10000 frequencies over
  centred positions -h/2 .. h/2 - 1.

  Attributes:
    h: patches along the height.
    w: patches along the width.
    embedding_dims: D.
    pos_transform: how h and w are merged (only 'hwd->(hw)d').
    num_prepend_cls_tokens: zero rows before the patches.
    num_append_cls_tokens: zero rows after them.
  """

  h: int = 0
  w: int = 0
  embedding_dims: int = 0
  pos_transform: str = "hwd->(hw)d"
  num_prepend_cls_tokens: int = 0
  num_append_cls_tokens: int = 0

  @staticmethod
  def _sincos(position: jax.Array, dims: int) -> jax.Array:
    half = dims // 2
    inv_freq = 1.0 / (10000 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angles = position.astype(jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)

  def __call__(self, seq_length: int | None = None, position: jax.Array | None = None) -> jax.Array:
    """[1, prepend + h * w + append, D] (arguments only mirror PositionalEmbedding's)."""
    del seq_length, position
    dims = self.embedding_dims
    rows = self._sincos(jnp.arange(-self.h / 2, self.h / 2), dims // 2)  # [h, D/2]
    cols = self._sincos(jnp.arange(-self.w / 2, self.w / 2), dims // 2)  # [w, D/2]
    grid = jnp.concatenate(
      [
        jnp.broadcast_to(rows[:, None], (self.h, self.w, rows.shape[-1])),
        jnp.broadcast_to(cols[None], (self.h, self.w, cols.shape[-1])),
      ],
      axis=-1,
    )
    emb = grid.reshape(self.h * self.w, dims)
    parts = [
      jnp.zeros([self.num_prepend_cls_tokens, dims]),
      emb,
      jnp.zeros([self.num_append_cls_tokens, dims]),
    ]
    return jnp.concatenate(parts, axis=0)[None]


class RotaryPositionalEmbedding(PositionalEmbedding):
  """Rotary position embedding (Su et al. 2021) of queries/keys [B, S, N, H] or [B, S, H].

  Attributes:
    cast_as_fprop_dtype: return fprop_dtype (saves memory under bf16).
  """

  cast_as_fprop_dtype: bool = True

  def setup(self) -> None:
    if self.embedding_dims % 2:
      raise ValueError(
        f"RotaryPositionalEmbedding needs an even embedding_dims, got {self.embedding_dims}."
      )

  def __call__(self, inputs: jax.Array, position: jax.Array | None = None) -> jax.Array:
    """inputs [B, S, N, H] or [B, S, H]; position [B, S] (default 0..S-1)."""
    if inputs.shape[-1] != self.embedding_dims:
      raise ValueError(
        f"RotaryPositionalEmbedding: embedding_dims {self.embedding_dims} must "
        f"equal the inputs' last dim, got {inputs.shape}."
      )
    if inputs.ndim not in (3, 4):
      raise ValueError(
        f"RotaryPositionalEmbedding takes inputs of rank 3 or 4, got {inputs.shape}."
      )
    half = self.embedding_dims // 2
    fraction = 2 * jnp.arange(half) / self.embedding_dims
    timescale = self.min_timescale * (self.max_timescale / self.min_timescale) ** fraction
    if position is None:
      position = jnp.arange(inputs.shape[1], dtype=jnp.float32)[None, :]
    extra = (None,) * (inputs.ndim - 2)
    angle = position[(Ellipsis,) + extra] / timescale  # [B, S, (1,) H/2]
    sin, cos = jnp.sin(angle), jnp.cos(angle)
    first, second = jnp.split(inputs, 2, axis=-1)
    first_out = first * cos - second * sin
    second_out = second * cos + first * sin
    if self.cast_as_fprop_dtype:
      first_out = first_out.astype(self.fprop_dtype)
      second_out = second_out.astype(self.fprop_dtype)
    return jnp.concatenate([first_out, second_out], axis=-1)

  def extend_step(self, inputs: jax.Array, position=None) -> jax.Array:
    """One step: inputs [B, N, H] / [B, H], or a window [B, P, N, H] / [B, P, H] ending at
    `position` (scalar or [B]); earlier window slots get positions position - P + 1 .. (>= 0).
    """
    if inputs.ndim not in (2, 3, 4):
      raise ValueError(f"extend_step takes inputs of rank 2 to 4, got {inputs.shape}.")
    squeeze = inputs.ndim in (2, 3)
    x = inputs[:, None] if squeeze else inputs
    window = x.shape[1]
    last = jnp.broadcast_to(position, [inputs.shape[0]])[:, None]  # [B, 1]
    offsets = jnp.flip(jax.lax.iota(jnp.int32, window))[None, :]  # [1, P]: P-1 .. 0
    positions = jnp.maximum(last - offsets, 0)  # [B, P]
    out = self(x, position=positions)
    return out[:, 0] if squeeze else out


class TrainablePositionalEmbedding(PositionalEmbedding):
  """A learned table emb_var[max_seq_length, embedding_dims].

  Attributes:
    max_seq_length: rows of the table.
    lookup_style: 'matmul' (one-hot einsum) or 'index' (gather).
    array_lookup_tpl, einsum_tpl: the lookup ops.
  """

  max_seq_length: int = 10_240
  lookup_style: str = "matmul"
  array_lookup_tpl: LayerTpl = template_field(base_ops.ArrayLookup)
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """emb_out_split_dims_mapping: mesh split of the output embeddings."""

    emb_out_split_dims_mapping: SplitDimsMapping = None

  def setup(self) -> None:
    self.create_variable(
      "emb_var", _emb_weight(self, [self.max_seq_length, self.embedding_dims], (None, "embed"))
    )
    self.create_child("array_lookup", self.array_lookup_tpl.clone())
    self.create_child("einsum", self.einsum_tpl.clone())

  def __call__(self, seq_length: int | None = None, position: jax.Array | None = None) -> jax.Array:
    """[1, seq_length, D] for positions 0..T-1, or [B, T, D] for `position` [B, T]."""
    if position is None:
      if seq_length is None:
        raise ValueError("TrainablePositionalEmbedding needs seq_length or position [B, T].")
      position = jnp.arange(seq_length, dtype=jnp.int32)[None, :]
    if seq_length is not None and seq_length > self.max_seq_length:
      raise ValueError(
        f"seq_length {seq_length} exceeds max_seq_length {self.max_seq_length}; "
        f"raise max_seq_length in the config."
      )
    # Deliberate difference: with `position` alone, Pax's 'matmul' lookup one-hots over
    # position.shape[1] classes, which zeroes any position >= T (a decode step: T = 1). The
    # whole table gives the same rows wherever Pax's is right, and the right rows elsewhere.
    table = jax.lax.slice_in_dim(self.theta.emb_var, 0, seq_length, axis=0)
    if self.lookup_style == "index":
      embs = self.array_lookup(jnp.asarray(table), (position,))
    elif self.lookup_style == "matmul":
      one_hot = jax.nn.one_hot(position, table.shape[0], dtype=self.fprop_dtype)
      embs = self.einsum("...y,yz->...z", one_hot, table)
    else:
      raise ValueError(f"lookup_style must be 'index' or 'matmul', got {self.lookup_style!r}.")
    return base_layer.maybe_shard(
      embs, self.activation_split_dims_mapping.emb_out_split_dims_mapping, self.mesh_axis_names
    )
