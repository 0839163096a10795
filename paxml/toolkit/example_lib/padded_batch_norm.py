"""BatchNorm over padded sequences (bobbin's `asrnn.PaddedBatchNorm`).

flax's `nn.BatchNorm` with one more call argument, `x_paddings`
(`[batch, time]`, > 0.5 on padded frames): padded frames are left out of the
batch statistics and zeroed in the output. Fields, defaults, the
`batch_stats` variables (`mean`, `var`) and the parameters (`scale`, `bias`)
are flax's and bobbin's.
"""

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = Any


def _abs_squared(x: Array) -> Array:
  """|x|^2, real for complex x."""
  if jnp.iscomplexobj(x):
    return jnp.square(jnp.real(x)) + jnp.square(jnp.imag(x))
  return jnp.square(x)


def masked_moments(
  x: Array,
  mask: Array,
  axes: tuple[int, ...],
  *,
  dtype: Any = None,
  axis_name: str | None = None,
  axis_index_groups: Any = None,
) -> tuple[Array, Array]:
  """Mean and variance over `axes` of the elements where `mask` is 1.

  `mask` broadcasts against `x` (1 on the feature axes). Sums and counts are
  `psum`-ed over `axis_name`, so the statistics are those of the global batch.
  Computed in at least float32; the variance is E|x|^2 - |E x|^2, floored at 0.
  """
  dtype = jnp.promote_types(dtype or jnp.result_type(x), jnp.float32)
  x = jnp.asarray(x, dtype) * mask
  count = jnp.sum(mask)
  total = jnp.sum(x, axes)
  total_sq = jnp.sum(_abs_squared(x), axes)
  if axis_name is not None:
    count, total, total_sq = jax.lax.psum(
      (count, total, total_sq), axis_name=axis_name, axis_index_groups=axis_index_groups
    )
  mean = total / count
  return mean, jnp.maximum(0.0, total_sq / count - _abs_squared(mean))


class PaddedBatchNorm(nn.Module):
  """BatchNorm whose statistics skip padded frames.

  Attributes:
    use_running_average: normalize with the stored running averages (eval)
      instead of the batch statistics (training, which updates them).
    axis: the feature axis.
    padded_axis: the time axis `x_paddings` describes (kept from bobbin; the
      padding layout is read from `x_paddings`' shape).
    momentum: decay of the running averages.
    epsilon: added to the variance.
    dtype: the output dtype (default: inferred from input and parameters).
    param_dtype: the parameters' dtype.
    use_bias: add a learned bias.
    use_scale: multiply by a learned scale.
    bias_init: the bias initializer.
    scale_init: the scale initializer.
    axis_name: the pmap axis the statistics are summed over.
    axis_index_groups: device groups within `axis_name` (see `jax.lax.psum`).
  """

  use_running_average: bool | None = None
  axis: int = -1
  padded_axis: int = -2
  momentum: float = 0.99
  epsilon: float = 1e-5
  dtype: Any = None
  param_dtype: Any = jnp.float32
  use_bias: bool = True
  use_scale: bool = True
  bias_init: Callable[..., Array] = nn.initializers.zeros
  scale_init: Callable[..., Array] = nn.initializers.ones
  axis_name: str | None = None
  axis_index_groups: Any = None

  @nn.compact
  def __call__(self, x: Array, x_paddings: Array, use_running_average: bool | None = None) -> Array:
    use_running_average = nn.merge_param(
      "use_running_average", self.use_running_average, use_running_average
    )
    feature_axis = self.axis % x.ndim
    reduction_axes = tuple(a for a in range(x.ndim) if a != feature_axis)
    features = x.shape[feature_axis]
    # `x_paddings` covers the leading (batch, time) axes; broadcast it over the
    # other reduced axes (e.g. frequency in CnnEncoder) so the count is right.
    # (bobbin reshaped it to x's shape and so failed for inputs of rank > 3.)
    mask_shape = tuple(1 if a == feature_axis else x.shape[a] for a in range(x.ndim))
    mask = (x_paddings < 0.5).astype(jnp.float32)
    mask = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
    mask = jnp.broadcast_to(mask, mask_shape)

    ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((features,), jnp.float32))
    ra_var = self.variable("batch_stats", "var", lambda: jnp.ones((features,), jnp.float32))
    if use_running_average:
      mean, var = ra_mean.value, ra_var.value
    else:
      initializing = self.is_initializing()
      mean, var = masked_moments(
        x,
        mask,
        reduction_axes,
        dtype=self.dtype,
        # No pmap axis exists while `init` traces the module.
        axis_name=None if initializing else self.axis_name,
        axis_index_groups=self.axis_index_groups,
      )
      if not initializing:
        ra_mean.value = self.momentum * ra_mean.value + (1.0 - self.momentum) * mean
        ra_var.value = self.momentum * ra_var.value + (1.0 - self.momentum) * var

    stats_shape = tuple(features if a == feature_axis else 1 for a in range(x.ndim))
    multiplier = jax.lax.rsqrt(var.reshape(stats_shape) + self.epsilon)
    args = [x]
    if self.use_scale:
      scale = self.param("scale", self.scale_init, (features,), self.param_dtype)
      multiplier = multiplier * scale.reshape(stats_shape)
      args.append(scale)
    y = (x - mean.reshape(stats_shape)) * multiplier
    if self.use_bias:
      bias = self.param("bias", self.bias_init, (features,), self.param_dtype)
      y = y + bias.reshape(stats_shape)
      args.append(bias)
    y = jnp.asarray(y, nn.dtypes.canonicalize_dtype(*args, dtype=self.dtype))
    return y * mask
