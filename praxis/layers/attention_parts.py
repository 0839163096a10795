"""The pieces of Pax's attention layers: projections, query scale, relative bias, causal dconv.

Weight layouts and names are Pax's, so that a Pax checkpoint maps onto them:

    AttentionProjection        w[D, N, H] (w[N, H, D] with use_nhd_shape), b[N, H] or b[D]
    CombinedQKVProjectionLayer w[3, D, N, H], b[3, N, H]
    PerDimScale                per_dim_scale[H]
    RelativeBias               wrb[N, num_buckets]
    CausalDepthwiseConv1D      dconv_0 .. dconv_{k-1}, each hidden_dims

Einsum letters: B batch, T query positions, S key positions, D model dims, N heads, H dims per
head, X relative-position buckets.
"""

from __future__ import annotations

import dataclasses
import math
import string
from typing import Sequence

import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import attention_masks
from praxis.layers import base_ops

WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config

# 1 / softplus(0): makes PerDimScale's factor exactly 1 / sqrt(H) at its zero initialisation.
_R_SOFTPLUS_0 = 1.0 / math.log(2.0)


def weight_hparams(
  layer: base_layer.BaseLayer,
  shape: Sequence[int],
  logical_axes,
  *,
  init=None,
  wt=None,
  dtype=None,
  fan_in_axes=None,
  fan_out_axes=None,
) -> WeightHParams:
  """WeightHParams with Pax's mesh split `wt` and our logical axis names (for the rules table)."""
  kwargs = dict(
    shape=list(shape), init=init, mesh_shape=layer.mesh_shape, tensor_split_dims_mapping=wt
  )
  if dtype is not None:
    kwargs["dtype"] = dtype
  if fan_in_axes is not None:
    kwargs["fan_in_axes"] = list(fan_in_axes)
    kwargs["fan_out_axes"] = list(fan_out_axes)
  names = {f.name for f in dataclasses.fields(WeightHParams)}
  if "logical_axes" in names:
    kwargs["logical_axes"] = tuple(logical_axes)
  return WeightHParams(**kwargs)


def _batch_letters(rank: int, exclude: str) -> str:
  return "".join(sorted(set(string.ascii_uppercase) - set(exclude)))[:rank]


class PerDimScale(base_layer.BaseLayer):
  """Learned per-dim scale: inputs * softplus(per_dim_scale) / (softplus(0) * sqrt(dim)).

  per_dim_scale starts at 0, so the layer starts as the usual 1 / sqrt(H) query scaling.

  Attributes:
    dim: number of dims H of the last input axis.
  """

  dim: int = 0

  def setup(self) -> None:
    self.create_variable(
      "per_dim_scale", weight_hparams(self, [self.dim], ("kv",), init=WeightInit.Constant(0.0))
    )

  def factor(self, dtype) -> jax.Array:
    """The factor [H] the layer multiplies its inputs by."""
    scale = jnp.asarray(_R_SOFTPLUS_0 / np.sqrt(self.dim), dtype)
    return scale * jax.nn.softplus(self.theta.per_dim_scale)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[-1] != self.dim:
      raise ValueError(f"PerDimScale expects inputs [..., {self.dim}], got {inputs.shape}.")
    return inputs * self.factor(inputs.dtype)


