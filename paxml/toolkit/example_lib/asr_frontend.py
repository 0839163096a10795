"""bobbin's ASR frontend in flax.linen: log-mel features, SpecAugment, the CNN subsampler.

Part of `asrnn` (bobbin's `example_lib.asrnn`, which re-exports these names); module names,
fields, defaults and variable trees are bobbin's. Every sequence input comes with `paddings`
(`[*batch, time]`, > 0.5 on padded frames).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from paxml.toolkit.example_lib import asrio
from paxml.toolkit.example_lib import padded_batch_norm

Array = Any
InitializerFn = Callable[..., Array]
PaddedBatchNorm = padded_batch_norm.PaddedBatchNorm

# flax.linen.Dense's default; most modules here are configured with
# xavier-uniform in bobbin's example instead.
default_kernel_init = nn.initializers.lecun_normal()


def check_paddings(module_name: str, x: Array, x_paddings: Array) -> tuple[int, ...]:
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
    check_paddings("LogMelFilterBank", waveform, waveform_paddings)
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

  default_kernel_init: InitializerFn = default_kernel_init
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
    check_paddings("CnnEncoder", features, feature_paddings)
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
