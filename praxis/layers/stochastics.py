"""Dropout: zero each activation with probability 1 - keep_prob while training.

Randomness comes from the "random" rng stream, as in Pax (`rngs={"random": key}`); where the
caller gave only the seed's "dropout" stream (`rngs={"dropout": key}`, what paxml's trainer
passes) that one is used. Eval returns the input unchanged and needs no rng: a JaxContext with
do_eval=True (Pax's call shape) or, ours, `deterministic=True`.
"""

from __future__ import annotations

from collections.abc import Sequence
import numbers

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes


class Dropout(base_layer.BaseLayer):
  """Inverted dropout: kept activations are divided by keep_prob, so the expected value is kept.

  The mask is Pax's: floor(keep_prob + U[0, 1)) drawn in the input's dtype.

  Attributes:
    keep_prob: probability of keeping an activation; 1.0 disables dropout.
    noise_shape: shape of the random keep/drop draw, broadcast against the input (e.g.
      [10, 6, 8] for an input [2, 10, 6, 8] shares one mask over the batch); None: the input's.
    noise_shape_broadcast_dims: dims of the noise shape (noise_shape, or the input's) set to 1,
      so one draw is shared along them, e.g. [-1] drops whole feature vectors.
    dropout_at_eval: also drop under do_eval (where E[f(x)] != f(E[x]) matters).
    transpose_qk: for a 4-D noise shape [B, N, T, T], transpose the last two dims of the draw
      (Pax's hint that saves a copy when the mask is used on transposed attention probs).
  """

  keep_prob: float = 1.0
  noise_shape: Sequence[int] | None = None
  noise_shape_broadcast_dims: Sequence[int] | None = None
  dropout_at_eval: bool = False
  transpose_qk: bool | None = False

  def _rng(self) -> jax.Array:
    if self.has_rng(base_layer.RANDOM) or not self.has_rng(base_layer.NON_PAX_RNG_KEY):
      return self.next_prng_key()
    return self.make_rng(base_layer.NON_PAX_RNG_KEY)

  def _noise_shape(self, inputs: jax.Array) -> list[int]:
    shape = list(self.noise_shape if self.noise_shape is not None else inputs.shape)
    for dim in self.noise_shape_broadcast_dims or ():
      if dim >= len(shape):
        raise ValueError(
          f"Dropout noise_shape_broadcast_dims has {dim}, outside the noise shape {shape}; "
          "give dims of the noise shape (negative ones count from its end)."
        )
      shape[dim] = 1
    return shape

  def __call__(self, inputs: jax.Array, deterministic: bool | None = None) -> jax.Array:
    """inputs [...] -> inputs with dropout; deterministic None (Pax's call) reads do_eval."""
    if isinstance(self.keep_prob, numbers.Real) and self.keep_prob == 1.0:
      return inputs
    if not 0.0 < self.keep_prob <= 1.0:
      raise ValueError(f"Dropout keep_prob must be in (0, 1], got {self.keep_prob}.")
    if deterministic is None:
      deterministic = self.do_eval and not self.dropout_at_eval
    if deterministic:
      return inputs
    noise_shape = self._noise_shape(inputs)
    uniform = jax.random.uniform(self._rng(), noise_shape, inputs.dtype)
    if len(noise_shape) == 4 and noise_shape[2] == noise_shape[3] and self.transpose_qk:
      uniform = jnp.swapaxes(uniform, 2, 3)  # [B, N, T, S] -> [B, N, S, T]
    # floor(keep_prob + u) is 1 with probability keep_prob; computed in the input's dtype so a
    # bf16 activation stays bf16.
    keep = jnp.floor(jnp.asarray(self.keep_prob, inputs.dtype) + uniform)
    return inputs * keep / jnp.asarray(self.keep_prob, inputs.dtype)


class StochasticResidual(base_layer.BaseLayer):
  """inputs + residual_weight * residual, the residual branch dropped per example while training.

  A kept branch is divided by survival_prob, so eval (no drop) needs no rescaling. Randomness:
  `self.next_prng_key()` (the "random" rng stream, as Pax), only with `deterministic=False` (or
  None outside do_eval, as Dropout).

  Attributes:
    residual_weight: weight of the branch added to the input.
    survival_prob: probability of keeping the branch of an example.
  """

  residual_weight: float = 1.0
  survival_prob: float = 1.0

  def __call__(
    self, inputs: jax.Array, residual: jax.Array, deterministic: bool | None = None
  ) -> jax.Array:
    """inputs, residual [B, ...] -> inputs + residual_weight * dropped(residual)."""
    if deterministic is None:
      deterministic = self.do_eval  # Pax's call shape
    if not deterministic and self.survival_prob < 1.0:
      # One draw per example: floor(p + U[0, 1)) is 1 with probability p.
      shape = (residual.shape[0],) + (1,) * (residual.ndim - 1)
      keep = jnp.floor(self.survival_prob + jax.random.uniform(self.next_prng_key(), shape))
      residual = residual / self.survival_prob * keep.astype(residual.dtype)
    return inputs + self.residual_weight * residual


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
