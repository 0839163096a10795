"""StackingOverTime (Pax's, exported by praxis.layers.linears): frames stacked over a window.

At each output step, `left_context + 1 + right_context` consecutive input frames are
concatenated along the feature dim; one output every `stride` input steps. The sequence ends are
padded with zeros (or the first / last frame). Shapes: inputs [B, T, D], paddings [B, T, 1],
outputs [B, ceil(T / stride), W * D] with W = window_size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_layer


class StackingOverTime(base_layer.BaseLayer):
  """Stacks frames over time (no weights).

  Attributes:
    left_context: frames stacked before the centre frame.
    right_context: frames stacked after it.
    stride: emit one stacked frame every `stride` steps (>= 1).
    pad_with_left_frame: pad the start with copies of the first frame instead of zeros.
    pad_with_right_frame: pad the end with copies of the last frame instead of zeros.
    padding_reduce_option: 'reduce_min' (a stacked frame is valid if any frame is) or
      'reduce_max' (valid only if all are).
  """

  left_context: int = 0
  right_context: int = 0
  stride: int = 0
  pad_with_left_frame: bool = False
  pad_with_right_frame: bool = False
  padding_reduce_option: str = "reduce_min"

  def setup(self) -> None:
    if self.left_context < 0 or self.right_context < 0 or self.stride < 1:
      raise ValueError(
        f"StackingOverTime needs left_context, right_context >= 0 and "
        f"stride >= 1; got {self.left_context}, {self.right_context}, "
        f"{self.stride}."
      )
    if self.padding_reduce_option not in ("reduce_min", "reduce_max"):
      raise ValueError(
        "padding_reduce_option must be 'reduce_min' or 'reduce_max', got "
        f"{self.padding_reduce_option!r}."
      )

  @property
  def window_size(self) -> int:
    """Frames per stacked output; the output depth is window_size x the input depth."""
    return self.left_context + self.right_context + 1

  def _pad_ends(self, x: jax.Array, pad_value: float) -> jax.Array:
    left, right = self.left_context, self.right_context
    if left and self.pad_with_left_frame:
      x = jnp.concatenate([jnp.repeat(x[:, :1], left, axis=1), x], axis=1)
      left = 0
    if right and self.pad_with_right_frame:
      x = jnp.concatenate([x, jnp.repeat(x[:, -1:], right, axis=1)], axis=1)
      right = 0
    if left or right:
      x = jnp.pad(x, [(0, 0), (left, right), (0, 0)], constant_values=pad_value)
    return x

  def _stack(self, x: jax.Array) -> jax.Array:
    """[B, T', D] (already padded) -> [B, ceil((T' - W + 1) / stride), W * D]."""
    if self.window_size > 1:
      width = x.shape[1] - self.window_size + 1
      x = jnp.concatenate([x[:, i : i + width] for i in range(self.window_size)], axis=2)
    return x[:, :: self.stride] if self.stride > 1 else x

  def __call__(
    self, inputs: jax.Array, paddings: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array | None]:
    """Returns (outputs [B, T / stride, W * D], out_paddings [B, T / stride, 1])."""
    if self.left_context == 0 and self.right_context == 0 and self.stride == 1:
      return inputs, paddings
    base_layer.assert_has_shape(inputs, [-1, -1, -1])
    outputs = self._stack(self._pad_ends(inputs, 0.0))
    if paddings is None:
      return outputs, jnp.zeros(outputs.shape[:-1] + (1,), outputs.dtype)
    base_layer.assert_has_shape(paddings, [-1, -1, 1])
    stacked = self._stack(self._pad_ends(paddings, 1.0))  # [B, T / stride, W]
    reduce = jnp.amin if self.padding_reduce_option == "reduce_min" else jnp.amax
    return outputs, reduce(stacked, axis=2, keepdims=True)

  def unstack(self, stacked: jax.Array) -> jax.Array:
    """Recovers the frames from stacked outputs: [B, S, W * D] -> [B, (S-1)*stride + R + 1, D].

    Each input frame is read from the window where it sits closest to the centre (or later).
    Raises ValueError when stride > window_size (some frames were never stacked).
    """
    if self.left_context == 0 and self.right_context == 0 and self.stride == 1:
      return stacked
    if self.stride > self.window_size:
      raise ValueError(
        f"Can't invert StackingOverTime with stride ({self.stride}) > "
        f"window_size ({self.window_size})."
      )
    batch, length, _ = stacked.shape
    frames = jnp.reshape(stacked, (batch, length, self.window_size, -1))  # [B, S, W, D]
    steps = jnp.arange((length - 1) * self.stride)
    offset = steps % self.stride
    # Offsets past right_context come from the next window's left context.
    next_window = (offset > self.right_context).astype(jnp.int32)
    window = jnp.concatenate(
      [steps // self.stride + next_window, jnp.full((self.right_context + 1,), length - 1)]
    )
    frame = jnp.concatenate(
      [
        self.left_context + offset - self.stride * next_window,
        self.left_context + jnp.arange(self.right_context + 1),
      ]
    )
    return frames[:, window, frame]  # [B, (S-1)*stride + R + 1, D]
