"""Normalization layers, with Pax's classes, fields and defaults.

  LayerNorm       y = norm(x) * (1 + scale) + bias   (direct_scale=False, Pax's default: `scale`
                  starts at 0, so weight decay pulls towards the unit scale); direct_scale=True
                  multiplies by `scale` (starting at 1).
  RmsNorm         y = x / rms(x) * scale              (direct_scale=True by default, as Pax).
  RmsNormNoScale  y = x / rms(x).
  BatchNorm       y = (x - mean) / sqrt(var + 1e-3) * (1 + gamma) + beta, with moving averages
                  `moving = decay * moving + (1 - decay) * batch` in the "non_trainable"
                  collection; eval mode (JaxContext do_eval) uses the moving averages.
  GroupNorm       statistics per group of channels over time/space (optionally cumulative).
  IdentityNorm    y = x.

Every layer takes `(inputs, paddings=None)`; `dim` is the size of the normalised last axis.
Shape letters: `...` leading dims (usually [B, T]), D = dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
_SKIP_LP = base_layer.WeightHParamsCollection.SKIP_LP_REGULARIZATION


def compute_moments(
  inputs: jax.Array,
  padding: jax.Array,
  reduce_over_dims: list[int],
  cumulative_axis: int | None = None,
  keepdims: bool = False,
) -> tuple[jax.Array, jax.Array]:
  """(mean, variance) of `inputs` over `reduce_over_dims`, leaving out padded positions.

  `padding` has the rank of `inputs` (1 = padded) and broadcasts to it. With `cumulative_axis`,
  the statistics at step t cover steps <= t along that axis.
  """
  if inputs.ndim != padding.ndim:
    raise ValueError(
      f"compute_moments: inputs {inputs.shape} and padding {padding.shape} must have the same rank."
    )
  mask = 1.0 - padding
  sum_v = jnp.sum(inputs * mask, axis=reduce_over_dims, keepdims=keepdims)
  count = jnp.sum(jnp.ones_like(inputs) * mask, axis=reduce_over_dims, keepdims=keepdims)
  if cumulative_axis is not None:
    sum_v = jnp.cumsum(sum_v, axis=cumulative_axis)
    count = jnp.cumsum(count, axis=cumulative_axis)
  count = jnp.maximum(count, 1.0)
  mean = sum_v / count
  sum_vv = jnp.sum(
    (inputs - mean) * (inputs - mean) * mask, axis=reduce_over_dims, keepdims=keepdims
  )
  if cumulative_axis is not None:
    sum_vv = jnp.cumsum(sum_vv, axis=cumulative_axis)
  return mean, sum_vv / count


class BaseNormalization(base_layer.BaseLayer):
  """Base of the normalization layers.

  Attributes:
    dim: size of the normalised last axis.
    weight_axes: ours: logical axis name of the per-dim weights, for the trainer's rules table.
  """

  dim: int = 0
  weight_axes: tuple[str | None] = ("embed",)

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    raise NotImplementedError(f"{type(self).__name__} must implement __call__.")

  def _per_dim(self, init_value: float, collections=(), trainable_name: str = "") -> WeightHParams:
    wp_scale = self.weight_split_dims_mapping.wt
    if self.mesh_shape is not None and wp_scale is None:
      wp_scale = [-1]
    del trainable_name
    return WeightHParams(
      shape=[self.dim],
      init=WeightInit.Constant(init_value),
      mesh_shape=self.mesh_shape,
      tensor_split_dims_mapping=wp_scale,
      collections=list(collections),
      logical_axes=tuple(self.weight_axes),
    )


class IdentityNorm(BaseNormalization):
  """Returns the inputs unchanged."""

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    del paddings
    return inputs


class LayerNorm(BaseNormalization):
  """Layer normalization over the last axis.

  Attributes:
    direct_scale: False (Pax's default): multiply by `1 + scale`, `scale` starting at 0; True:
      multiply by `scale`, starting at 1.
    epsilon: added to the variance.
    use_scale: learn `scale[dim]`.
    use_bias: learn `bias[dim]`.
    reductions_in_fp32: compute mean and variance in float32 (recommended for bfloat16).
  """

  direct_scale: bool = False
  epsilon: float = 1e-6
  use_scale: bool = True
  use_bias: bool = True
  reductions_in_fp32: bool = False

  def setup(self):
    if self.dim <= 0:
      raise ValueError(f"LayerNorm needs a positive dim, got {self.dim}; set it on the config.")
    if self.use_scale:
      self.create_variable("scale", self._per_dim(1.0 if self.direct_scale else 0.0, [_SKIP_LP]))
    if self.use_bias:
      self.create_variable("bias", self._per_dim(0.0, [_SKIP_LP]))

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    del paddings  # unused, as in Pax
    # A size-1 last dim broadcasts against scale / bias [D], as Pax's LayerNorm lets it.
    if inputs.shape[-1] not in (self.dim, 1):
      raise ValueError(f"LayerNorm expects inputs [..., {self.dim}], got {inputs.shape}.")
    dtype = inputs.dtype
    x = inputs.astype(jnp.float32) if self.reductions_in_fp32 else inputs
    mean = jnp.mean(x, axis=-1, keepdims=True)  # [..., 1]
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)  # [..., 1]
    y = ((x - mean) * jax.lax.rsqrt(var + self.epsilon)).astype(dtype)  # [..., D]
    if self.use_scale:
      y = y * (self.theta.scale if self.direct_scale else 1 + self.theta.scale)
    if self.use_bias:
      y = y + self.theta.bias
    return y


class RmsNorm(BaseNormalization):
  """y = x / sqrt(mean(x**2) + epsilon) * scale over the last axis (no centering, no bias).

  Attributes:
    epsilon: added to the mean square.
    direct_scale: True (Pax's default): multiply by `scale` (init 1); False: by `1 + scale`.
    intermediate_dtype: if set, the statistics are computed in this dtype.
  """

  epsilon: float = 1e-6
  direct_scale: bool = True
  intermediate_dtype: jnp.dtype | None = None

  def setup(self):
    if self.dim <= 0:
      raise ValueError(f"RmsNorm needs a positive dim, got {self.dim}; set it on the config.")
    self.create_variable("scale", self._per_dim(1.0 if self.direct_scale else 0.0))

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    del paddings
    if self.intermediate_dtype is not None:
      inputs = jnp.asarray(inputs, self.intermediate_dtype)
    mean_square = jnp.mean(jnp.square(inputs), axis=-1, keepdims=True)  # [..., 1]
    y = jnp.asarray(inputs * jax.lax.rsqrt(mean_square + self.epsilon), self.fprop_dtype)
    return y * (self.theta.scale if self.direct_scale else 1 + self.theta.scale)


class RmsNormNoScale(BaseNormalization):
  """y = x / sqrt(mean(x**2) + epsilon), statistics in float32.

  Attributes:
    epsilon: added to the mean square.
  """

  epsilon: float = 1e-6

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    del paddings
    mean_square = jnp.mean(jnp.square(inputs), axis=-1, keepdims=True, dtype=jnp.float32)
    return (inputs * jax.lax.rsqrt(mean_square + self.epsilon)).astype(inputs.dtype)


class BatchNorm(BaseNormalization):
  """Batch normalization over all axes but the last (Pax's; synchronised under pjit).

  Training normalises with this batch's statistics (padded positions left out) and updates
  `moving_mean` / `moving_variance` in "non_trainable" when that collection is mutable; eval
  (JaxContext do_eval, or force_eval_mode) uses the moving averages. `gamma` is reparameterised:
  it starts at 0 and the inputs are scaled by `1 + gamma`. Summaries (verbosity 4): mean,
  variance, moving_mean, moving_variance.

  Attributes:
    decay: decay of the moving averages.
    use_moving_avg_in_training: normalise with the moving averages in training too (and use no
      beta / gamma).
    set_padded_output_to_zero: zero the outputs at padded positions.
    force_eval_mode: always behave as in eval.
    gamma_init: initialiser of gamma (0: unit scale).
  """

  decay: float = 0.999
  use_moving_avg_in_training: bool = False
  set_padded_output_to_zero: bool = True
  force_eval_mode: bool = False
  gamma_init: WeightInit = base_layer.instance_field(lambda: WeightInit.Constant(0.0))

  _EPSILON = 0.001

  def setup(self):
    if self.dim <= 0:
      raise ValueError(f"BatchNorm needs a positive dim, got {self.dim}; set it on the config.")
    axes = tuple(self.weight_axes)
    self.create_variable(
      "beta", WeightHParams(shape=[self.dim], init=WeightInit.Constant(0.0), logical_axes=axes)
    )
    self.create_variable(
      "gamma", WeightHParams(shape=[self.dim], init=self.gamma_init, logical_axes=axes)
    )
    sync = [base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC]
    self.create_variable(
      "moving_mean",
      WeightHParams(
        shape=[self.dim], init=WeightInit.Constant(0.0), collections=sync, logical_axes=axes
      ),
      trainable=False,
    )
    self.create_variable(
      "moving_variance",
      WeightHParams(
        shape=[self.dim], init=WeightInit.Constant(1.0), collections=sync, logical_axes=axes
      ),
      trainable=False,
    )

  def compute_and_update_moments(
    self, inputs: jax.Array, paddings: jax.Array
  ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(mean, variance, beta, gamma) to normalise with; updates the moving averages in training."""
    if self.do_eval or self.force_eval_mode:
      mean, variance = self.get_var("moving_mean"), self.get_var("moving_variance")
      self.add_summary("moving_mean", mean, verbosity=4)
      self.add_summary("moving_variance", variance, verbosity=4)
    else:
      batch_mean, batch_variance = compute_moments(
        inputs, paddings, list(range(inputs.ndim - 1))
      )  # [D]
      self.update_var(
        "moving_mean", self.get_var("moving_mean") * self.decay + batch_mean * (1.0 - self.decay)
      )
      self.update_var(
        "moving_variance",
        self.get_var("moving_variance") * self.decay + batch_variance * (1.0 - self.decay),
      )
      self.add_summary("mean", batch_mean, verbosity=4)
      self.add_summary("variance", batch_variance, verbosity=4)
      self.add_summary("moving_mean", self.get_var("moving_mean"), verbosity=4)
      self.add_summary("moving_variance", self.get_var("moving_variance"), verbosity=4)
      if self.use_moving_avg_in_training:
        mean, variance = self.get_var("moving_mean"), self.get_var("moving_variance")
      else:
        mean, variance = batch_mean, batch_variance
    if self.use_moving_avg_in_training:
      beta, gamma = 0.0, 1.0
    else:
      beta, gamma = self.theta.beta, self.theta.gamma + 1.0
    return mean, variance, beta, gamma

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    """Normalises `inputs` [..., D]; `paddings` [...] (1 = padded)."""
    inputs, paddings = self._cast_to_fprop_dtype((inputs, paddings))
    if inputs.shape[-1] != self.dim:
      raise ValueError(f"BatchNorm expects inputs [..., {self.dim}], got {inputs.shape}.")
    if paddings is None:
      paddings = jnp.zeros(inputs.shape[:-1] + (1,), inputs.dtype)
    else:
      paddings = jnp.expand_dims(paddings, -1)  # [..., 1]
    mean, variance, beta, gamma = self.compute_and_update_moments(inputs, paddings)
    out = (inputs - mean) * (gamma / jnp.sqrt(variance + self._EPSILON)) + beta
    if self.set_padded_output_to_zero:
      out = out * (1.0 - paddings)
    return out


class GroupNorm(BaseNormalization):
  """Group normalization (arXiv:1803.08494) of [B, T, D], [B, H, W, D] or [B, T, H, W, D].

  Channels are split into groups; each group is normalised over time/space and its channels
  (over time only up to each step when `cumulative`). Padded steps are left out of the
  statistics. Output: norm * (1 + gamma) + beta, gamma and beta of shape [1, ..., 1, D].

  Attributes:
    num_groups: number of groups (dim must divide by it when dim >= num_groups).
    min_group_size: smallest group.
    cumulative: statistics over the current and earlier time steps only.
    input_rank: 3, 4 or 5.
    epsilon: added to the variance.
    set_padded_output_to_zero: zero the outputs at padded steps.
    use_scale: learn gamma.
    use_bias: learn beta.
  """

  num_groups: int = 32
  min_group_size: int = 1
  cumulative: bool = False
  input_rank: int | None = None
  epsilon: float = 0.001
  set_padded_output_to_zero: bool = True
  use_scale: bool = True
  use_bias: bool = True

  def setup(self):
    if self.num_groups <= 0 or self.min_group_size <= 0 or self.min_group_size > self.dim:
      raise ValueError(
        f"GroupNorm needs num_groups > 0 and 0 < min_group_size <= dim; got "
        f"{self.num_groups}, {self.min_group_size}, dim {self.dim}."
      )
    if self.dim % self.min_group_size or (
      self.dim >= self.num_groups and self.dim % self.num_groups
    ):
      raise ValueError(
        f"GroupNorm: dim {self.dim} is not divisible by num_groups "
        f"{self.num_groups} (or min_group_size {self.min_group_size})."
      )
    if self.input_rank not in (3, 4, 5):
      raise ValueError(f"GroupNorm input_rank must be 3, 4 or 5, got {self.input_rank}.")
    shape = [1] * (self.input_rank - 1) + [self.dim]
    axes = (None,) * (self.input_rank - 1) + tuple(self.weight_axes)
    if self.use_bias:
      self.create_variable(
        "beta",
        WeightHParams(
          shape, init=WeightInit.Constant(0.0), collections=[_SKIP_LP], logical_axes=axes
        ),
      )
    if self.use_scale:
      self.create_variable(
        "gamma",
        WeightHParams(
          shape, init=WeightInit.Constant(0.0), collections=[_SKIP_LP], logical_axes=axes
        ),
      )

  @property
  def _group_size(self) -> int:
    return max(self.dim // self.num_groups, self.min_group_size)

  @property
  def _num_groups(self) -> int:
    return self.dim // self._group_size

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    """inputs [B, T, ..., D]; paddings [B, T] (1 = padded)."""
    inputs, paddings = self._cast_to_fprop_dtype((inputs, paddings))
    if inputs.ndim != self.input_rank:
      raise ValueError(f"GroupNorm expects rank-{self.input_rank} inputs, got {inputs.shape}.")
    x = jnp.reshape(inputs, inputs.shape[:-1] + (self._num_groups, self._group_size))
    rank = self.input_rank + 1  # [B, T, ..., G, S]
    dims = list(range(rank))
    if paddings is None or not self.cumulative:
      reduce_dims = dims[1:-2] + dims[-1:]
    else:
      reduce_dims = dims[2:-2] + dims[-1:]
    if paddings is None and not self.cumulative:
      mean = jnp.mean(x, axis=reduce_dims, keepdims=True)
      variance = jnp.mean(
        jnp.square(x - jax.lax.stop_gradient(mean)), axis=reduce_dims, keepdims=True
      )
    else:
      expanded = jnp.reshape(paddings, inputs.shape[:2] + (1,) * (rank - 2))
      mean, variance = compute_moments(
        x, expanded, reduce_dims, cumulative_axis=1 if self.cumulative else None, keepdims=True
      )
    x = (x - mean) * jax.lax.rsqrt(variance + self.epsilon)
    out = jnp.reshape(x, x.shape[:-2] + (-1,))  # [B, T, ..., D]
    if self.use_scale:
      out = out * (1 + self.theta.gamma)
    if self.use_bias:
      out = out + self.theta.beta
    if self.set_padded_output_to_zero and paddings is not None:
      out = out * (1.0 - jnp.reshape(paddings, inputs.shape[:2] + (1,) * (rank - 3)))
    return out


class WeightNormL2(BaseNormalization):
  """Weight normalization (arXiv:1602.07868): w / ||w||_2 over all but the last axis, * (1 + g)."""

  def setup(self):
    self.create_variable(
      "g", WeightHParams(shape=[self.dim], init=WeightInit.Constant(0.0), dtype=self.dtype)
    )

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    del paddings
    axis = list(range(inputs.ndim - 1))
    scale = jnp.expand_dims(self.theta.g + 1.0, axis)
    return scale * py_utils.l2_normalize(inputs, axis)


class SpectralNorm(BaseNormalization):
  """Spectral normalization (arXiv:1802.05957): W / sigma(W), W reshaped to [-1, dim].

  sigma is estimated by `n_power_iteration` power iterations from the non-trainable `u`, which
  is updated in training (not in eval).
  """

  n_power_iteration: int = 1

  def setup(self):
    self.create_variable(
      "u",
      WeightHParams(
        shape=[self.dim],
        init=WeightInit.Gaussian(),
        dtype=self.dtype,
        collections=[base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC],
      ),
      trainable=False,
    )

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    del paddings
    w = jnp.reshape(inputs, (-1, self.dim))  # [N, dim]
    u = self.get_var("u")
    v = None
    for _ in range(self.n_power_iteration):
      v = py_utils.l2_normalize(w @ u)
      u = py_utils.l2_normalize(v @ w)
    v, u = jax.lax.stop_gradient(v), jax.lax.stop_gradient(u)
    if not self.do_eval:
      self.update_var("u", u)
    return self._cast_to_fprop_dtype(jnp.reshape(w / (v @ w @ u), inputs.shape))


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
PARAMS = base_layer.PARAMS
PMAP_PARALLEL_AXIS_NAME = base_layer.PMAP_PARALLEL_AXIS_NAME