class RelativeBias(base_layer.BaseLayer):
  """T5-style learned bias per head and bucketed relative position, added to the logits.

  Relative position = key position - query position; positions closer than num_buckets / 2
  (per direction when bidirectional) get their own bucket, farther ones share log-spaced
  buckets up to max_distance.

  Attributes:
    num_heads: N.
    use_length_as_position: in training, take positions 0..T-1 (packing does not change
      relative positions within a segment); the bias then has batch 1.
    relative_attention_num_buckets: number of buckets.
    relative_attention_max_distance: distance of the last bucket boundary.
    bidirectional: half of the buckets for keys after the query.
    use_xavier_init: Xavier init of the table instead of N(0, (N * buckets)^-1/2).
  """

  num_heads: int = 1
  use_length_as_position: bool = True
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  bidirectional: bool = False
  use_xavier_init: bool = False

  def setup(self) -> None:
    if self.use_xavier_init:
      init = WeightInit.Xavier()
    else:
      init = WeightInit.Gaussian((self.num_heads * self.relative_attention_num_buckets) ** -0.5)
    self.create_variable(
      "wrb",
      weight_hparams(
        self, [self.num_heads, self.relative_attention_num_buckets], ("heads", None), init=init
      ),
    )

  def _relative_position_bucket(self, relative_position: jax.Array) -> jax.Array:
    """int32 buckets in [0, num_buckets) of relative positions (key - query)."""
    num_buckets = self.relative_attention_num_buckets
    distance = -relative_position  # > 0 for keys before the query
    bucket = jnp.zeros_like(distance, jnp.int32)
    if self.bidirectional:
      num_buckets //= 2
      bucket = bucket + (distance < 0).astype(jnp.int32) * num_buckets
      distance = jnp.abs(distance)
    else:
      distance = jnp.maximum(distance, 0)
    max_exact = num_buckets // 2
    max_distance = jnp.asarray(self.relative_attention_max_distance, self.dtype)
    log_ratio = jnp.log(distance.astype(self.dtype) / max_exact) / jnp.log(max_distance / max_exact)
    far = max_exact + (log_ratio * (num_buckets - max_exact)).astype(jnp.int32)
    far = jnp.minimum(far, num_buckets - 1)
    return bucket + jnp.where(distance < max_exact, distance, far)

  def __call__(
    self, query_segment_pos: jax.Array, key_segment_pos: jax.Array | None = None
  ) -> jax.Array:
    """query_segment_pos [B, T], key_segment_pos [B, S] -> bias [B|1, N, T, S]."""
    if query_segment_pos is None:
      raise ValueError("RelativeBias needs query_segment_pos [B, T].")
    if key_segment_pos is None:
      key_segment_pos = query_segment_pos
    if self.use_length_as_position and not self.do_eval:
      key_pos = np.arange(key_segment_pos.shape[1], dtype=np.int32)[None, None, :]
      query_pos = np.arange(query_segment_pos.shape[1], dtype=np.int32)[None, :, None]
      relative = jnp.asarray(key_pos - query_pos)  # [1, T, S]
    else:
      relative = key_segment_pos[:, None, :] - query_segment_pos[:, :, None]  # [B, T, S]
    buckets = self._relative_position_bucket(relative)
    one_hot = jax.nn.one_hot(
      buckets, self.relative_attention_num_buckets, dtype=self.fprop_dtype
    )  # [B, T, S, X]
    return jnp.einsum("NX,BTSX->BNTS", self.theta.wrb, one_hot)

  def extend_step(self, seq_length: int, time_step=None) -> jax.Array:
    """Bias [1, N, 1, S] of the query at time_step over keys 0..S-1."""
    query_pos = jnp.zeros([1, 1], jnp.int32) + time_step
    key_pos = jnp.arange(seq_length, dtype=jnp.int32)[None, :]
    return self(query_segment_pos=query_pos, key_segment_pos=key_pos)


