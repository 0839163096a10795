"""Pax's `praxis.layers.poolings`: spatial pooling over NHWC images, no weights.

Pooling: MAX or AVG over (h, w) windows with a stride, SAME or VALID padding;
  `__call__(inputs [B, H, W, D], paddings [B, H] or None) -> (outputs, paddings)`.
GlobalPooling: MAX or AVG over whole dims (e.g. pooling_dims=(1, 2): [B, H, W, D] -> [B, D]).
Pooling1D: MAX or AVG (or plain striding) over the time dim of [B, T, ...] with paddings.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

_TYPES = ("MAX", "AVG")


def _lowest(dtype) -> float | int:
  """The value that never wins a max: -inf for floats, the minimum for integers."""
  if jnp.issubdtype(dtype, jnp.inexact):
    return -jnp.inf
  if jnp.issubdtype(dtype, jnp.integer):
    return int(jnp.iinfo(dtype).min)
  raise ValueError(f"Pooling takes float or integer inputs, got {dtype}.")


class Pooling(base_layer.BaseLayer):
  """Windowed pooling over H and W (Pax's; max pooling by default).

  AVG divides by the number of in-image positions of each window (SAME padding's border windows
  are smaller). With paddings [B, H] (rows of the image that are padding, e.g. time frames),
  padded rows are left out of MAX and AVG, the output paddings are pooled with the same window
  along H, and padded output rows are zero.

  Attributes:
    window_shape: (height, width) of a window.
    window_stride: (stride_h, stride_w).
    pooling_type: 'MAX' or 'AVG'.
    padding: 'SAME' or 'VALID'.
  """

  window_shape: Sequence[int] = (0, 0)
  window_stride: Sequence[int] = (0, 0)
  pooling_type: str = "MAX"
  padding: str = "SAME"

  def setup(self) -> None:
    if (
      len(self.window_shape) != 2
      or len(self.window_stride) != 2
      or min(self.window_shape) <= 0
      or min(self.window_stride) <= 0
    ):
      raise ValueError(
        f"Pooling needs 2 positive window_shape and window_stride entries, got "
        f"{self.window_shape} and {self.window_stride}."
      )
    if self.pooling_type not in _TYPES or self.padding not in ("SAME", "VALID"):
      raise ValueError(
        f"Pooling: pooling_type must be MAX or AVG and padding SAME or VALID, got "
        f"{self.pooling_type!r} and {self.padding!r}."
      )

  def _window_sum(self, x: jax.Array, dims, strides) -> jax.Array:
    return jax.lax.reduce_window(x, 0, jax.lax.add, dims, strides, self.padding)

  def __call__(
    self, inputs: jax.Array, paddings: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array | None]:
    """inputs [B, H, W, D], paddings [B, H] (1 = padded row) -> (outputs [B, H', W', D],
    paddings [B, H'] or None)."""
    lowest = _lowest(inputs.dtype)
    wh, ww = self.window_shape
    sh, sw = self.window_stride
    dims, strides = (1, wh, ww, 1), (1, sh, sw, 1)
    if self.pooling_type == "MAX":
      if paddings is not None:
        inputs = jnp.where(paddings[..., None, None] > 0, lowest, inputs)
      out = jax.lax.reduce_window(inputs, lowest, jax.lax.max, dims, strides, self.padding)
    else:
      out = self._window_sum(inputs, dims, strides)
      # [H', W']: in-image positions of each window.
      sizes = self._window_sum(jnp.ones(inputs.shape[1:3], inputs.dtype), (wh, ww), (sh, sw))
      out = out / sizes[None, :, :, None]
    if paddings is None:
      return out, None
    if self.pooling_type == "AVG":
      # Average over the non-padded rows of each window instead of all of them.
      real_rows = self._window_sum(1 - paddings, (1, wh), (1, sh))  # [B, H']
      all_rows = self._window_sum(jnp.ones(inputs.shape[1], inputs.dtype), (wh,), (sh,))  # [H']
      scale = jnp.where(real_rows > 0, all_rows[None] / jnp.maximum(real_rows, 1e-9), 0.0)
      out = out * scale[..., None, None]
    if sh > 1 or self.padding == "VALID":
      paddings = jax.lax.reduce_window(
        paddings, _lowest(paddings.dtype), jax.lax.max, (1, wh), (1, sh), self.padding
      )
    out = jnp.where(paddings[..., None, None] > 0, 0, out)
    return out, paddings


class GlobalPooling(base_layer.BaseLayer):
  """MAX or AVG over `pooling_dims` (Pax's).

  Attributes:
    pooling_type: 'MAX' or 'AVG' (the default).
    pooling_dims: the dims pooled, e.g. (1, 2) for H and W of NHWC.
    keepdims: keep the pooled dims with size 1.
  """

  pooling_type: str = "AVG"
  pooling_dims: Sequence[int] | None = None
  keepdims: bool = False

  def setup(self) -> None:
    if self.pooling_type not in _TYPES:
      raise ValueError(
        f"GlobalPooling: pooling_type must be MAX or AVG, got {self.pooling_type!r}."
      )
    if self.pooling_dims is None or min(self.pooling_dims, default=0) < 0:
      raise ValueError(
        f"GlobalPooling needs pooling_dims, non-negative dims such as (1, 2); got "
        f"{self.pooling_dims}."
      )

  def __call__(
    self,
    inputs: jax.Array,
    epsilon: float = 1e-8,
    compatible_paddings: jax.Array | None = None,
  ) -> jax.Array:
    """inputs -> pooled; compatible_paddings (broadcastable to inputs, 1 = padded) are left out,
    and AVG divides by their non-padded count (+ epsilon)."""
    dims = tuple(self.pooling_dims)
    if self.pooling_type == "MAX":
      if compatible_paddings is not None:
        inputs = jnp.where(compatible_paddings > 0, _lowest(inputs.dtype), inputs)
      return jnp.max(inputs, dims, keepdims=self.keepdims)
    if compatible_paddings is None:
      return jnp.mean(inputs, dims, keepdims=self.keepdims).astype(inputs.dtype)
    inputs = jnp.where(compatible_paddings > 0, jnp.zeros((), inputs.dtype), inputs)
    count = jnp.sum(1.0 - compatible_paddings, dims, keepdims=True, dtype=inputs.dtype) + epsilon
    out = (jnp.sum(inputs, dims, keepdims=True) / count).astype(inputs.dtype)
    return out if self.keepdims else jnp.squeeze(out, axis=dims)


class Pooling1D(base_layer.BaseLayer):
  """Pools (or strides) dim 1 of [B, T, ...] inputs: funnel pooling for sequence models.

  Windows are SAME-padded, so T/stride positions come out (rounded up). Padded positions are
  left out of every window: AVG divides by the number of valid positions in the window (0 where
  none), MAX ignores them and outputs 0 at padded output positions. window 1 only strides.

  Attributes:
    stride: keep every stride-th position.
    window: the pooling window; 0 means the stride.
    pooling_type: 'MAX' or 'AVG'.
  """

  stride: int = 1
  window: int = 0
  pooling_type: str = "AVG"

  def setup(self) -> None:
    if self.stride <= 0:
      raise ValueError(f"Pooling1D stride must be a positive integer, got {self.stride}.")
    if self.pooling_type not in ("MAX", "AVG"):
      raise ValueError(f"Pooling1D pooling_type must be AVG or MAX, got {self.pooling_type!r}.")

  def __call__(
    self, inputs: jax.Array, paddings: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array | None]:
    """inputs [B, T, ...], paddings [B, T] or None -> ([B, T', ...], [B, T'] or None)."""
    if jnp.issubdtype(inputs.dtype, jnp.inexact):
      lowest = -jnp.inf
    elif jnp.issubdtype(inputs.dtype, jnp.integer):
      lowest = jnp.iinfo(inputs.dtype).min
    else:
      raise ValueError(f"Pooling1D supports float and int inputs, got {inputs.dtype}.")
    window = self.window or self.stride
    if window == 1 and self.stride == 1:
      return inputs, paddings
    out_paddings = None if paddings is None else paddings[:, :: self.stride]  # [B, T']
    if window == 1:
      return inputs[:, :: self.stride], out_paddings
    trailing = inputs.ndim - 2
    trailing_axes = tuple(range(2, inputs.ndim))
    if self.pooling_type == "MAX":
      init, reducer = lowest, jax.lax.max
    else:
      init, reducer = 0, jax.lax.add
    if paddings is not None:
      inputs = jnp.where(jnp.expand_dims(paddings, trailing_axes) > 0, init, inputs)
    pooled = jax.lax.reduce_window(
      inputs,
      init_value=jnp.asarray(init, inputs.dtype),
      computation=reducer,
      window_dimensions=[1, window] + [1] * trailing,
      window_strides=[1, self.stride] + [1] * trailing,
      padding="SAME",  # a sequence model keeps its tail
    )  # [B, T', ...]
    if self.pooling_type == "AVG":
      valid = jnp.ones(inputs.shape[:2], inputs.dtype) if paddings is None else 1.0 - paddings
      count = jax.lax.reduce_window(
        valid,
        init_value=jnp.asarray(0, valid.dtype),
        computation=jax.lax.add,
        window_dimensions=[1, window],
        window_strides=[1, self.stride],
        padding="SAME",
      )  # [B, T']
      scale = jnp.where(count > 0, 1.0 / jnp.where(count > 0, count, 1.0), 0.0)
      pooled = pooled * jnp.expand_dims(scale, trailing_axes).astype(pooled.dtype)
    elif out_paddings is not None:
      # A window of only padding is -inf: zero padded outputs so they stay finite.
      pooled = jnp.where(jnp.expand_dims(out_paddings, trailing_axes) > 0, 0, pooled)
    return pooled, out_paddings


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
