"""Speech-recognition networks in flax.linen (bobbin's `example_lib.asrnn`).

A log-mel frontend, SpecAugment, a CNN subsampler, Conformer blocks and the
CNN + Conformer encoder of bobbin's LibriSpeech example, a BatchNorm that
skips padded frames, and AdamW with update clipping. Module names, fields,
defaults and variable trees are bobbin's, so bobbin's configurations and
checkpoints carry over.

Every sequence input comes with `paddings` (`[*batch, time]`, > 0.5 on
padded frames). Modules with dropout take `deterministic` (or `is_eval`) as a
field or call argument (flax's `merge_param`: exactly one of the two).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml.toolkit.example_lib import asrio
from paxml.toolkit.example_lib import padded_batch_norm

Array = Any
InitializerFn = Callable[..., Array]
PaddedBatchNorm = padded_batch_norm.PaddedBatchNorm

# flax.linen.Dense's default; most modules here are configured with
# xavier-uniform in bobbin's example instead.
_default_kernel_init = nn.initializers.lecun_normal()


def _check_paddings(module_name: str, x: Array, x_paddings: Array) -> tuple[int, ...]:
  """Checks that `x` is `[*batch, time, ...]` for `x_paddings` `[*batch, time]`.

  Returns:
    The feature shape (the axes of `x` after batch and time).

  Raises:
    ValueError: naming the module, when batch sizes or lengths differ.
  """
  *batch, time = x_paddings.shape
  if tuple(x.shape[: len(batch)]) != tuple(batch):
    raise ValueError(
      f"Batch sizes of input features and padding indicators provided to `{module_name}` "
      f"do not match: {tuple(x.shape[: len(batch)])} vs {tuple(batch)}."
    )
  if x.ndim <= len(batch) or x.shape[len(batch)] != time:
    raise ValueError(
      f"Length of input features and padding indicators provided to `{module_name}` do "
      f"not match: {x.shape[len(batch) : len(batch) + 1]} vs {time}."
    )
  return tuple(x.shape[len(batch) + 1 :])


def _window_min(paddings: Array, size: int, stride: int, padding: str) -> Array:
  """Padding of a window output: 1 only when every frame in the window is padding."""
  return jax.lax.reduce_window(
    paddings,
    init_value=1.0,
    computation=jax.lax.min,
    window_dimensions=(1, size),
    window_strides=(1, stride),
    padding=padding,
  )


class LogMelFilterBank(nn.Module):
  """Log mel filterbank energies of a waveform (no parameters).

  Frames of `frame_size_ms` + 1 sample every `frame_step_ms`; pre-emphasis
  (`x[t] - preemph * x[t-1]`, which uses the extra sample), a Hann window, an
  FFT of the next power of two, |X|^2 (or |X| without `use_energy`), the
  mel matrix, `log(max(., output_log_floor))`. A frame is padding only when
  all its samples are.

  Attributes:
    sample_rate: samples per second of the waveform.
    frame_size_ms: STFT window length in ms.
    frame_step_ms: STFT hop in ms.
    num_bins: number of mel filters.
    lower_edge_hz: lowest frequency of the filterbank.
    upper_edge_hz: highest frequency of the filterbank.
    preemph: pre-emphasis coefficient (0 disables it).
    input_scale_factor: multiplies the waveform first (2^-15 maps int16 to [-1, 1)).
    output_log_floor: the floor applied before the log.
    use_energy: power (True) or magnitude (False) spectra.
  """

  sample_rate: float = 16_000.0
  frame_size_ms: float = 25.0
  frame_step_ms: float = 10.0
  num_bins: int = 80
  lower_edge_hz: float = 125.0
  upper_edge_hz: float = 7600.0
  preemph: float = 0.97
  input_scale_factor: float = 2.0 ** (-15.0)
  output_log_floor: float = 1e-5
  use_energy: bool = True

  def _sizes(self) -> tuple[int, int, int]:
    """(frame size incl. the pre-emphasis sample, frame step, FFT size)."""
    stft_size = int(round(self.sample_rate * self.frame_size_ms / 1000.0))
    step = int(round(self.sample_rate * self.frame_step_ms / 1000.0))
    return stft_size + 1, step, asrio.next_pow_of_two(stft_size)

  def __call__(self, waveform: Array, waveform_paddings: Array) -> tuple[Array, Array]:
    _check_paddings("LogMelFilterBank", waveform, waveform_paddings)
    frame_size, frame_step, fft_size = self._sizes()
    waveform = waveform.astype(jnp.float32) * self.input_scale_factor
    frames = asrio.frame(waveform, frame_size, frame_step)
    if self.preemph:
      frames = frames[..., 1:] - self.preemph * frames[..., :-1]
    else:
      frames = frames[..., :-1]
    frames = frames * jnp.hanning(frame_size - 1)
    spectra = jnp.abs(jnp.fft.rfft(frames, fft_size, axis=-1))
    if self.use_energy:
      spectra = spectra**2.0
    mel = asrio.linear_to_mel_weight_matrix(
      num_mel_bins=self.num_bins,
      num_spectrogram_bins=fft_size // 2 + 1,
      sample_rate=self.sample_rate,
      lower_edge_hertz=self.lower_edge_hz,
      upper_edge_hertz=self.upper_edge_hz,
    )
    mel_energies = jnp.einsum("...f,fn->...n", spectra, mel)
    paddings = _window_min(waveform_paddings, frame_size, frame_step, "VALID")
    return jnp.log(jnp.maximum(mel_energies, self.output_log_floor)), paddings


class CnnEncoder(nn.Module):
  """2-D convolutions over (time, frequency), then a projection.

  Each layer: Conv (SAME), ReLU, optionally PaddedBatchNorm, padded frames
  zeroed; time is subsampled by the strides' first element. Then the
  (frequency, channel) axes are flattened and projected to `num_outputs`.

  Attributes:
    channels: output channels of each layer.
    kernel_sizes: (time, frequency) kernel of each layer.
    strides: (time, frequency) strides of each layer.
    use_bias: biases in the convolutions.
    num_outputs: output dimensionality.
    use_batch_norm: PaddedBatchNorm after each ReLU.
    batch_norm_axis_name: the pmap axis BatchNorm statistics are summed over.
    is_eval: evaluation mode (BatchNorm uses its running averages).
    default_kernel_init: the kernel initializer where none is given below.
    conv_kernel_init: convolution kernels (default: default_kernel_init).
    conv_bias_init: convolution biases.
    output_kernel_init: projection kernel (default: default_kernel_init).
    output_bias_init: projection bias.
  """

  channels: Sequence[int] = (256, 256)
  kernel_sizes: Sequence[tuple[int, int]] = ((3, 3), (3, 3))
  strides: Sequence[tuple[int, int]] = ((2, 2), (2, 2))
  use_bias: bool = True
  num_outputs: int = 256
  use_batch_norm: bool = False
  batch_norm_axis_name: str | None = "batch"
  is_eval: bool | None = None

  default_kernel_init: InitializerFn = _default_kernel_init
  conv_kernel_init: InitializerFn | None = None
  conv_bias_init: InitializerFn = nn.initializers.zeros_init()
  output_kernel_init: InitializerFn | None = None
  output_bias_init: InitializerFn = nn.initializers.zeros_init()

  @nn.compact
  def __call__(
    self,
    features: Array,
    feature_paddings: Array,
    *,
    is_eval: bool | None = None,
    batch_norm_axis_name: str | None = None,
  ) -> tuple[Array, Array]:
    _check_paddings("CnnEncoder", features, feature_paddings)
    if not len(self.channels) == len(self.kernel_sizes) == len(self.strides):
      raise ValueError(
        "`channels`, `kernel_sizes` and `strides` for `CnnEncoder` must have the same "
        f"lengths; got {len(self.channels)}, {len(self.kernel_sizes)}, {len(self.strides)}."
      )
    is_eval = nn.merge_param("is_eval", self.is_eval, is_eval)
    axis_name = batch_norm_axis_name or self.batch_norm_axis_name
    x, pad = features[..., np.newaxis], feature_paddings
    for channels, kernel, stride in zip(self.channels, self.kernel_sizes, self.strides):
      x = nn.Conv(
        features=channels,
        kernel_size=tuple(kernel),
        strides=tuple(stride),
        use_bias=self.use_bias,
        padding="SAME",
        kernel_init=self.conv_kernel_init or self.default_kernel_init,
        bias_init=self.conv_bias_init,
      )(x)
      pad = _window_min(pad, kernel[0], stride[0], "SAME")
      x = nn.relu(x)
      if self.use_batch_norm:
        x = PaddedBatchNorm(use_running_average=is_eval, axis_name=axis_name)(x, pad)
      x = x * (1.0 - pad)[..., np.newaxis, np.newaxis]
    x = x.reshape(pad.shape + (-1,))
    x = nn.Dense(
      features=self.num_outputs,
      kernel_init=self.output_kernel_init or self.default_kernel_init,
      bias_init=self.output_bias_init,
    )(x)
    return x, pad


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
  pre_conv_kernel_init: InitializerFn = _default_kernel_init
  pre_conv_bias_init: InitializerFn = nn.initializers.zeros_init()
  conv_kernel_init: InitializerFn = _default_kernel_init
  post_conv_kernel_init: InitializerFn = _default_kernel_init
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
    _check_paddings("ConformerConvBlock", x, x_paddings)
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
  kernel_init: InitializerFn = _default_kernel_init
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
  kernel_init: InitializerFn = _default_kernel_init
  bias_init: InitializerFn = nn.initializers.zeros_init()

  @nn.compact
  def __call__(self, x: Array, x_paddings: Array, deterministic: bool | None = None) -> Array:
    _check_paddings("ConformerMhsaBlock", x, x_paddings)
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

  default_kernel_init: InitializerFn | None = _default_kernel_init
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
    _check_paddings("ConformerBlock", x, x_paddings)
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


def _random_band_masks(
  rng: jax.Array,
  batch_size: int,
  length: int,
  count: int,
  *,
  widths: Array | int,
  limits: Array | int | None = None,
) -> jax.Array:
  """`[batch, length, count]` masks, each 0 on one random band and 1 elsewhere.

  Band k of row b starts uniformly in [0, limits[b] - widths[b]) and is
  uniformly up to widths[b] wide.
  """
  start_rng, width_rng = jax.random.split(rng)
  limits = length if limits is None else limits
  limits = jnp.broadcast_to(jnp.asarray(limits, jnp.float32), (batch_size,))
  widths = jnp.broadcast_to(jnp.asarray(widths, jnp.float32), (batch_size,))
  starts = jax.random.uniform(start_rng, (batch_size, count)) * (limits - widths)[:, np.newaxis]
  ends = starts + jax.random.uniform(width_rng, (batch_size, count)) * widths[:, np.newaxis]
  position = jnp.arange(length, dtype=jnp.float32)[np.newaxis, :, np.newaxis]
  inside = (starts[:, np.newaxis, :] <= position) & (position <= ends[:, np.newaxis, :])
  return jnp.where(inside, 0.0, 1.0)


class SpecAug(nn.Module):
  """SpecAugment's frequency and time masking of `[batch, time, freq, ...]` features.

  `freq_mask_count` bands of up to `freq_mask_max_bins` bins, and
  `time_mask_count` bands of up to `time_mask_max_ratio` of each utterance's
  unpadded length, placed inside that length, are zeroed. Random numbers come
  from the `rng_collection` stream. Deterministic mode returns the input.
  """

  freq_mask_max_bins: int = 27
  freq_mask_count: int = 2
  time_mask_count: int = 10
  time_mask_max_ratio: float = 0.05
  deterministic: bool | None = None
  rng_collection: str = "specaug"

  def __call__(
    self, inputs: Array, paddings: Array | None = None, *, deterministic: bool | None = None
  ) -> Array:
    deterministic = nn.merge_param("deterministic", deterministic, self.deterministic)
    if deterministic:
      return inputs
    x = inputs
    batch_size, time_steps, freq_bins, *channels = inputs.shape
    extra_axes = (1,) * len(channels)
    if self.freq_mask_max_bins > 0 and self.freq_mask_count > 0:
      masks = _random_band_masks(
        self.make_rng(self.rng_collection),
        batch_size,
        freq_bins,
        self.freq_mask_count,
        widths=self.freq_mask_max_bins,
      )
      x = x * jnp.prod(masks, axis=-1).reshape((batch_size, 1, freq_bins) + extra_axes)
    if self.time_mask_count > 0:
      if paddings is None:
        raise ValueError(
          "`SpecAug` with time masks needs `paddings` (the utterance lengths); pass "
          "them or set time_mask_count=0."
        )
      lengths = time_steps - paddings.sum(axis=-1)
      masks = _random_band_masks(
        self.make_rng(self.rng_collection),
        batch_size,
        time_steps,
        self.time_mask_count,
        widths=lengths * self.time_mask_max_ratio,
        limits=lengths,
      )
      x = x * jnp.prod(masks, axis=-1).reshape((batch_size, time_steps, 1) + extra_axes)
    return x


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
  output_kernel_init: InitializerFn | None = _default_kernel_init
  output_bias_init: InitializerFn = nn.initializers.zeros_init()

  @nn.compact
  def __call__(
    self, features: Array, feature_paddings: Array, is_eval: bool | None
  ) -> tuple[Array, Array]:
    is_eval = nn.merge_param("is_eval", self.is_eval, is_eval)
    _check_paddings("CnnConformerEncoder", features, feature_paddings)
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


def adamw_with_clipping(
  learning_rate: float | optax.Schedule,
  b1: float = 0.9,
  b2: float = 0.999,
  eps: float = 1e-8,
  eps_root: float = 0.0,
  mu_dtype: Any | None = None,
  weight_decay: float = 1e-4,
  mask: Any | Callable[[Any], Any] | None = None,
  l2_penalty: float = 0.0,
  block_update_rms_threshold: float | None = 1.0,
  global_gradient_norm_threshold: float | None = 5.0,
) -> optax.GradientTransformation:
  """`optax.adamw` with clipping before the learning rate is applied.

  The chain: L2 penalty on the raw gradient (`l2_penalty`, a regularizer
  unlike weight decay), clip the raw gradient to global norm
  `global_gradient_norm_threshold`, Adam scaling, clip each leaf's Adam
  update to RMS `block_update_rms_threshold`, decoupled weight decay, times
  -learning_rate. A threshold of None leaves that clipping out.

  Args:
    learning_rate: a constant or an optax schedule.
    b1, b2, eps, eps_root, mu_dtype: `optax.scale_by_adam`'s.
    weight_decay, mask: `optax.add_decayed_weights`'s (mask also for the L2 penalty).
    l2_penalty: coefficient of the L2 term added to the gradient.
    block_update_rms_threshold: the per-leaf update RMS bound.
    global_gradient_norm_threshold: the raw gradient's global-norm bound.
  """
  schedule = learning_rate if callable(learning_rate) else (lambda count: learning_rate)
  parts = []
  if l2_penalty:
    parts.append(optax.add_decayed_weights(l2_penalty, mask))
  if global_gradient_norm_threshold is not None:
    parts.append(optax.clip_by_global_norm(global_gradient_norm_threshold))
  parts.append(optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype))
  if block_update_rms_threshold is not None:
    parts.append(optax.clip_by_block_rms(block_update_rms_threshold))
  parts.append(optax.add_decayed_weights(weight_decay, mask))
  parts.append(optax.scale_by_schedule(lambda count: -schedule(count)))
  return optax.chain(*parts)
