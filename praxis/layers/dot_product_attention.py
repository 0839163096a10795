"""Pax's DotProductAttention: multi-head attention with its fields, defaults and variable tree.

    atten = pax_fiddle.Config(DotProductAttention, name='atten', input_dim=64, hidden_dim=64,
                              num_heads=8)
    layer = base_layer.instantiate(atten)
    mask = attentions.causal_mask(x)                          # [1, 1, T, T]
    variables = layer.init(key, x, x, x, mask)
    encoded, probs = layer.apply(variables, x, x, x, mask)    # [B, T, D], [B, N, T, S]

As in Pax, queries are scaled by a learned `per_dim_scale` by default
(`internal_enable_per_dim_scale=True`); the variable tree is `query`, `key`, `value` (or
`combined_qkv`), `post`, `per_dim_scale`, plus `dconv_{q,k,v}`, `relative_bias`,
`layer_norm_{q,k}` when enabled.

Decoding (Pax's): applying `__call__` with `mutable=[DECODE_CACHE]` stores the projections of the
whole sequence (`key_state`, `value_state` [B, S, N, H], and `key_post_rotary_pos_emb`,
`query_state`, `key_post_dconv`, `value_post_dconv` when rotary / dconv are on); `extend_step`
projects one position, writes it at `time_step` and attends over the cache. With
`is_cross_attention=True` the cached keys/values (of the encoder) are only read.

Our extensions: `num_kv_heads` (None = Pax's multi-head; 1 = multi-query; K = grouped-query,
query head n uses key/value head n // (N / K)), and `attention_impl`, which picks how the
attention itself is computed (`select_attention_impl`):

  "einsum"  two einsums and a float32 softmax, as Pax; returns the probabilities. Every feature.
  "xla"     `jax.nn.dot_product_attention(implementation="xla")`: the same math in JAX's code.
  "cudnn"   `jax.nn.dot_product_attention(implementation="cudnn")`: cuDNN's fused (flash)
            attention on NVIDIA GPUs; never materializes [B, N, T, S].
  "auto"    (default) "cudnn" on a GPU for bfloat16 / float16 when the layer uses no feature the
            fused kernels lack, else "einsum".

The fused kinds return `None` for the probabilities and cannot apply a logit cap (Pax's
`atten_logit_cap`, tanh before the softmax), `attention_extra_logit`, a relative bias, attention
dropout in training, or a subclass's own logits (`_atten_logits`, e.g. relative or local
attention): "auto" keeps "einsum" for those, and asking for a fused kind with one raises.

Einsum letters: B batch, T query positions, S key positions, D model dims, N query heads,
K key/value heads, G query heads per key/value head, H dims per head.
"""

from __future__ import annotations

from typing import Mapping

from flax import linen as nn
import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import attention_masks
from praxis.layers import attention_parts
from praxis.layers import base_ops
from praxis.layers import embedding_softmax
from praxis.layers import stochastics

WeightInit = base_layer.WeightInit
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config
SplitDimsMapping = pytypes.SplitDimsMapping
DECODE_CACHE = base_layer.DECODE_CACHE


ATTENTION_IMPLS = ("auto", "einsum", "xla", "cudnn")
# dims per head cuDNN's fused attention takes (multiples of 8 up to 128; more needs Hopper+).
_CUDNN_MAX_HEAD_DIM = 128


def select_attention_impl(
  requested: str, platform: str, dtype, dim_per_head: int, einsum_only: str | None
) -> str:
  """The attention implementation to use (module docstring).

  Args:
    requested: one of ATTENTION_IMPLS.
    platform: `jax.default_backend()` ("cpu", "gpu", "tpu").
    dtype: the query's dtype.
    dim_per_head: H.
    einsum_only: why the layer needs the einsum path (a feature the fused kinds lack), or None.

  Returns:
    "einsum", "xla" or "cudnn".
  """
  if requested not in ATTENTION_IMPLS:
    raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}, got {requested!r}.")
  if requested == "auto":
    if einsum_only is not None or platform not in ("gpu", "cuda"):
      return "einsum"
    half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    fits = dim_per_head % 8 == 0 and dim_per_head <= _CUDNN_MAX_HEAD_DIM
    return "cudnn" if half and fits else "einsum"
  if requested != "einsum" and einsum_only is not None:
    raise ValueError(
      f"attention_impl={requested!r} cannot compute this layer's attention: {einsum_only}. "
      f"Use attention_impl='einsum' (or 'auto', which picks it)."
    )
  return requested


