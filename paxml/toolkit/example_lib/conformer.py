"""bobbin's Conformer in flax.linen: its blocks and the CNN + Conformer encoder.

Part of `asrnn` (bobbin's `example_lib.asrnn`, which re-exports these names); module names,
fields, defaults and variable trees are bobbin's. Modules with dropout take `deterministic` (or
`is_eval`) as a field or call argument (flax's `merge_param`: exactly one of the two).
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from paxml.toolkit.example_lib.asr_frontend import Array
from paxml.toolkit.example_lib.asr_frontend import check_paddings
from paxml.toolkit.example_lib.asr_frontend import CnnEncoder
from paxml.toolkit.example_lib.asr_frontend import default_kernel_init
from paxml.toolkit.example_lib.asr_frontend import InitializerFn
from paxml.toolkit.example_lib.asr_frontend import PaddedBatchNorm


class ConformerConvBlock(nn.Module):
  """The Conformer convolution module with its residual connection.

  LayerNorm, Dense to 2d, GLU, padded frames zeroed, depthwise Conv over
  time, PaddedBatchNorm, swish, Dense to d, dropout, + input.

  Attributes:
    residual_dropout_prob: dropout on the block output before the residual add.
    kernel_size: the depthwise convolution's width.
    use_conv_bias: a bias in the depthwise convolution.
    deterministic: disables dropout and uses BatchNorm's running averages.
    batch_norm_axis_name: the pmap axis BatchNorm statistics are summed over.
    pre_conv_kernel_init / pre_conv_bias_init: the Dense before the GLU.
    conv_kernel_init: the depthwise convolution.
    post_conv_kernel_init / post_conv_bias_init: the output Dense.
  """

  residual_dropout_prob: float = 0.0
  kernel_size: int = 5
  use_conv_bias: bool = False
  deterministic: bool | None = None
  batch_norm_axis_name: str | None = "batch"
  pre_conv_kernel_init: InitializerFn = default_kernel_init
  pre_conv_bias_init: InitializerFn = nn.initializers.zeros_init()
  conv_kernel_init: InitializerFn = default_kernel_init
  post_conv_kernel_init: InitializerFn = default_kernel_init
  post_conv_bias_init: InitializerFn = nn.initializers.zeros_init()

  @nn.compact
  def __call__(
    self,
    x: Array,
    x_paddings: Array,
    deterministic: bool | None = None,
    *,
    batch_norm_axis_name: str | None = None,
  ) -> Array:
    check_paddings("ConformerConvBlock", x, x_paddings)
    deterministic = nn.merge_param("deterministic", deterministic, self.deterministic)
    axis_name = batch_norm_axis_name or self.batch_norm_axis_name
    model_dims = x.shape[-1]
    y = nn.LayerNorm()(x)
    y = nn.Dense(
      features=2 * model_dims,
      kernel_init=self.pre_conv_kernel_init,
      bias_init=self.pre_conv_bias_init,
    )(y)
    y = nn.glu(y) * (1.0 - x_paddings[..., np.newaxis])
    y = nn.Conv(
      features=model_dims,
      kernel_size=(self.kernel_size,),
      use_bias=self.use_conv_bias,
      padding="SAME",
      feature_group_count=model_dims,
      kernel_init=self.conv_kernel_init,
    )(y)
    y = PaddedBatchNorm(use_running_average=deterministic, axis_name=axis_name)(y, x_paddings)
    y = nn.swish(y)
    y = nn.Dense(
      features=model_dims,
      kernel_init=self.post_conv_kernel_init,
      bias_init=self.post_conv_bias_init,
    )(y)
    if self.residual_dropout_prob > 0:
      y = nn.Dropout(self.residual_dropout_prob)(y, deterministic=deterministic)
    return x + y


class ConformerFfnBlock(nn.Module):
  """The Conformer feed-forward module: x + residual_weight * FFN(LayerNorm(x)).

  Attributes:
    hidden_dims: hidden width.
    hidden_dropout_prob: dropout on the hidden activations.
    residual_dropout_prob: dropout on the FFN output before the residual add.
    residual_weight: the FFN output's weight (1/2 in the Conformer paper).
    deterministic: disables dropout.
    kernel_init / bias_init: both Dense layers.
  """

  hidden_dims: int = 1024
  hidden_dropout_prob: float = 0.0
  residual_dropout_prob: float = 0.0
  residual_weight: float = 0.5
  deterministic: bool | None = None
  kernel_init: InitializerFn = default_kernel_init
  bias_init: InitializerFn = nn.initializers.zeros_init()

  @nn.compact
  def __call__(self, x: Array, deterministic: bool | None = None) -> Array:
    deterministic = nn.merge_param("deterministic", deterministic, self.deterministic)
    y = nn.LayerNorm()(x)
    y = nn.Dense(features=self.hidden_dims, kernel_init=self.kernel_init, bias_init=self.bias_init)(
      y
    )
    y = nn.swish(y)
    if self.hidden_dropout_prob > 0:
      y = nn.Dropout(self.hidden_dropout_prob)(y, deterministic=deterministic)
    y = nn.Dense(features=x.shape[-1], kernel_init=self.kernel_init, bias_init=self.bias_init)(y)
    if self.residual_dropout_prob > 0:
      y = nn.Dropout(self.residual_dropout_prob)(y, deterministic=deterministic)
    return x + self.residual_weight * y


# 1 / softplus(0): a zero-initialized `query_scale` starts as a scale of 1.
_R_SOFTPLUS_0 = 1.442695041


def _scaled_query_attention(
  query: Array,
  key: Array,
  value: Array,
  bias: Array | None = None,
  mask: Array | None = None,
  broadcast_dropout: bool = True,
  dropout_rng: jax.Array | None = None,
  dropout_rate: float = 0.0,
  deterministic: bool = False,
  dtype: Any = None,
  precision: Any = None,
  *,
  query_scale: Array,
) -> Array:
  """flax's dot-product attention on `query * query_scale` (per head dimension).

  Every argument is named: flax passes an `attention_fn` only the keywords
  its signature lists (a `**kwargs` would silently lose the mask).
  """
  return nn.dot_product_attention(
    query * query_scale,
    key,
    value,
    bias=bias,
    mask=mask,
    broadcast_dropout=broadcast_dropout,
    dropout_rng=dropout_rng,
    dropout_rate=dropout_rate,
    deterministic=deterministic,
    dtype=dtype,
    precision=precision,
  )


class ConformerMhsaBlock(nn.Module):
  """The Conformer self-attention module: x + Dropout(MHSA(LayerNorm(x))).

  Padded frames are masked as keys and as queries. With `use_query_scaler`
  every query is multiplied by a learned per-dimension scale
  `1.442695041 * softplus(query_scale)` (1 at initialization) on top of the
  usual 1/sqrt(head_dim).

  Attributes:
    num_heads: attention heads.
    residual_dropout_prob: dropout on the attention output before the residual add.
    attention_dropout_prob: dropout on the attention probabilities.
    deterministic: disables dropout.
    use_query_scaler: learn the per-dimension query scale `query_scale`.
    query_scale_init: its initializer.
    kernel_init / bias_init: the query, key, value and output projections.
  """

  num_heads: int = 8
  residual_dropout_prob: float = 0
  attention_dropout_prob: float = 0
  deterministic: bool | None = None
  use_query_scaler: bool = True
  query_scale_init: InitializerFn = nn.initializers.zeros_init()
  kernel_init: InitializerFn = default_kernel_init
  bias_init: InitializerFn = nn.initializers.zeros_init()

  @nn.compact
  def __call__(self, x: Array, x_paddings: Array, deterministic: bool | None = None) -> Array:
    check_paddings("ConformerMhsaBlock", x, x_paddings)
    deterministic = nn.merge_param("deterministic", deterministic, self.deterministic)
    y = nn.LayerNorm()(x)
    valid = x_paddings < 0.5
    mask = nn.make_attention_mask(valid, valid, dtype=jnp.float32)
    attention_fn = nn.dot_product_attention
    if self.use_query_scaler:
      head_dims = x.shape[-1] // self.num_heads
      scale = self.param("query_scale", self.query_scale_init, (head_dims,))
      attention_fn = functools.partial(
        _scaled_query_attention, query_scale=_R_SOFTPLUS_0 * jax.nn.softplus(scale)
      )
    # bobbin's flax.linen.SelfAttention (deprecated since): same parameters, same name.
    y = nn.MultiHeadDotProductAttention(
      num_heads=self.num_heads,
      dropout_rate=self.attention_dropout_prob,
      kernel_init=self.kernel_init,
      bias_init=self.bias_init,
      attention_fn=attention_fn,
      broadcast_dropout=False,
      name="SelfAttention_0",
    )(y, mask=mask, deterministic=deterministic)
    if self.residual_dropout_prob > 0:
      y = nn.Dropout(self.residual_dropout_prob)(y, deterministic=deterministic)
    return x + y


class ConformerBlock(nn.Module):
  """A Conformer block: half FFN, self-attention, convolution, half FFN, LayerNorm.

  Attributes:
    kernel_size: the convolution module's width.
    ffn_width_multiplier: FFN hidden width = int(multiplier * model dims).
    num_heads: attention heads.
    conv_residual_dropout_prob: ConformerConvBlock.residual_dropout_prob.
    mhsa_residual_dropout_prob: ConformerMhsaBlock.residual_dropout_prob.
    mhsa_attention_dropout_prob: ConformerMhsaBlock.attention_dropout_prob.
    ffn_residual_dropout_prob: both FFNs' residual_dropout_prob.
    ffn_hidden_dropout_prob: both FFNs' hidden_dropout_prob.
    is_eval: evaluation mode for every sub-block.
    skip_head_ffn, skip_mhsa, skip_lconv, skip_tail_ffn, skip_final_ln: leave
      that part out.
    default_kernel_init: the kernel initializer where none is given below.
    head_ffn_kernel_init, mhsa_kernel_init, lconv_pre_conv_kernel_init,
      lconv_conv_kernel_init, lconv_post_conv_kernel_init,
      tail_ffn_kernel_init: per-part kernel initializers.
  """

  kernel_size: int = 5
  ffn_width_multiplier: float = 4.0
  num_heads: int = 8
  conv_residual_dropout_prob: float = 0
  mhsa_residual_dropout_prob: float = 0.1
  mhsa_attention_dropout_prob: float = 0
  ffn_residual_dropout_prob: float = 0.1
  ffn_hidden_dropout_prob: float = 0
  is_eval: bool | None = None

  skip_head_ffn: bool = False
  skip_mhsa: bool = False
  skip_lconv: bool = False
  skip_tail_ffn: bool = False
  skip_final_ln: bool = False

  default_kernel_init: InitializerFn | None = default_kernel_init
  head_ffn_kernel_init: InitializerFn | None = None
  mhsa_kernel_init: InitializerFn | None = None
  lconv_pre_conv_kernel_init: InitializerFn | None = None
  lconv_conv_kernel_init: InitializerFn | None = None
  lconv_post_conv_kernel_init: InitializerFn | None = None
  tail_ffn_kernel_init: InitializerFn | None = None

  def _init(self, specific: InitializerFn | None) -> InitializerFn:
    return specific or self.default_kernel_init

  def _ffn(self, kernel_init: InitializerFn | None, model_dims: int) -> ConformerFfnBlock:
    return ConformerFfnBlock(
      hidden_dims=int(model_dims * self.ffn_width_multiplier),
      hidden_dropout_prob=self.ffn_hidden_dropout_prob,
      residual_dropout_prob=self.ffn_residual_dropout_prob,
      kernel_init=self._init(kernel_init),
    )

  @nn.compact
  def __call__(
    self, x: Array, x_paddings: Array, is_eval: bool | None = None
  ) -> tuple[Array, Array]:
    check_paddings("ConformerBlock", x, x_paddings)
    is_eval = nn.merge_param("is_eval", is_eval, self.is_eval)
    model_dims = x.shape[-1]
    if not self.skip_head_ffn:
      x = self._ffn(self.head_ffn_kernel_init, model_dims)(x, deterministic=is_eval)
    if not self.skip_mhsa:
      x = ConformerMhsaBlock(
        num_heads=self.num_heads,
        residual_dropout_prob=self.mhsa_residual_dropout_prob,
        attention_dropout_prob=self.mhsa_attention_dropout_prob,
        kernel_init=self._init(self.mhsa_kernel_init),
      )(x, x_paddings, deterministic=is_eval)
    if not self.skip_lconv:
      # Looked up in this module at call time: bobbin's tests patch it.
      x = ConformerConvBlock(
        kernel_size=self.kernel_size,
        pre_conv_kernel_init=self._init(self.lconv_pre_conv_kernel_init),
        conv_kernel_init=self._init(self.lconv_conv_kernel_init),
        post_conv_kernel_init=self._init(self.lconv_post_conv_kernel_init),
        residual_dropout_prob=self.conv_residual_dropout_prob,
      )(x, x_paddings, deterministic=is_eval)
    if not self.skip_tail_ffn:
      x = self._ffn(self.tail_ffn_kernel_init, model_dims)(x, deterministic=is_eval)
    if not self.skip_final_ln:
      x = nn.LayerNorm()(x)
    return x, x_paddings


def sinusoidal_positional_embeddings(timesteps: int, dims: int) -> np.ndarray:
  """`[timesteps, dims]`: sin(t * w_k) in the first half, cos(t * w_k) in the second.

  w_k = 10000^(-2k / dims) for k = 0 .. dims/2 - 1.
  """
  position = np.arange(timesteps)[:, np.newaxis]
  omega = np.exp(np.arange(0, dims, 2) * -(np.log(10000.0) / dims))[np.newaxis, :]
  return np.concatenate([np.sin(position * omega), np.cos(position * omega)], axis=-1)


class CnnConformerEncoder(nn.Module):
  """The LibriSpeech example's encoder: CNN subsampler, Conformer blocks, projection.

  Attributes:
    cnn: called as `cnn(x, x_paddings, is_eval=)` -> (x, paddings).
    conformer_blocks: each called as `block(x, x_paddings, is_eval=)`.
    conformer_input_dropout_prob: dropout on the blocks' input (positional
      embeddings included), in training only.
    num_outputs: output dimensionality.
    is_eval: evaluation mode.
    use_fixed_pos_emb: add sinusoidal positional embeddings after the CNN.
    output_kernel_init / output_bias_init: the output projection.
  """

  cnn: nn.Module = CnnEncoder()
  conformer_blocks: Sequence[nn.Module] = tuple(ConformerBlock() for _ in range(4))
  conformer_input_dropout_prob: float = 0.1
  num_outputs: int = 256
  is_eval: bool | None = None
  use_fixed_pos_emb: bool = True
  output_kernel_init: InitializerFn | None = default_kernel_init
  output_bias_init: InitializerFn = nn.initializers.zeros_init()

  @nn.compact
  def __call__(
    self, features: Array, feature_paddings: Array, is_eval: bool | None
  ) -> tuple[Array, Array]:
    is_eval = nn.merge_param("is_eval", self.is_eval, is_eval)
    check_paddings("CnnConformerEncoder", features, feature_paddings)
    x, paddings = self.cnn(features, feature_paddings, is_eval=is_eval)
    if self.use_fixed_pos_emb:
      x = x + sinusoidal_positional_embeddings(x.shape[-2], x.shape[-1])
    if self.conformer_input_dropout_prob > 0 and not is_eval:
      x = nn.Dropout(self.conformer_input_dropout_prob)(x, deterministic=is_eval)
    block_paddings = paddings
    for block in self.conformer_blocks:
      x, block_paddings = block(x, block_paddings, is_eval=is_eval)
    x = nn.Dense(
      features=self.num_outputs,
      kernel_init=self.output_kernel_init,
      bias_init=self.output_bias_init,
    )(x)
    return x, paddings