class AttentionProjection(base_layer.BaseLayer):
  """Multi-head projection with w[D, N, H]: [..., D] -> [..., N, H], or back when output.

  Attributes:
    input_dim: D.
    num_heads: N.
    dim_per_head: H.
    is_output_projection: [..., N, H] -> [..., D] (sums over heads).
    use_bias: add b[N, H] (input projections) or b[D] (output projection).
    attention_combine_dims: store w as [D, N*H] (needs use_bias=False).
    use_nhd_shape: store the output projection as w[N, H, D].
    explicit_fan_in_fan_out_axes: give the initialiser Pax's explicit fan axes.
    einsum_tpl: the einsum op (swap for a quantized one).
  """

  input_dim: int = 0
  num_heads: int = 0
  dim_per_head: int = 0
  is_output_projection: bool = False
  use_bias: bool = True
  attention_combine_dims: bool = False
  use_nhd_shape: bool = False
  explicit_fan_in_fan_out_axes: bool = False
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  def _combined_wt(self, wt):
    """Pax's sharding of a combined-dims weight: the N and H shardings become one tuple."""
    if wt is None or self.mesh_shape is None or len(wt) != 3:
      return wt
    merge = (0, 1) if self.is_output_projection and self.use_nhd_shape else (1, 2)
    combined = ()
    for axes in (wt[merge[0]], wt[merge[1]]):
      if isinstance(axes, (str, int)):
        combined += (axes,)
      elif axes is not None:
        combined += tuple(axes)
    return [combined, wt[2]] if merge == (0, 1) else [wt[0], combined]

  def setup(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    nh = [self.num_heads, self.dim_per_head]
    if self.attention_combine_dims:
      if self.use_bias:
        raise ValueError("AttentionProjection: attention_combine_dims needs use_bias=False.")
      nh = [self.num_heads * self.dim_per_head]
      wt = self._combined_wt(wt)
    nh_axes = ("heads", "kv")[: len(nh)] if len(nh) == 2 else ("heads",)
    if self.is_output_projection and self.use_nhd_shape:
      shape, axes = nh + [self.input_dim], nh_axes + ("embed",)
      fan_in, fan_out = [-1], ([-2] if self.attention_combine_dims else [-2, -3])
    else:
      shape, axes = [self.input_dim] + nh, ("embed",) + nh_axes
      fan_in, fan_out = ([-2], [-1]) if self.attention_combine_dims else ([-3], [-1, -2])
    explicit = self.explicit_fan_in_fan_out_axes
    self.create_variable(
      "w",
      weight_hparams(
        self,
        shape,
        axes,
        wt=wt,
        fan_in_axes=fan_in if explicit else None,
        fan_out_axes=fan_out if explicit else None,
      ),
    )
    if self.use_bias:
      full_wt = self.weight_split_dims_mapping.wt
      has_sharding = self.mesh_shape is not None and full_wt is not None
      zero = WeightInit.Constant(0.0)
      if self.is_output_projection:
        self.create_variable(
          "b",
          weight_hparams(
            self, [self.input_dim], ("embed",), init=zero, wt=[full_wt[0]] if has_sharding else None
          ),
        )
      else:
        self.create_variable(
          "b",
          weight_hparams(
            self,
            [self.num_heads, self.dim_per_head],
            ("heads", "kv"),
            init=zero,
            wt=[full_wt[1], full_wt[2]] if has_sharding else None,
          ),
        )
    self.create_child("einsum", self.einsum_tpl.clone())

  def _einsum_eqn(self, inputs: jax.Array) -> str:
    """The projection's einsum for these inputs ([..., D] in, or [..., N, H] for an output
    projection), after checking their trailing dims."""
    if self.is_output_projection:
      if inputs.shape[-2:] != (self.num_heads, self.dim_per_head):
        raise ValueError(
          f"AttentionProjection (output) expects [..., {self.num_heads}, "
          f"{self.dim_per_head}], got {inputs.shape}."
        )
      lead = _batch_letters(inputs.ndim - 2, "DHN")
      return f"{lead}NH,NHD->{lead}D" if self.use_nhd_shape else f"{lead}NH,DNH->{lead}D"
    else:
      if inputs.shape[-1] != self.input_dim:
        raise ValueError(
          f"AttentionProjection expects [..., {self.input_dim}], got {inputs.shape}."
        )
      lead = _batch_letters(inputs.ndim - 1, "DHN")
      return f"{lead}D,DNH->{lead}NH"

  def __call__(self, inputs: jax.Array, *, query_scale: jax.Array | None = None) -> jax.Array:
    """inputs [..., D] -> [..., N, H] (an output projection: [..., N, H] -> [..., D]).

    query_scale: (ours) a factor [H] to multiply the projection by, applied to the weight and
    bias (DotProductAttention folds its per-dim query scale in here: see its `_project`).
    """
    inputs = self._cast_to_fprop_dtype(inputs)
    w = self.theta.w
    b = self.theta.b if self.use_bias else None
    if query_scale is not None:
      if self.is_output_projection or self.attention_combine_dims:
        raise ValueError("query_scale is for a [D, N, H] input projection.")
      w, b = w * query_scale, None if b is None else b * query_scale
    if self.attention_combine_dims:
      if self.is_output_projection and self.use_nhd_shape:
        w = jnp.reshape(w, [self.num_heads, self.dim_per_head, self.input_dim])
      else:
        w = jnp.reshape(w, [self.input_dim, self.num_heads, self.dim_per_head])
    eqn = self._einsum_eqn(inputs)
    out = self.einsum(eqn, inputs, w)
    if self.use_bias:
      out = out + b
    return out

  def extend_step(self, inputs: jax.Array, *, time_step: jax.Array) -> jax.Array:
    del time_step  # A projection has no state.
    return self(inputs)


class CombinedQKVProjectionLayer(base_layer.BaseLayer):
  """Query, key and value projections in one weight w[3, D, N, H] (self-attention only).

  Attributes: as AttentionProjection's input projection.
  """

  input_dim: int = 0
  num_heads: int = 0
  dim_per_head: int = 0
  use_bias: bool = True
  attention_combine_dims: bool = False
  explicit_fan_in_fan_out_axes: bool = False
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  def setup(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    w_wt = b_wt = None
    if wt is not None:
      if self.attention_combine_dims and len(wt) == 3:
        combined = ()
        for axes in wt[1:]:
          if isinstance(axes, (list, tuple)):
            combined += tuple(axes)
          elif axes is not None:
            combined += (axes,)
        wt = [wt[0], combined]
      w_wt = [None] + list(wt)
      b_wt = [None] + list(wt[1:])
    if self.attention_combine_dims:
      nh, nh_axes, fan_in, fan_out = ([self.num_heads * self.dim_per_head], ("heads",), [-2], [-1])
    else:
      nh, nh_axes, fan_in, fan_out = (
        [self.num_heads, self.dim_per_head],
        ("heads", "kv"),
        [-3],
        [-1, -2],
      )
    explicit = self.explicit_fan_in_fan_out_axes
    self.create_variable(
      "w",
      weight_hparams(
        self,
        [3, self.input_dim] + nh,
        (None, "embed") + nh_axes,
        init=self.params_init,
        wt=w_wt,
        dtype=self.dtype,
        fan_in_axes=fan_in if explicit else None,
        fan_out_axes=fan_out if explicit else None,
      ),
    )
    if self.use_bias:
      self.create_variable(
        "b",
        weight_hparams(self, [3] + nh, (None,) + nh_axes, init=WeightInit.Constant(0.0), wt=b_wt),
      )
    self.create_child("einsum", self.einsum_tpl.clone())

  def __call__(
    self, inputs: jax.Array, *, query_scale: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """inputs [..., D] -> (query, key, value), each [..., N, H].

    query_scale: (ours) a factor [H] for the query slot, applied to its weight and bias (see
    AttentionProjection).
    """
    if inputs.shape[-1] != self.input_dim:
      raise ValueError(
        f"CombinedQKVProjectionLayer expects [..., {self.input_dim}], got {inputs.shape}."
      )
    lead = _batch_letters(inputs.ndim - 1, "KDHN")
    # [3, 1, 1, H]: the query slot scaled, key and value by 1.
    slots = (
      None
      if query_scale is None
      else jnp.stack([query_scale, jnp.ones_like(query_scale), jnp.ones_like(query_scale)])
    )
    w = jnp.reshape(self.theta.w, [3, self.input_dim, self.num_heads, self.dim_per_head])
    if slots is not None:
      w = w * slots[:, None, None, :]
    out = self.einsum(f"{lead}D,KDNH->K{lead}NH", inputs, w)  # [3, ..., N, H]
    out = checkpoint_name(out, "combined_qkv_proj")
    if self.use_bias:
      b = jnp.reshape(self.theta.b, [3, self.num_heads, self.dim_per_head])
      if slots is not None:
        b = b * slots[:, None, :]
      out = out + jnp.expand_dims(b, tuple(range(1, inputs.ndim)))
    # lax.split, whose gradient is one concatenation into [3, ..., N, H]; indexing out[0],
    # out[1], out[2] would give three zero-padded [3, ..., N, H] gradients to add up.
    query, key, value = (jnp.squeeze(x, 0) for x in jax.lax.split(out, (1, 1, 1), axis=0))
    return (
      checkpoint_name(query, "query_proj"),
      checkpoint_name(key, "key_proj"),
      checkpoint_name(value, "value_proj"),
    )

  def extend_step(self, inputs: jax.Array, *, time_step: jax.Array):
    del time_step  # A projection has no state.
    return self(inputs)


class CausalDepthwiseConv1D(base_layer.BaseLayer):
  """Primer's causal depth-wise convolution along the sequence: sum_i dconv_i * x[t - i].

  dconv_0 starts at 0.5 and the others at 0.5 / kernel_size.

  Attributes:
    kernel_size: taps k.
    hidden_dims: shape of each tap (an int, or e.g. [N, H] for per-head features).
  """

  kernel_size: int = 3
  hidden_dims: int | Sequence[int] = 0

  def setup(self) -> None:
    dims = (
      list(self.hidden_dims) if isinstance(self.hidden_dims, (list, tuple)) else [self.hidden_dims]
    )
    if self.kernel_size <= 0 or not dims or min(dims) <= 0:
      raise ValueError(
        f"CausalDepthwiseConv1D needs kernel_size > 0 and positive hidden_dims, "
        f"got {self.kernel_size} and {self.hidden_dims}."
      )
    axes = ("heads", "kv") if len(dims) == 2 else (None,) * len(dims)
    for i in range(self.kernel_size):
      value = 0.5 if i == 0 else 0.5 / self.kernel_size
      self.create_variable(
        f"dconv_{i}",
        weight_hparams(
          self, dims, axes, init=WeightInit.Constant(value), wt=self.weight_split_dims_mapping.wt
        ),
      )

  def _tap(self, i: int) -> jax.Array:
    return getattr(self.theta, f"dconv_{i}")

  def __call__(
    self, inputs: jax.Array, axis: int, segment_pos: jax.Array | None = None
  ) -> jax.Array:
    """inputs with the sequence on `axis`; segment_pos [B, L] stops taps at segment starts."""
    outputs = inputs * self._tap(0)
    shifted = inputs
    for i in range(1, self.kernel_size):
      shifted = attention_masks.shift_1d(shifted, offset=1, axis=axis)
      term = shifted * self._tap(i)
      if segment_pos is not None:
        keep = segment_pos >= i
        keep = keep.reshape(keep.shape + (1,) * (inputs.ndim - keep.ndim))
        term = term * keep
      outputs = outputs + term
    return outputs

  def extend_step(self, inputs: jax.Array, axis: int, step, segment_pos) -> jax.Array:
    """The output at position `step` of the full sequence `inputs` (the decode cache)."""

    def at(index):
      return jax.lax.dynamic_slice_in_dim(inputs, index, 1, axis=axis)

    outputs = at(step) * self._tap(0)
    if segment_pos is None:
      position = step
    else:
      position = jnp.reshape(segment_pos, [segment_pos.shape[0]] + [1] * (inputs.ndim - 1))
    for i in range(1, self.kernel_size):
      if isinstance(position, int):
        if position < i:
          break
        previous = at(step - i)
      else:
        previous = jnp.where(position - i >= 0, at(step - i), jnp.zeros_like(outputs))
      outputs = outputs + previous * self._tap(i)
    return jnp.squeeze(outputs, axis)