class DotProductAttention(base_layer.BaseLayer):
  """Multi-head dot-product attention (Pax's fields; module docstring for the layout).

  Attributes:
    input_dim: D, or a dict {'query': Dq, 'key': Dk, 'value': Dv}.
    hidden_dim: N * H.
    num_heads: N.
    dim_per_head: H; None means hidden_dim // num_heads.
    dropout_tpl: dropout on the attention probabilities (keep_prob set from
      atten_dropout_prob).
    atten_dropout_prob: that dropout's probability.
    proj_tpl: template of the query/key/value/post projections.
    dconv_qkv: Primer's causal depth-wise convolution after the projections (self-attention).
    dconv_kernel_size: its kernel size.
    internal_gshard_gaussian_init: GShard's Gaussian projection inits.
    combine_qkv: one [3, D, N, H] projection (self-attention only).
    combined_qkv_proj_tpl: its template.
    use_bias: projections have biases.
    output_proj_use_nhd_shape: the output projection's weight is [N, H, D].
    internal_enable_query_scale: scale the queries at all.
    internal_enable_per_dim_scale: scale them by the learned PerDimScale (else by
      1 / sqrt(H)).
    scale_query_by_dim_per_head: the fixed scale uses dim_per_head rather than
      hidden_dim // num_heads.
    scale_logits_by_head_dims: multiply the logits by 1 / sqrt(H) (before the cap).
    atten_logit_cap: if > 0, logits become cap * tanh(logits / cap).
    use_rotary_position_emb: rotate queries and keys by position (RoPE).
    consolidate_rope_key_state: cache rotated keys as `key_state` (no separate copy).
    rotary_position_emb_tpl: template of the rotary embedding.
    cast_rotary_position_emb: the rotary embedding returns fprop_dtype.
    relative_bias_tpl: optional RelativeBias template.
    attention_extra_logit: an extra logit in the softmax normaliser (None: none).
    ngrammer_tpl: Pax's VQNgrammer over the attention's per-head outputs, before the output
      projection (praxis.layers.ngrammer); with ngram_using_attention_scores it pairs positions
      by the attention probabilities.
    decode_cache: whether __call__ fills the decode cache when it is mutable.
    attention_mask_summary: record the mask as a summary.
    zero_fully_masked: queries that may attend to nothing output zeros.
    qk_einsum_tpl, pv_einsum_tpl: the two attention einsums.
    per_dim_scale_tpl: template of the query scale.
    causal_depthwise_conv1d_tpl: template of the dconv layers.
    ln_tpl: optional QK-norm template (layer_norm_q, layer_norm_k over H).
    decoding_maybe_shard_projections: shard the step projections while decoding.
    num_kv_heads: (ours) key/value heads; None = num_heads.
    attention_impl: (ours) "auto", "einsum", "xla" or "cudnn" (module docstring).
  """

  input_dim: int | dict[str, int] = 0
  hidden_dim: int = 0
  num_heads: int = 1
  dim_per_head: int | None = None
  dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  atten_dropout_prob: float = 0.0
  proj_tpl: LayerTpl = template_field(attention_parts.AttentionProjection)
  dconv_qkv: bool = False
  dconv_kernel_size: int = 3
  internal_gshard_gaussian_init: bool = False
  combine_qkv: bool = False
  combined_qkv_proj_tpl: LayerTpl = template_field(attention_parts.CombinedQKVProjectionLayer)
  use_bias: bool = True
  output_proj_use_nhd_shape: bool = False
  internal_enable_query_scale: bool = True
  internal_enable_per_dim_scale: bool = True
  scale_query_by_dim_per_head: bool = False
  scale_logits_by_head_dims: bool = False
  atten_logit_cap: float = 0.0
  use_rotary_position_emb: bool = False
  consolidate_rope_key_state: bool = False
  rotary_position_emb_tpl: LayerTpl | None = template_field(
    embedding_softmax.RotaryPositionalEmbedding
  )
  cast_rotary_position_emb: bool = True
  relative_bias_tpl: LayerTpl | None = template_field(None)
  attention_extra_logit: float | None = None
  ngrammer_tpl: LayerTpl | None = template_field(None)
  decode_cache: bool = True
  attention_mask_summary: bool = False
  zero_fully_masked: bool = False
  qk_einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)
  pv_einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)
  per_dim_scale_tpl: LayerTpl = template_field(attention_parts.PerDimScale)
  causal_depthwise_conv1d_tpl: LayerTpl = template_field(attention_parts.CausalDepthwiseConv1D)
  ln_tpl: LayerTpl | None = template_field(None)
  decoding_maybe_shard_projections: bool = False
  num_kv_heads: int | None = None
  attention_impl: str = "auto"

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """proj: mesh split of every projection weight [D, N, H]; dconv: of the dconv taps."""

    proj: SplitDimsMapping = None
    dconv: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """blnh: split of [B, L, N, H] query/key/value/context; bld: of the output [B, L, D]."""

    blnh: SplitDimsMapping = None
    bld: SplitDimsMapping = None

  # -- construction ------------------------------------------------------------------------------

  @property
  def _dim_per_head(self) -> int:
    if self.dim_per_head is not None:
      return self.dim_per_head
    if self.num_heads <= 0 or self.hidden_dim % self.num_heads:
      raise ValueError(
        f"{type(self).__name__}: hidden_dim {self.hidden_dim} is not a multiple "
        f"of num_heads {self.num_heads}; set dim_per_head or fix them."
      )
    return self.hidden_dim // self.num_heads

  @property
  def _kv_heads(self) -> int:
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  def _input_dims(self) -> tuple[int, int, int]:
    """(query, key, value) input dims."""
    if isinstance(self.input_dim, Mapping):
      return self.input_dim["query"], self.input_dim["key"], self.input_dim["value"]
    return self.input_dim, self.input_dim, self.input_dim

  def _create_rotary_position_emb(self, layer_tpl: LayerTpl, dim_per_head: int) -> None:
    tpl = layer_tpl.clone()
    tpl.embedding_dims = dim_per_head
    tpl.cast_as_fprop_dtype = self.cast_rotary_position_emb
    self.create_child("rotary_position_emb", tpl)

  def _kv_projection_tpl(self, tpl: LayerTpl, input_dim: int, dim_per_head: int) -> LayerTpl:
    """The key / value projection's template; a hook for MultiQueryDotProductAttention."""
    del input_dim, dim_per_head
    return tpl

  def _kv_step(self, proj: base_layer.BaseLayer, x: jax.Array, time_step: jax.Array) -> jax.Array:
    """One step of a key / value projection: [B, D] -> [B, K, H] (a hook, as above)."""
    return proj.extend_step(x, time_step=time_step)

  def setup(self) -> None:
    if not self.input_dim or not self.hidden_dim:
      raise ValueError(
        f"{type(self).__name__} needs input_dim and hidden_dim, got "
        f"{self.input_dim!r} and {self.hidden_dim!r}."
      )
    if self.ngrammer_tpl is not None:
      if type(self).extend_step is not DotProductAttention.extend_step:
        # Its own extend_step would skip the ngrammer: decoding would silently differ.
        raise NotImplementedError(
          f"{type(self).__name__}.ngrammer_tpl: only DotProductAttention's own extend_step "
          "applies the post-attention ngrammer here; use DotProductAttention."
        )
      self.create_child("ngrammer", self.ngrammer_tpl)
    if self.consolidate_rope_key_state and (self.dconv_qkv or not self.use_rotary_position_emb):
      raise ValueError(
        "consolidate_rope_key_state needs use_rotary_position_emb=True and dconv_qkv=False."
      )
    h, n, k = self._dim_per_head, self.num_heads, self._kv_heads
    if k <= 0 or n % k:
      raise ValueError(f"num_heads {n} must be a multiple of num_kv_heads {k}.")
    if k != n and (self.combine_qkv or self.dconv_qkv):
      raise ValueError("num_kv_heads != num_heads does not support combine_qkv or dconv_qkv.")
    wp = self.weight_split_dims_mapping
    query_dim, key_dim, value_dim = self._input_dims()

    def projection(input_dim, heads, std=None):
      tpl = self.proj_tpl.clone().set(
        input_dim=input_dim, num_heads=heads, dim_per_head=h, use_bias=self.use_bias
      )
      if std:
        tpl.params_init = WeightInit.Gaussian(std)
      tpl.weight_split_dims_mapping.wt = wp.proj
      return tpl

    gshard = self.internal_gshard_gaussian_init
    if self.combine_qkv:
      if not query_dim == key_dim == value_dim:
        raise ValueError("combine_qkv needs one input_dim for query, key and value.")
      tpl = self.combined_qkv_proj_tpl.clone().set(
        input_dim=query_dim, num_heads=n, dim_per_head=h, use_bias=self.use_bias
      )
      tpl.weight_split_dims_mapping.wt = wp.proj
      self.create_child("combined_qkv", tpl)
    else:
      key_tpl = projection(key_dim, k, key_dim**-0.5 if gshard else None)
      self.create_child("key", self._kv_projection_tpl(key_tpl, key_dim, h))
      self.create_child(
        "query", projection(query_dim, n, (query_dim * h) ** -0.5 if gshard else None)
      )
      value_tpl = projection(value_dim, k, value_dim**-0.5 if gshard else None)
      self.create_child("value", self._kv_projection_tpl(value_tpl, value_dim, h))
    if self.use_rotary_position_emb:
      self._create_rotary_position_emb(self.rotary_position_emb_tpl, h)
    if self.relative_bias_tpl is not None:
      tpl = self.relative_bias_tpl.clone()
      tpl.num_heads = n
      self.create_child("relative_bias", tpl)
    if self.dconv_qkv:
      tpl = self.causal_depthwise_conv1d_tpl.clone().set(
        kernel_size=self.dconv_kernel_size, hidden_dims=[n, h]
      )
      tpl.weight_split_dims_mapping.wt = wp.dconv
      for name in ("dconv_q", "dconv_k", "dconv_v"):
        self.create_child(name, tpl)
    if self.ln_tpl is not None:
      tpl = self.ln_tpl.clone()
      tpl.dim = h
      self.create_child("layer_norm_q", tpl)
      self.create_child("layer_norm_k", tpl)
    if self.internal_enable_query_scale and self.internal_enable_per_dim_scale:
      self.create_child("per_dim_scale", self.per_dim_scale_tpl.clone().set(dim=h))
    self.create_child(
      "atten_dropout", self.dropout_tpl.clone().set(keep_prob=1.0 - self.atten_dropout_prob)
    )
    post = self.proj_tpl.clone().set(
      input_dim=query_dim,
      num_heads=n,
      dim_per_head=h,
      is_output_projection=True,
      use_bias=self.use_bias,
      use_nhd_shape=self.output_proj_use_nhd_shape,
    )
    if gshard:
      post.params_init = WeightInit.Gaussian((n * h) ** -0.5)
    if self.output_proj_use_nhd_shape and isinstance(wp.proj, (list, tuple)) and len(wp.proj) == 3:
      post.weight_split_dims_mapping.wt = [wp.proj[1], wp.proj[2], wp.proj[0]]
    else:
      post.weight_split_dims_mapping.wt = wp.proj
    self.create_child("post", post)
    self.create_child("qk_einsum", self.qk_einsum_tpl.clone())
    self.create_child("pv_einsum", self.pv_einsum_tpl.clone())

  # -- sharding ----------------------------------------------------------------------------------

  def _shard(self, x: jax.Array, split, logical: tuple) -> jax.Array:
    """Pax's mesh split when configured; else our logical names (a no-op without rules)."""
    if split is not None and self.mesh_axis_names is not None:
      return base_layer.maybe_shard(x, split, self.mesh_axis_names)
    return nn.with_logical_constraint(x, logical)

  def _shard_blnh(self, x: jax.Array) -> jax.Array:
    if x.ndim != 4:  # e.g. a decode state reshaped by a transform: nothing to say
      return x
    heads = "heads" if x.shape[2] == self.num_heads else "kv_heads"
    return self._shard(x, self.activation_split_dims_mapping.blnh, ("batch", "length", heads, "kv"))

  def _shard_bnh(self, x: jax.Array) -> jax.Array:
    if x.ndim != 3:
      return x
    blnh = self.activation_split_dims_mapping.blnh
    split = None if blnh is None else [blnh[0], blnh[2], blnh[3]]
    heads = "heads" if x.shape[1] == self.num_heads else "kv_heads"
    return self._shard(x, split, ("batch", heads, "kv"))

  def _shard_bld(self, x: jax.Array) -> jax.Array:
    return self._shard(x, self.activation_split_dims_mapping.bld, ("batch", "length", "embed"))

  def _shard_bd(self, x: jax.Array) -> jax.Array:
    bld = self.activation_split_dims_mapping.bld
    split = None if bld is None else [bld[0], bld[2]]
    return self._shard(x, split, ("batch", "embed"))

  # -- attention pieces --------------------------------------------------------------------------

  def _scale_query(self, query: jax.Array) -> jax.Array:
    if not self.internal_enable_query_scale:
      return query
    if self.internal_enable_per_dim_scale:
      return self.per_dim_scale(query)
    if self.scale_query_by_dim_per_head and self.dim_per_head is not None:
      dim = self.dim_per_head
    else:
      dim = self.hidden_dim // self.num_heads
    return query * jnp.asarray(dim**-0.5, query.dtype)

  def _cap_logits(self, logits: jax.Array) -> jax.Array:
    if not self.atten_logit_cap or self.atten_logit_cap <= 0.0:
      return logits
    cap = jnp.asarray(self.atten_logit_cap, logits.dtype)
    # Caps both signs, so masking must come after.
    return cap * jnp.tanh(logits / cap)

  def _log_softmax_with_extra_logit(self, logits: jax.Array) -> jax.Array:
    """log softmax whose normaliser also counts exp(attention_extra_logit)."""
    max_logit = jnp.max(jax.lax.stop_gradient(logits), axis=-1, keepdims=True)
    extra = self.attention_extra_logit
    if extra is not None:
      extra = jnp.asarray(extra, max_logit.dtype)
      max_logit = jnp.maximum(max_logit, extra)
    total = jnp.sum(jnp.exp(logits - max_logit), axis=-1, keepdims=True)
    if extra is not None:
      total = total + jnp.exp(extra - max_logit)
    return logits - jnp.log(total) - max_logit

  def _softmax(self, padded_logits: jax.Array, dtype) -> jax.Array:
    if self.attention_extra_logit is None:
      return jax.nn.softmax(padded_logits, axis=-1).astype(dtype)
    return jnp.exp(self._log_softmax_with_extra_logit(padded_logits)).astype(dtype)

  def _dropout(self, probs: jax.Array, deterministic: bool | None) -> jax.Array:
    # Our Dropout takes `deterministic`; None keeps the layer's own default (eval: no dropout).
    if deterministic is None:
      deterministic = True
    return self.atten_dropout(probs, deterministic)

  def _atten_logits(self, query: jax.Array, key: jax.Array) -> jax.Array:
    """query [B, T, N, H], key [B, S, K, H] -> logits [B, N, T, S].

    With the default EinsumOp, half-precision inputs give float32 logits straight from the
    matmul's accumulator (no rounding to bf16 and back before the softmax).
    """
    b, t, n, h = query.shape
    k = key.shape[2]
    kwargs = {}
    if type(self.qk_einsum) is base_ops.EinsumOp and query.dtype != jnp.float32:
      kwargs["preferred_element_type"] = jnp.float32
    if k == n:  # a 4-D einsum: the grouped form below costs extra [B, N, T, S] copies
      return self.qk_einsum("BTNH,BSNH->BNTS", query, key, **kwargs)
    grouped = query.reshape(b, t, k, n // k, h)  # head n = k * G + g
    logits = self.qk_einsum("BTKGH,BSKH->BKGTS", grouped, key, **kwargs)
    return logits.reshape(b, n, t, key.shape[1])

  def _atten_context(self, probs: jax.Array, value: jax.Array) -> jax.Array:
    """probs [B, N, T, S], value [B, S, K, H] -> [B, T, N, H]."""
    b, n, t, s = probs.shape
    k, h = value.shape[2], value.shape[3]
    if k == n:
      return self.pv_einsum("BNTS,BSNH->BTNH", probs, value)
    grouped = probs.reshape(b, k, n // k, t, s)
    return self.pv_einsum("BKGTS,BSKH->BTKGH", grouped, value).reshape(b, t, n, h)

  def _check_mask(self, atten_mask: jax.Array, b: int, t: int, s: int) -> None:
    if (
      atten_mask.ndim != 4
      or atten_mask.shape[0] not in (1, b)
      or atten_mask.shape[1] not in (1, self.num_heads)
      or atten_mask.shape[2] not in (1, t)
      or atten_mask.shape[3] != s
    ):
      raise ValueError(
        f"atten_mask must be [1|B, 1, 1|T, S] = [1|{b}, 1, 1|{t}, {s}], got {atten_mask.shape}."
      )

  def _einsum_only(self, relative_bias, deterministic) -> str | None:
    """Why this call needs the einsum path (a feature the fused kinds lack), or None."""
    if self.atten_logit_cap and self.atten_logit_cap > 0.0:
      return "atten_logit_cap (a tanh cap on the logits)"
    if self.attention_extra_logit is not None:
      return "attention_extra_logit"
    if relative_bias is not None:
      return "a relative bias"
    if self.atten_dropout_prob > 0.0 and deterministic is False:
      return "attention dropout"
    if type(self)._atten_logits is not DotProductAttention._atten_logits:
      return f"{type(self).__name__}'s own logits"
    return None

  def _attention_impl(self, query: jax.Array, relative_bias, deterministic) -> str:
    return select_attention_impl(
      self.attention_impl,
      jax.default_backend(),
      query.dtype,
      query.shape[-1],
      self._einsum_only(relative_bias, deterministic),
    )

  def _fused_atten(
    self, query: jax.Array, key: jax.Array, value: jax.Array, keep: jax.Array, impl: str
  ) -> jax.Array:
    """jax.nn.dot_product_attention: query [B, T, N, H] (scaled), key/value [B, S, K, H] ->
    [B, T, N, H]."""
    b, t, _, h = query.shape
    if impl == "cudnn":  # cuDNN takes the mask as a bias of [B|1, 1, T, S]
      keep = jnp.broadcast_to(keep, (keep.shape[0], 1, t, keep.shape[3]))
    return jax.nn.dot_product_attention(
      query.astype(key.dtype),
      key,
      value,
      mask=keep,
      scale=(1.0 / np.sqrt(h)) if self.scale_logits_by_head_dims else 1.0,
      implementation=impl,
    )

  def _dot_atten(
    self,
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    atten_mask: jax.Array,
    relative_bias: jax.Array | None = None,
    deterministic: bool | None = None,
    query_scaled: bool = False,
  ) -> tuple[jax.Array, jax.Array | None]:
    """query [B, T, N, H], key/value [B, S, K, H] -> (encoded [B, T, N, H], probs [B, N, T, S]).

    probs is None on the fused paths (attention_impl, module docstring). query_scaled: the
    query already carries its scale (`_folds_query_scale`).
    """
    query, key, value = self._shard_blnh(query), self._shard_blnh(key), self._shard_blnh(value)
    b, s, _, h = key.shape
    t = query.shape[1]
    self._check_mask(atten_mask, b, t, s)
    if self.attention_mask_summary:
      self.add_summary("attention_mask", atten_mask)
    # One boolean [1|B, 1, 1|T, S] mask, broadcast over the heads inside the masking op: an f32
    # mask compared per head would be hoisted out of a scanned stack as [B, N, T, S] loop state.
    keep = attention_masks.keep_mask(atten_mask)
    fill = attention_masks.large_negative_number(jnp.float32)
    # Inside a scanned stack the mask and the fill value are loop-invariant, and XLA would hoist
    # their broadcasts to [B, N, T, S] out of the loop and carry them as loop state (two
    # [B, N, T, S] buffers for the whole step). Tying them to the query (which changes every
    # iteration) keeps the broadcasts inside the fused masking op; the barrier computes nothing.
    query, keep, fill = jax.lax.optimization_barrier((query, keep, fill))
    impl = self._attention_impl(query, relative_bias, deterministic)
    if not query_scaled:
      query = self._scale_query(query)
    if impl != "einsum":
      encoded, probs = self._fused_atten(query, key, value, keep, impl), None
    else:
      logits = self._atten_logits(query, key)  # [B, N, T, S]
      if relative_bias is not None:
        logits = logits + relative_bias
      logits = checkpoint_name(logits, "logits")
      if self.scale_logits_by_head_dims:
        logits = logits * jnp.asarray(1.0 / np.sqrt(h), logits.dtype)
      # Softmax in float32 whatever the fprop dtype.
      logits = self._cap_logits(logits.astype(jnp.float32))
      padded_logits = jnp.where(keep, logits, fill)
      probs = self._softmax(padded_logits, key.dtype)
      probs = self._dropout(probs, deterministic)
      encoded = self._atten_context(probs, value)  # [B, T, N, H]
    if self.zero_fully_masked:
      attends = jnp.any(keep, axis=-1)[:, 0, :, None, None]  # [B|1, T|1, 1, 1]
      encoded = encoded * attends.astype(encoded.dtype)
    encoded = checkpoint_name(encoded, "context")
    return self._shard_blnh(encoded), probs

  def _folds_query_scale(self) -> bool:
    """Whether __call__ applies the per-dim query scale to the query projection's weight.

    q = (x @ W) * s equals x @ (W * s): scaling the [D, N, H] weight instead of the [B, T, N, H]
    query leaves nothing of B x T size for the scale's gradient (s's gradient is
    sum(W * dW') over the weight), so autodiff keeps no unscaled query alive through the
    backward pass. Only when nothing sits between the projection and the scale (no dconv,
    rotary embedding or query LayerNorm) and the pieces are this module's own.
    """
    if not (self.internal_enable_query_scale and self.internal_enable_per_dim_scale):
      return False
    if self.dconv_qkv or self.use_rotary_position_emb or self.ln_tpl is not None:
      return False
    cls = type(self)
    for method in ("_project", "_dot_atten", "_scale_query"):
      if getattr(cls, method) is not getattr(DotProductAttention, method):
        return False
    proj = self.combined_qkv if self.combine_qkv else self.query
    own = (attention_parts.AttentionProjection, attention_parts.CombinedQKVProjectionLayer)
    return type(self.per_dim_scale) is attention_parts.PerDimScale and type(proj) in own

  def _project(self, query_vec, key_vec, value_vec, query_scale=None):
    """(query, key, value) [B, T|S, N|K, H]; query_scale [H] is folded into the query weight."""
    if self.combine_qkv:
      if not (query_vec is key_vec and query_vec is value_vec):
        raise ValueError(
          "combine_qkv is for self-attention: pass the same array as query_vec, "
          "key_vec and value_vec."
        )
      if query_scale is None:
        return self.combined_qkv(query_vec)
      return self.combined_qkv(query_vec, query_scale=query_scale)
    query = (
      self.query(query_vec)
      if query_scale is None
      else self.query(query_vec, query_scale=query_scale)
    )
    return (
      checkpoint_name(query, "query_proj"),
      checkpoint_name(self.key(key_vec), "key_proj"),
      checkpoint_name(self.value(value_vec), "value_proj"),
    )

  # -- forward -----------------------------------------------------------------------------------

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
    """Attends from query_vec [B, T, D] over key_vec / value_vec [B, S, D].

    Args:
      query_vec: [B, T, D].
      key_vec: [B, S, D].
      value_vec: [B, S, D].
      atten_mask: additive [1|B, 1, 1|T, S].
      query_segment_pos: [B, T] positions (rotary, dconv, relative bias).
      key_segment_pos: [B, S].
      deterministic: (ours) False applies attention dropout (needs a "dropout" rng).

    Returns:
      (encoded [B, T, D], atten_probs [B, N, T, S]).
    """
    fold = self._folds_query_scale()
    query_scale = self.per_dim_scale.factor(self.fprop_dtype) if fold else None
    # A subclass's own _project takes no query_scale (then fold is False).
    scale_arg = (query_scale,) if fold else ()
    query_proj, key_proj, value_proj = self._project(query_vec, key_vec, value_vec, *scale_arg)
    if not self.consolidate_rope_key_state:
      self._fprop_update_decode_state("key_state", key_proj)
    self._fprop_update_decode_state("value_state", value_proj)
    if self.dconv_qkv:
      self._fprop_update_decode_state("query_state", query_proj)
      query_proj = self.dconv_q(query_proj, axis=1, segment_pos=query_segment_pos)
      key_proj = self.dconv_k(key_proj, axis=1, segment_pos=key_segment_pos)
      self._fprop_update_decode_state("key_post_dconv", key_proj)
      value_proj = self.dconv_v(value_proj, axis=1, segment_pos=key_segment_pos)
      self._fprop_update_decode_state("value_post_dconv", value_proj)
    if self.use_rotary_position_emb:
      query_proj = self.rotary_position_emb(query_proj, query_segment_pos)
      key_proj = self.rotary_position_emb(key_proj, key_segment_pos)
      self._fprop_update_decode_state(
        "key_state" if self.consolidate_rope_key_state else "key_post_rotary_pos_emb", key_proj
      )
    relative_bias = None
    if self.relative_bias_tpl is not None:
      b = query_vec.shape[0]
      if query_segment_pos is None:
        query_segment_pos = jnp.broadcast_to(
          jnp.arange(query_vec.shape[1]), (b, query_vec.shape[1])
        )
      if key_segment_pos is None:
        key_segment_pos = jnp.broadcast_to(
          jnp.arange(key_vec.shape[1]), (key_vec.shape[0], key_vec.shape[1])
        )
      relative_bias = self.relative_bias(query_segment_pos, key_segment_pos)
    if self.ln_tpl is not None:
      query_proj = self.layer_norm_q(query_proj)
      key_proj = self.layer_norm_k(key_proj)
    dot_atten_kwargs = {"query_scaled": True} if fold else {}
    encoded, atten_probs = self._dot_atten(
      query_proj,
      key_proj,
      value_proj,
      atten_mask,
      relative_bias,
      deterministic=deterministic,
      **dot_atten_kwargs,
    )
    if self.ngrammer_tpl is not None:
      encoded = self._post_attention_ngrammer(encoded, atten_probs, key_segment_pos)
    encoded = self._shard_bld(self.post(encoded))  # [B, T, D]
    return checkpoint_name(encoded, "out_proj"), atten_probs

  # -- decoding ----------------------------------------------------------------------------------

  @nn.nowrap
  def _fprop_update_decode_state(self, name: str, value: jax.Array) -> None:
    """Caches `value` while decoding (decode cache mutable); a no-op in training and init."""
    if (
      not self.decode_cache
      or not self.is_mutable_collection(DECODE_CACHE)
      or self.is_initializing()
    ):
      return
    self.update_decode_state(name, value)

  def decoding_state_sequence_length(self) -> int:
    return self.get_decode_state("key_state").shape[1]

  @nn.nowrap
  def extend_decode_state(
    self, name: str, value: jax.Array, time_step: jax.Array, time_dim: int
  ) -> jax.Array:
    """Writes value ([B, N, H], or with its time dim) into cache `name` at time_step."""
    state = self.get_decode_state(name)
    if state is None:
      raise ValueError(
        f"{type(self).__name__}.extend_step found no decode state {name!r}: first "
        f"apply __call__ to the prefix with mutable=['decoder_cache']."
      )
    if value.ndim == state.ndim - 2:
      # One key / value head projected without its heads dim ([B, H], multi-query): the state
      # keeps it ([B, S, 1, H]).
      value = jnp.expand_dims(value, (time_dim, time_dim + 1))
    elif value.ndim == state.ndim - 1 and state.shape[-2] == 1 and value.shape[-2] != 1:
      # n steps of such a head ([B, T, H]): add the heads dim.
      value = jnp.expand_dims(value, -2)
    elif value.ndim == time_dim + 2:
      value = jnp.expand_dims(value, time_dim)
    start = [0] * value.ndim
    start[time_dim] = jnp.asarray(time_step, jnp.int32)
    new_state = jax.lax.dynamic_update_slice(state, value.astype(state.dtype), start)
    self.update_decode_state(name, new_state)
    return new_state

  def _cached_kv(self, key_state_name: str, value_state_name: str, batch: int):
    """Cached key/value [B, S, K, H], repeated when the query batch is a multiple (samples)."""
    key = self._shard_blnh(self.get_decode_state(key_state_name))
    value = self._shard_blnh(self.get_decode_state(value_state_name))
    if batch != key.shape[0]:
      if batch % key.shape[0]:
        raise ValueError(
          f"query batch {batch} is not a multiple of the cache batch {key.shape[0]}."
        )
      key = jnp.repeat(key, batch // key.shape[0], axis=0)
      value = jnp.repeat(value, batch // value.shape[0], axis=0)
    return key, value

  def _repeat_mask(self, atten_mask: jax.Array, batch: int, cache_batch: int) -> jax.Array:
    if atten_mask.shape[0] not in (1, batch):
      atten_mask = jnp.repeat(atten_mask, batch // cache_batch, axis=0)
    return atten_mask

  def _dot_atten_one_step(
    self,
    query: jax.Array,
    key_state_name: str,
    value_state_name: str,
    atten_mask: jax.Array,
    relative_bias: jax.Array | None = None,
    time_step: jax.Array | None = None,
  ) -> tuple[jax.Array, jax.Array]:
    """query [B, N, H] over the cache -> (encoded [B, N, H], probs [B, N, S])."""
    del time_step
    cache_batch = self.get_decode_state(key_state_name).shape[0]
    key, value = self._cached_kv(key_state_name, value_state_name, query.shape[0])
    atten_mask = self._repeat_mask(atten_mask, query.shape[0], cache_batch)
    query = self._shard_bnh(query)
    b, s, _, h = key.shape
    if atten_mask.ndim != 3 or atten_mask.shape[0] not in (1, b) or atten_mask.shape[2] != s:
      raise ValueError(
        f"extend_step atten_mask must be [1|B, 1, S] = [1|{b}, 1, {s}], got {atten_mask.shape}."
      )
    logits = self._atten_logits(self._scale_query(query)[:, None], key)[:, :, 0]  # [B, N, S]
    if relative_bias is not None:
      logits = logits + jnp.squeeze(relative_bias, axis=2)
    if self.scale_logits_by_head_dims:
      logits = logits * (1.0 / np.sqrt(h))
    logits = self._cap_logits(logits).astype(jnp.float32)
    probs = self._softmax(attention_masks.apply_mask_to_logits(logits, atten_mask), key.dtype)
    encoded = self._atten_context(probs[:, :, None], value)[:, 0]  # [B, N, H]
    if self.zero_fully_masked:
      threshold = attention_masks.large_negative_number(jnp.float32) / 2
      fully_masked = jnp.all(atten_mask < threshold, axis=-1)[..., None]  # [B, 1, 1]
      encoded = encoded * (1 - fully_masked).astype(encoded.dtype)
    return self._shard_bnh(encoded), probs

  def extend_step(
    self,
    query_vec: jax.Array,
    *,
    atten_mask: jax.Array,
    time_step: jax.Array,
    segment_pos: jax.Array | None = None,
    is_cross_attention: bool = False,
  ) -> jax.Array:
    """One decoding step: query_vec [B, D] at time_step -> [B, D] (apply with mutable cache).

    Args:
      query_vec: [B, D].
      atten_mask: [1|b|B, 1, S] additive mask over the cache (causality included).
      time_step: scalar step, 0-based.
      segment_pos: [B] position in the segment; default time_step.
      is_cross_attention: the cache holds an encoder's keys/values: read, never written.
    """
    if query_vec.ndim != 2:
      raise ValueError(f"extend_step takes query_vec [B, D], got {query_vec.shape}.")
    time_step = jnp.asarray(time_step)
    time_dim = 1

    def extend(name, value):
      return self._shard_blnh(self.extend_decode_state(name, value, time_step, time_dim))

    if self.combine_qkv:
      query_proj, key_proj, value_proj = self.combined_qkv.extend_step(
        query_vec, time_step=time_step
      )
    else:
      query_proj = self.query.extend_step(query_vec, time_step=time_step)
      if not is_cross_attention:
        key_proj = self._kv_step(self.key, query_vec, time_step)
        value_proj = self._kv_step(self.value, query_vec, time_step)
    key_name, value_name = "key_state", "value_state"
    if not is_cross_attention:
      if not (self.use_rotary_position_emb and self.consolidate_rope_key_state):
        key_state = extend(key_name, key_proj)
      value_state = extend(value_name, value_proj)
    if self.dconv_qkv:
      key_name, value_name = "key_post_dconv", "value_post_dconv"
      query_state = extend("query_state", query_proj)
      query_proj = self.dconv_q.extend_step(
        query_state, axis=time_dim, step=time_step, segment_pos=segment_pos
      )
      if not is_cross_attention:
        key_proj = self.dconv_k.extend_step(
          key_state, axis=time_dim, step=time_step, segment_pos=segment_pos
        )
        value_proj = self.dconv_v.extend_step(
          value_state, axis=time_dim, step=time_step, segment_pos=segment_pos
        )
        extend(key_name, key_proj)
        extend(value_name, value_proj)
    if self.use_rotary_position_emb:
      key_name = "key_state" if self.consolidate_rope_key_state else "key_post_rotary_pos_emb"
      position = (
        jnp.broadcast_to(time_step, [query_vec.shape[0]]) if segment_pos is None else segment_pos
      )
      query_proj = self.rotary_position_emb.extend_step(query_proj, position)
      if not is_cross_attention:
        key_proj = self.rotary_position_emb.extend_step(key_proj, position)
        extend(key_name, key_proj)
    relative_bias = None
    if self.relative_bias_tpl is not None:
      relative_bias = self.relative_bias.extend_step(
        seq_length=self.decoding_state_sequence_length(), time_step=time_step
      )
    encoded, probs = self._dot_atten_one_step(
      query_proj, key_name, value_name, atten_mask, relative_bias, time_step=time_step
    )
    if self.ngrammer_tpl is not None:
      # The ngrammer sees every position's heads so far: it pairs this one with an earlier one.
      encoded = self.ngrammer.extend_step(
        extend("encoded_pre_ngrammer", encoded),
        step=time_step,
        merge_heads=False,
        attention_score=probs if self.ngrammer_tpl.ngram_using_attention_scores else None,
      )  # [B, N, H]
    return self._shard_bd(self.post.extend_step(encoded, time_step=time_step))

  def _post_attention_ngrammer(self, encoded, atten_probs, key_segment_pos) -> jax.Array:
    """Pax's post-attention VQNgrammer on encoded [B, T, N, H] (cached for decoding)."""
    self._fprop_update_decode_state("encoded_pre_ngrammer", encoded)
    return self.ngrammer(
      input_ids=None,
      input_embs=encoded,
      segment_pos=key_segment_pos,
      merge_heads=False,
      attention_scores=atten_probs if self.ngrammer_tpl.ngram_using_attention_scores else None,
    )  # [B, T, N, H]

  def transform_decode_state(self, transform_fn) -> None:
    """Applies transform_fn(state, batch_dim=0, time_dim=1) to every cached array."""
    for name, state in self.variables[DECODE_CACHE].items():
      if isinstance(state, jax.Array):
        self.update_decode_state(name, self._shard_blnh(transform_fn(state, 0, 1)))

  def lazy_broadcast_prefix(self, num_suffix_samples: int, suffix_length: int) -> None:
    raise NotImplementedError(
      "lazy_broadcast_prefix (lazy_prefix_broadcast=True) needs the attention layers to be "
      "DotProductAttentionWithLPB (praxis.layers.lpb_attention): set tr_atten_tpl to it."
    )

  def right_align_decode_state_with_prefix(self, max_prefix_size: int, right_align_fn) -> None:
    raise NotImplementedError(
      "right_align_decode_state_with_prefix needs the attention layers to be "
      "DotProductAttentionWithLPB (praxis.layers.lpb_attention): set tr_atten_tpl to it."
    )
