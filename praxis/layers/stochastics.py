"""Dropout: zero each activation with probability 1 - keep_prob while training.

Randomness comes from Flax's "dropout" rng stream: apply with `rngs={"dropout": key}`. Eval is
`deterministic=True`, which returns the input unchanged and needs no rng. Called without
`deterministic` (Pax's call shape), a layer drops unless the JaxContext has do_eval=True.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp

from praxis import base_layer


class Dropout(base_layer.BaseLayer):
  """Inverted dropout: kept activations are divided by keep_prob, so the expected value is kept.

  Attributes:
    keep_prob: probability of keeping an activation; 1.0 disables dropout.
    noise_shape_broadcast_dims: dims (negative counts from the end) along which one random draw
      is shared, e.g. (1,) drops the same features at every time step of [B, T, D].
  """

  keep_prob: float = 1.0
  noise_shape_broadcast_dims: tuple[int, ...] | None = None

  def __call__(self, inputs: jax.Array, deterministic: bool | None = None) -> jax.Array:
    """deterministic None is Pax's call shape: dropout unless the JaxContext says do_eval."""
    if not 0.0 < self.keep_prob <= 1.0:
      raise ValueError(f"Dropout keep_prob must be in (0, 1], got {self.keep_prob}.")
    if deterministic is None:
      deterministic = self.do_eval
    if deterministic or self.keep_prob == 1.0:
      return inputs
    noise_shape = list(inputs.shape)
    for dim in self.noise_shape_broadcast_dims or ():
      noise_shape[dim] = 1
    keep = jax.random.bernoulli(self.make_rng("dropout"), self.keep_prob, noise_shape)
    keep = jnp.broadcast_to(keep, inputs.shape)
    # Divide in the input's dtype: a bf16 activation stays bf16.
    return jnp.where(
      keep, inputs / jnp.asarray(self.keep_prob, inputs.dtype), jnp.zeros_like(inputs)
    )


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
