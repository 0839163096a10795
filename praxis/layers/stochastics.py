"""Dropout: zero each activation with probability 1 - keep_prob while training.

Randomness comes from Flax's "dropout" rng stream: apply with `rngs={"dropout": key}`. Eval is
`deterministic=True`, which returns the input unchanged and needs no rng.
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

  def __call__(self, inputs: jax.Array, deterministic: bool) -> jax.Array:
    if not 0.0 < self.keep_prob <= 1.0:
      raise ValueError(f"Dropout keep_prob must be in (0, 1], got {self.keep_prob}.")
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
