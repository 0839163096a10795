"""Pax's MultiQueryDotProductAttention: many query heads over one (or a few) key/value heads.

    atten = pax_fiddle.Config(MultiQueryDotProductAttention, name='mqa', input_dim=64,
                              hidden_dim=64, num_heads=8)       # num_kv_heads=1
    variables = layer.init(key, x, x, x, mask)
    encoded, probs = layer.apply(variables, x, x, x, mask)     # [B, T, D], [B, N, T, S]
                                                               # ([B, T, N, S] with K > 1, Pax's)

Variables (Pax's): `query` (w [D, N, H]), `key` and `value` — with one key/value head
OneHeadedAttentionProjection (w [D, H], b [H]), with K > 1 heads AttentionProjection
(w [D, K, H]) — and `post` (w [D, N, H]). As Pax's, the query is scaled by 1/sqrt(H) (no learned
per_dim_scale) and `dconv_qkv` / `combine_qkv` are not supported.

`local_window_size=(left, right)`: a query at position t attends to keys in [t - left, t + right]
only (Gemma-style sliding windows; StackedTransformer.local_window_size sets it per layer).

The computation is DotProductAttention's grouped-query path (query head n uses key/value head
n // (N / K)); its decode cache keeps a heads dim of K (Pax's headless cache drops it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import attention_masks
from praxis.layers import base_ops
from praxis.layers import dot_product_attention
from praxis.layers import lpb_attention

template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config
SplitDimsMapping = pytypes.SplitDimsMapping
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit


class OneHeadedAttentionProjection(base_layer.BaseLayer):
  """[..., D] -> [..., H] with w [D, H] (+ b [H]): the key/value projection of one head.

  Attributes:
    input_dim: D.
    output_dim: H.
    use_bias: add b.
    einsum_tpl: template of the einsum.
  """

  input_dim: int = 0
  output_dim: int = 0
  use_bias: bool = True
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  def setup(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    self.create_variable(
      "w",
      WeightHParams(
        shape=[self.input_dim, self.output_dim],
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=wt,
        logical_axes=("embed", "kv"),
      ),
    )
    if self.use_bias:
      sharded = self.mesh_shape is not None and wt is not None
      self.create_variable(
        "b",
        WeightHParams(
          shape=[self.output_dim],
          init=WeightInit.Constant(0.0),
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=[wt[1]] if sharded else None,
          logical_axes=("kv",),
        ),
      )
    self.create_child("einsum", self.einsum_tpl.clone())

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[-1] != self.input_dim:
      raise ValueError(
        f"OneHeadedAttentionProjection expects [..., {self.input_dim}], got {inputs.shape}."
      )
    inputs = self._cast_to_fprop_dtype(inputs)
    out = self.einsum("...D,DH->...H", inputs, self.theta.w)
    if self.use_bias:
      out = out + self.theta.b
    return out

  def extend_step(self, inputs: jax.Array, *, time_step: jax.Array) -> jax.Array:
    del time_step  # A projection has no state.
    return self(inputs)


class MultiQueryDotProductAttention(dot_product_attention.DotProductAttention):
  """Multi-query / grouped-query attention with Pax's fields (module docstring).

  Attributes (beyond DotProductAttention's, whose defaults differ as Pax's MQA):
    num_kv_heads: key/value heads K (1 = multi-query); num_heads must be a multiple.
    headless_proj_tpl: template of the key/value projections when K == 1.
    chunked_attn_num_seq_split: > 1 splits the queries into this many chunks along T, attended
      one after another (a [B, N, T/n, S] logits tensor at a time); as Pax's, the probs are
      then not returned (None).
    local_window_size: (left, right) window of keys around each query; None is global.
  """

  num_kv_heads: int = 1
  internal_enable_per_dim_scale: bool = False
  headless_proj_tpl: LayerTpl = template_field(OneHeadedAttentionProjection)
  chunked_attn_num_seq_split: int = 1
  local_window_size: tuple[int, int] | None = None

  class WeightSharding(dot_product_attention.DotProductAttention.WeightSharding):
    """proj_headless: mesh split of a one-headed projection's w [D, H]."""

    proj_headless: SplitDimsMapping = None

  def setup(self) -> None:
    if self.dconv_qkv or self.combine_qkv:
      raise ValueError("MultiQueryDotProductAttention supports neither dconv_qkv nor combine_qkv.")
    if self.chunked_attn_num_seq_split < 1:
      raise ValueError(
        f"chunked_attn_num_seq_split must be >= 1, got {self.chunked_attn_num_seq_split}."
      )
    super().setup()

  def __call__(
    self,
    query_vec: jax.Array,
    key_vec: jax.Array,
    value_vec: jax.Array,
    atten_mask: jax.Array,
    query_segment_pos: jax.Array | None = None,
    key_segment_pos: jax.Array | None = None,
    deterministic: bool | None = None,
  ) -> tuple[jax.Array, jax.Array]:
    """As DotProductAttention's; with K > 1 key/value heads the probs come back [B, T, N, S].

    That layout is Pax's: its grouped path returns the [B, N, T, S] probs reshaped (not
    transposed) to [B, T, N, S]; with one key/value head they stay [B, N, T, S].
    """
    encoded, probs = super().__call__(
      query_vec,
      key_vec,
      value_vec,
      atten_mask,
      query_segment_pos,
      key_segment_pos,
      deterministic=deterministic,
    )
    if not self._headless and probs is not None:
      b, n, t, s = probs.shape
      probs = jnp.reshape(probs, (b, t, n, s))
    return encoded, probs

  def extend_step(
    self,
    query_vec: jax.Array,
    *,
    atten_mask: jax.Array,
    time_step: jax.Array,
    segment_pos: jax.Array | None = None,
    is_cross_attention: bool = False,
  ) -> jax.Array:
    """One step (query_vec [B, D], atten_mask [1|B, 1, S], segment_pos [B]) or, as Pax's, n
    steps (query_vec [B, T, D], atten_mask [1|B, 1, T, S], segment_pos [B, T]) from time_step.

    n steps run as T single steps at time_step, time_step + 1, ...: row t's keys and values are
    cached before row t attends, so row t sees the cache up to its own position (the causal
    case Pax's n-step decoding is for; Pax writes all T first, which differs only for a mask
    that lets row t see a later row of the same call).
    """
    if query_vec.ndim == 2 or isinstance(self, lpb_attention.DotProductAttentionWithLPB):
      return super().extend_step(
        query_vec,
        atten_mask=atten_mask,
        time_step=time_step,
        segment_pos=segment_pos,
        is_cross_attention=is_cross_attention,
      )
    if query_vec.ndim != 3 or atten_mask.ndim != 4:
      raise ValueError(
        "extend_step takes query_vec [B, D] with atten_mask [1|B, 1, S], or [B, T, D] with "
        f"[1|B, 1, T, S]; got {query_vec.shape} and {atten_mask.shape}."
      )
    time_step = jnp.asarray(time_step)
    outputs = []
    for t in range(query_vec.shape[1]):
      outputs.append(
        super().extend_step(
          query_vec[:, t],
          atten_mask=atten_mask[:, :, t],
          time_step=time_step + t,
          segment_pos=None if segment_pos is None else segment_pos[:, t],
          is_cross_attention=is_cross_attention,
        )
      )
    return jnp.stack(outputs, axis=1)  # [B, T, D]

  @property
  def _headless(self) -> bool:
    return self.num_kv_heads == 1

  def _kv_projection_tpl(self, tpl: LayerTpl, input_dim: int, dim_per_head: int) -> LayerTpl:
    if not self._headless:
      return tpl
    headless = self.headless_proj_tpl.clone().set(
      input_dim=input_dim, output_dim=dim_per_head, use_bias=self.use_bias
    )
    headless.weight_split_dims_mapping.wt = self.weight_split_dims_mapping.proj_headless
    return headless

  def _kv_step(self, proj, x, time_step):
    out = super()._kv_step(proj, x, time_step)
    return out[..., None, :] if self._headless else out  # [B, 1, H]: one head

  def _project(self, query_vec, key_vec, value_vec):
    query, key, value = super()._project(query_vec, key_vec, value_vec)
    if self._headless:  # [B, S, H] -> [B, S, 1, H]
      key, value = key[:, :, None], value[:, :, None]
    return query, key, value

  def _window_mask(self, query_pos: jax.Array, key_pos: jax.Array, dtype) -> jax.Array:
    """[T, S] additive mask hiding keys outside [t - left, t + right]."""
    left, right = self.local_window_size
    outside = (query_pos[:, None] > key_pos[None, :] + left) | (
      query_pos[:, None] < key_pos[None, :] - right
    )
    return jnp.where(outside, attention_masks.large_negative_number(dtype), 0).astype(dtype)

  def _dot_atten(self, query, key, value, atten_mask, relative_bias=None, deterministic=None):
    if self.local_window_size is not None:
      t, s = query.shape[1], key.shape[1]
      window = self._window_mask(jnp.arange(t), jnp.arange(s), atten_mask.dtype)
      atten_mask = jnp.minimum(atten_mask, window[None, None])  # [1|B, 1, T, S]
    n = self.chunked_attn_num_seq_split
    if n == 1:
      return super()._dot_atten(query, key, value, atten_mask, relative_bias, deterministic)
    t = query.shape[1]
    if t % n:
      raise ValueError(f"chunked_attn_num_seq_split={n} must divide the query length {t}.")
    chunk = t // n
    encoded = []
    for i in range(n):
      rows = slice(i * chunk, (i + 1) * chunk)
      mask_i = atten_mask if atten_mask.shape[2] == 1 else atten_mask[:, :, rows]
      bias_i = None
      if relative_bias is not None:
        bias_i = relative_bias if relative_bias.shape[2] == 1 else relative_bias[:, :, rows]
      enc_i, _ = super()._dot_atten(query[:, rows], key, value, mask_i, bias_i, deterministic)
      encoded.append(enc_i)  # [B, T/n, N, H]
    return jnp.concatenate(encoded, axis=1), None

  def _dot_atten_one_step(
    self, query, key_state_name, value_state_name, atten_mask, relative_bias=None, time_step=None
  ):
    if self.local_window_size is not None and query.ndim == 3:
      s = self.get_decode_state(key_state_name).shape[1]
      step = jnp.reshape(jnp.asarray(time_step, jnp.int32), [1])
      window = self._window_mask(step, jnp.arange(s), atten_mask.dtype)  # [1, S]
      atten_mask = jnp.minimum(atten_mask, window[None])  # [1|B, 1, S]
    return super()._dot_atten_one_step(
      query, key_state_name, value_state_name, atten_mask, relative_bias, time_step=time_step
    )


class MultiQueryDotProductAttentionLPB(
  MultiQueryDotProductAttention, lpb_attention.DotProductAttentionWithLPB
):
  """MultiQueryDotProductAttention with lazy prefix broadcast decoding (Pax's class name).

  The decode state follows DotProductAttentionWithLPB's layout (lazy_broadcast_prefix, n-step
  extend_step), with the key/value heads dim of K (1 for multi-query).
  """


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedInt = pytypes.NestedInt
NestedJTensor = pytypes.NestedJTensor
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE
