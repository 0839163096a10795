"""Normalization layers: LayerNorm, RmsNorm, BatchNorm. Each normalises the last axis.

Statistics are computed in float32 whatever the activation dtype (bfloat16 means and variances
lose too much), and the result is cast to the layer's compute dtype.

Shape letters: `...` any leading dims (usually [B, T]), D the normalised dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_layer

WeightInit = base_layer.WeightInit

# Flax's collection for running statistics: apply with mutable=["batch_stats"] while training.
BATCH_STATS = "batch_stats"


def _scale_init(direct_scale: bool) -> WeightInit:
  # direct_scale: y * scale, scale starting at 1; otherwise y * (1 + scale), scale starting at 0
  # (so weight decay pulls the layer towards the unit scale, not towards zero).
  return WeightInit.Constant(1.0 if direct_scale else 0.0)


class LayerNorm(base_layer.BaseLayer):
  """y = (x - mean(x)) / sqrt(var(x) + epsilon) * scale + bias, over the last axis.

  Attributes:
    dim: size of the last axis.
    epsilon: added to the variance, for stability.
    use_scale: whether to learn a per-dim scale `scale[dim]`.
    use_bias: whether to learn a per-dim offset `bias[dim]`.
    direct_scale: True multiplies by `scale` (init 1); False by `1 + scale` (init 0), as Pax's
      `direct_scale=False`.
    weight_axes: logical axis of `scale` and `bias`.
  """

  dim: int = 0
  epsilon: float = 1e-6
  use_scale: bool = True
  use_bias: bool = True
  direct_scale: bool = True
  weight_axes: tuple[str | None] = ("embed",)

  def setup(self):
    if self.dim <= 0:
      raise ValueError(f"LayerNorm needs a positive dim, got {self.dim}; set it on the config.")
    if self.use_scale:
      self.scale = self.create_variable("scale", (self.dim,), self.weight_axes,
                                        init=_scale_init(self.direct_scale))
    if self.use_bias:
      self.bias = self.create_variable("bias", (self.dim,), self.weight_axes,
                                       init=WeightInit.Constant(0.0))

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[-1] != self.dim:
      raise ValueError(f"LayerNorm expects inputs [..., {self.dim}], got {inputs.shape}.")
    x = inputs.astype(jnp.float32)
    mean = jnp.mean(x, axis=-1, keepdims=True)  # [..., 1]
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)  # [..., 1]
    y = (x - mean) * jax.lax.rsqrt(var + self.epsilon)  # [..., D]
    if self.use_scale:
      scale = self.scale.astype(jnp.float32)
      y = y * (scale if self.direct_scale else 1.0 + scale)
    if self.use_bias:
      y = y + self.bias.astype(jnp.float32)
    return y.astype(self.compute_dtype)


class RmsNorm(base_layer.BaseLayer):
  """y = x / sqrt(mean(x**2) + epsilon) * scale, over the last axis (no centering, no bias).

  Attributes:
    dim: size of the last axis.
    epsilon: added to the mean square, for stability.
    use_scale: whether to learn `scale[dim]` (False is Pax's RmsNormNoScale).
    direct_scale: True multiplies by `scale` (init 1); False by `1 + scale` (init 0).
    weight_axes: logical axis of `scale`.
  """

  dim: int = 0
  epsilon: float = 1e-6
  use_scale: bool = True
  direct_scale: bool = True
  weight_axes: tuple[str | None] = ("embed",)

  def setup(self):
    if self.dim <= 0:
      raise ValueError(f"RmsNorm needs a positive dim, got {self.dim}; set it on the config.")
    if self.use_scale:
      self.scale = self.create_variable("scale", (self.dim,), self.weight_axes,
                                        init=_scale_init(self.direct_scale))

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[-1] != self.dim:
      raise ValueError(f"RmsNorm expects inputs [..., {self.dim}], got {inputs.shape}.")
    x = inputs.astype(jnp.float32)
    mean_square = jnp.mean(jnp.square(x), axis=-1, keepdims=True)  # [..., 1]
    y = x * jax.lax.rsqrt(mean_square + self.epsilon)  # [..., D]
    if self.use_scale:
      scale = self.scale.astype(jnp.float32)
      y = y * (scale if self.direct_scale else 1.0 + scale)
    return y.astype(self.compute_dtype)


class BatchNorm(base_layer.BaseLayer):
  """Batch normalization over all axes but the last, with running statistics for eval.

  Training (`deterministic=False`) normalises with the statistics of the non-padded positions of
  this batch and, when the "batch_stats" collection is mutable, updates the running averages:
  `running = momentum * running + (1 - momentum) * batch` (Pax calls momentum `decay`). Eval
  (`deterministic=True`, the default) uses the running averages. Running statistics live in the
  "batch_stats" collection, not in "params", so an optimizer never sees them.

  Attributes:
    dim: size of the last axis.
    momentum: decay of the running mean and variance.
    epsilon: added to the variance, for stability.
    use_scale: whether to learn `scale[dim]` (init 1).
    use_bias: whether to learn `bias[dim]` (init 0).
    weight_axes: logical axis of the weights and statistics.
  """

  dim: int = 0
  momentum: float = 0.99
  epsilon: float = 1e-3
  use_scale: bool = True
  use_bias: bool = True
  weight_axes: tuple[str | None] = ("embed",)

  def setup(self):
    if self.dim <= 0:
      raise ValueError(f"BatchNorm needs a positive dim, got {self.dim}; set it on the config.")
    if self.use_scale:
      self.scale = self.create_variable("scale", (self.dim,), self.weight_axes,
                                        init=WeightInit.Constant(1.0))
    if self.use_bias:
      self.bias = self.create_variable("bias", (self.dim,), self.weight_axes,
                                       init=WeightInit.Constant(0.0))
    self.running_mean = self.variable(BATCH_STATS, "mean", jnp.zeros, (self.dim,), jnp.float32)
    self.running_var = self.variable(BATCH_STATS, "var", jnp.ones, (self.dim,), jnp.float32)

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None, *,
               deterministic: bool = True) -> jax.Array:
    """Normalises `inputs` [..., D]; `paddings` [...] (1 = padded) are left out of the statistics."""
    if inputs.shape[-1] != self.dim:
      raise ValueError(f"BatchNorm expects inputs [..., {self.dim}], got {inputs.shape}.")
    x = inputs.astype(jnp.float32)
    if deterministic:
      mean, var = self.running_mean.value, self.running_var.value
    else:
      reduce_axes = tuple(range(x.ndim - 1))
      if paddings is None:
        weights = jnp.ones(x.shape[:-1] + (1,), jnp.float32)
      else:
        if paddings.shape != x.shape[:-1]:
          raise ValueError(f"BatchNorm paddings must have shape {x.shape[:-1]} (the inputs' "
                           f"leading dims), got {paddings.shape}.")
        weights = 1.0 - paddings.astype(jnp.float32)[..., None]  # [..., 1]
      count = jnp.maximum(jnp.sum(weights), 1.0)
      mean = jnp.sum(x * weights, axis=reduce_axes) / count  # [D]
      var = jnp.sum(jnp.square(x - mean) * weights, axis=reduce_axes) / count  # [D]
      if not self.is_initializing() and self.is_mutable_collection(BATCH_STATS):
        m = self.momentum
        self.running_mean.value = m * self.running_mean.value + (1 - m) * mean
        self.running_var.value = m * self.running_var.value + (1 - m) * var
    y = (x - mean) * jax.lax.rsqrt(var + self.epsilon)  # [..., D]
    if self.use_scale:
      y = y * self.scale.astype(jnp.float32)
    if self.use_bias:
      y = y + self.bias.astype(jnp.float32)
    return y.astype(self.compute_dtype)
