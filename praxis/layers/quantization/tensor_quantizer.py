"""Pax's TensorQuantizer: the stateless per-tensor quantizer that AQT layers own as children.

quantize(x, contract_dims) -> (q, scale, zp_time_scale):
  symmetric:  scale = max|x| / qmax (+ eps),  q = clip(floor(x / scale + 0.5))
  asymmetric: scale = (max x - min x) / (qmax - qmin),  z = qmin - min x / scale,
              q = clip(floor(x / scale + z + 0.5)),  zp_time_scale = z * scale
  so that x ~ q * scale (- zp_time_scale). Rounding passes gradients straight
through; q stays float unless `quantized_dtype` is given. precision=None
means "do not quantize" (scale 1, q = x). The clipping of the range is fixed
(clipping_coeff) or searched over linspace(1, min_clipping,
num_optimize_clipping) for the least summed |x - dequant(q)| (per tensor, or per
channel with optimize_clipping_per_channel). quant_loss_weight /
kurt_loss_weight add auxiliary losses (MSE of the round trip; squared distance
of each channel's kurtosis from `kurt`) while training.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
from praxis import base_layer
from praxis import pytypes
from praxis.layers.quantization.precision import get_min_max
from praxis.layers.quantization.precision import pass_through

JTensor = pytypes.JTensor


def _keepdims_shape(shape, contract_dims):
  """`shape` with contracted dims set to 1 (None: every dim reduced, shape ())."""
  if contract_dims is None:
    return ()
  dims = [contract_dims] if isinstance(contract_dims, int) else contract_dims
  dims = [d % len(shape) for d in dims]
  return tuple(1 if i in dims else n for i, n in enumerate(shape))


class TensorQuantizer(base_layer.BaseLayer):
  """Quantizes one tensor along given contracted dims (see the module docstring).

  Attributes:
    precision: bits (<= 23, float32's mantissa); None = no quantization.
    stop_scale_gradient: no gradient through the scale.
    min_clipping, num_optimize_clipping: clipping search range and steps
      (both or neither).
    clipping_coeff: fixed clipping in [0, 1]; None = hard min / max.
    add_scale_eps: True adds float eps to the scale, False maps 0 to 1.
    unsigned_int_bounds: quantize to [0, 2^bits - 1] (non-negative inputs).
    use_symmetric: False adds a zero point.
    quant_loss_weight, kurt_loss_weight, kurt: auxiliary losses.
    optimize_clipping_per_channel: search clipping per channel.
    sub_channels: split contracted dims into sub-channels (see aqt_einsum).
  """

  precision: int | None = None
  stop_scale_gradient: bool = False
  min_clipping: float | None = None
  num_optimize_clipping: int | None = None
  clipping_coeff: float | None = None
  add_scale_eps: bool | None = True
  unsigned_int_bounds: bool = False
  use_symmetric: bool = True
  quant_loss_weight: float | None = None
  kurt_loss_weight: float | None = None
  kurt: float = 1.8
  optimize_clipping_per_channel: bool = False
  sub_channels: int | None = None

  def setup(self):
    if self.precision is not None and self.precision > 23:
      raise ValueError(
        f"TensorQuantizer precision={self.precision}: at most 23 bits fit float32's mantissa."
      )
    searching = self.min_clipping is not None or self.num_optimize_clipping is not None
    if searching:
      if self.min_clipping is None or self.num_optimize_clipping is None:
        raise ValueError(
          "TensorQuantizer: set both min_clipping and num_optimize_clipping "
          "(the clipping search) or neither."
        )
      if not 0.0 < self.min_clipping < 1.0 or self.num_optimize_clipping <= 0:
        raise ValueError(
          "TensorQuantizer: min_clipping must be in (0, 1) and "
          f"num_optimize_clipping > 0; got {self.min_clipping}, "
          f"{self.num_optimize_clipping}."
        )
      if self.clipping_coeff is not None:
        raise ValueError(
          "TensorQuantizer: clipping_coeff (fixed clipping) cannot be combined "
          "with min_clipping / num_optimize_clipping (searched clipping)."
        )
    elif self.optimize_clipping_per_channel:
      raise ValueError(
        "TensorQuantizer: optimize_clipping_per_channel needs min_clipping and "
        "num_optimize_clipping."
      )
    if self.clipping_coeff is not None and not 0 <= self.clipping_coeff <= 1:
      raise ValueError(
        f"TensorQuantizer: clipping_coeff has to be in range 0...1; got {self.clipping_coeff}."
      )

  def __call__(self):
    pass

  def _get_scale_and_min(self, x, contract_dims, clipping_coeff=None):
    """(scale, min x or None), both keeping size-1 contracted dims."""
    if self.precision is None:
      return jnp.ones((1,) * x.ndim, x.dtype), None
    qmin, qmax = get_min_max(self.precision, self.unsigned_int_bounds)
    if self.use_symmetric:
      x_min = None
      span = jnp.max(jnp.abs(x), axis=contract_dims, keepdims=True)
      levels = qmax
    else:
      x_min = jnp.min(x, axis=contract_dims, keepdims=True)
      span = jnp.max(x, axis=contract_dims, keepdims=True) - x_min
      levels = qmax - qmin
    if clipping_coeff is not None:
      span = span * clipping_coeff
      x_min = None if x_min is None else x_min * clipping_coeff
    scale = span / levels
    if self.stop_scale_gradient:
      scale = jax.lax.stop_gradient(scale)
    if self.add_scale_eps:
      scale = scale + jnp.finfo(x.dtype).eps
    else:
      scale = jnp.where(scale == 0, jnp.ones_like(scale), scale)
    return scale, x_min

  def _get_optimal_scale_and_min(self, x, contract_dims):
    """The clipping among linspace(1, min_clipping, n) with the least |round-trip error|."""

    def error_and_scale(clip):
      scale, x_min = self._get_scale_and_min(x, contract_dims, clip)
      scaled, zp_s = self._scale(x, scale, x_min)
      err = jnp.abs(x - self.dequantize(self.to_quant(scaled), scale, contract_dims, zp_s))
      if self.optimize_clipping_per_channel:
        err = jnp.sum(err, axis=contract_dims, keepdims=True)
      else:
        err = jnp.sum(err)
      if x_min is None:
        x_min = jnp.zeros_like(scale)
      return err, scale, x_min

    clips = jnp.linspace(1.0, self.min_clipping, self.num_optimize_clipping, dtype=x.dtype)  # [C]
    errors, scales, mins = jax.vmap(error_and_scale)(clips)  # [C, ...]
    if self.optimize_clipping_per_channel:
      # Pick, per channel, the scale of its own best clipping.
      best = jnp.argmin(errors, axis=0)[None]  # [1, keepdims shape]
      scale = jnp.take_along_axis(jnp.broadcast_to(scales, errors.shape), best, axis=0)[0]
      x_min = jnp.take_along_axis(jnp.broadcast_to(mins, errors.shape), best, axis=0)[0]
      out_shape = _keepdims_shape(x.shape, contract_dims)
      scale, x_min = scale.reshape(out_shape), x_min.reshape(out_shape)
    else:
      best = jnp.argmin(errors)
      scale, x_min = scales[best], mins[best]
    return scale, (None if self.use_symmetric else x_min)

  def get_quant_scale(
    self, x: JTensor, contract_dims: int | Sequence[int]
  ) -> tuple[JTensor, JTensor | None]:
    """(scale, min x or None): searched when min_clipping is set, else fixed clipping."""
    if self.min_clipping is not None and self.num_optimize_clipping is not None:
      return self._get_optimal_scale_and_min(x, contract_dims)
    return self._get_scale_and_min(x, contract_dims, self.clipping_coeff)

  def update(self, x: JTensor):
    pass

  def to_quant(self, x: JTensor) -> JTensor:
    """Rounds (half up, straight-through gradient) and clips an already scaled x."""
    if self.precision is None:
      return x
    qmin, qmax = get_min_max(self.precision, self.unsigned_int_bounds)
    return jnp.clip(pass_through(x + 0.5, jnp.floor), qmin, qmax)

  def _get_zero_point(self, x, x_min, scale) -> JTensor:
    del x
    qmin, _ = get_min_max(self.precision, self.unsigned_int_bounds)
    return qmin - x_min / scale

  def dequantize(
    self,
    q_x: JTensor,
    q_scale: JTensor,
    contract_dims: int | Sequence[int],
    zp_time_scale: JTensor | None = None,
  ) -> JTensor:
    """q_x * q_scale (- zp_time_scale when asymmetric)."""
    del contract_dims  # scales keep their size-1 dims; broadcasting suffices
    if self.use_symmetric and zp_time_scale is not None:
      raise ValueError(
        "Symmetric quantization can not be used with zp_time_scale; "
        "pass None or set use_symmetric=False."
      )
    if not self.use_symmetric and zp_time_scale is None:
      raise ValueError("Asymmetric quantization needs zp_time_scale.")
    if self.use_symmetric:
      return q_x * q_scale
    return q_x * q_scale - zp_time_scale

  def _scale(self, x, q_scale, x_min=None):
    """(x / scale (+ zero point), zero point * scale or None)."""
    if self.use_symmetric:
      if x_min is not None:
        raise ValueError("x_min has to be None for symmetric quantization.")
      return x / q_scale, None
    if x_min is None:
      raise ValueError("x_min is required for asymmetric quantization.")
    zp = self._get_zero_point(x, x_min, q_scale)
    return x / q_scale + zp, q_scale * zp

  def _add_losses(self, x, q_x, q_s, zp_s, contract_dims):
    if self.quant_loss_weight is not None:
      deq = self.dequantize(q_x, q_s, contract_dims, zp_s)
      loss = jnp.mean(jnp.square(x - deq)) * self.quant_loss_weight
      self.add_summary("quant_loss", loss)
      self.add_aux_loss("quant_loss", loss)
    if self.kurt_loss_weight is not None:
      mean = jnp.mean(x, axis=contract_dims, keepdims=True)
      std = jnp.std(x, axis=contract_dims, keepdims=True)
      std = jnp.where(std == 0, jnp.ones_like(std), std)
      kurtosis = jnp.mean(((x - mean) / std) ** 4, axis=contract_dims)
      loss = jnp.mean(jnp.square(kurtosis - self.kurt)) * self.kurt_loss_weight
      self.add_summary("kurt_loss", loss)
      self.add_aux_loss("kurt_loss", loss)

  def quantize(
    self,
    x: JTensor,
    contract_dims: int | Sequence[int],
    squeeze_scale=True,
    quantized_dtype: jnp.dtype | None = None,
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    """(q, scale, zp_time_scale or None) of x; see the module docstring.

    quantized_dtype=int8 means materialization: no auxiliary losses then.
    """
    q_s, x_min = self.get_quant_scale(x, contract_dims)
    scaled, zp_s = self._scale(x, q_s, x_min)
    q_x = self.to_quant(scaled)
    if quantized_dtype != jnp.int8 and not self.do_eval:
      self._add_losses(x, q_x, q_s, zp_s, contract_dims)
    if squeeze_scale:
      q_s = jnp.squeeze(q_s)
      zp_s = None if zp_s is None else jnp.squeeze(zp_s)
    if quantized_dtype is not None:
      q_x = q_x.astype(quantized_dtype)
    return q_x, q_s, zp_s
