"""Pax's `praxis.layers.video.losses`: the VQ-GAN losses of the video tokenizer.

r1_gradient_penalty   the discriminator's R1 penalty, mean_b |d logits / d inputs|^2 * cost.
VQGANLoss             non-saturating GAN losses, the LeCam regulariser (arXiv:2104.03310) on
                      EMAs of the mean logits (non-trainable `ema_real_pred`, `ema_fake_pred`),
                      the reconstruction MSE and the quantizer loss, summed into `d_loss`
                      (discriminator) and `g_loss` (generator).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap


def r1_gradient_penalty(
  inputs: jax.Array,
  logits_fn: Callable[[jax.Array], jax.Array],
  grad_penalty_cost: float = 10.0,
) -> tuple[jax.Array, jax.Array]:
  """Returns (logits_fn(inputs), cost * mean over the batch of |d sum(logits) / d inputs|^2)."""
  logits, vjp_fn = jax.vjp(logits_fn, inputs)
  (grad,) = vjp_fn(jnp.ones_like(logits))  # d sum(logits) / d inputs, [B, ...]
  flat = jnp.asarray(grad.reshape(inputs.shape[0], -1), jnp.float32)  # [B, N]
  penalty = jnp.mean(jnp.sum(jnp.square(flat), axis=-1)) * grad_penalty_cost
  return logits, penalty


def _discriminator_loss(logits_real: jax.Array, logits_fake: jax.Array) -> jax.Array:
  # -log sigmoid(real) - log(1 - sigmoid(fake)).
  return jnp.mean(jax.nn.softplus(-logits_real)) + jnp.mean(jax.nn.softplus(logits_fake))


def _generator_loss(logits_fake: jax.Array) -> jax.Array:
  # Non-saturating: -log sigmoid(fake).
  return jnp.mean(jax.nn.softplus(-logits_fake))


class VQGANLoss(base_layer.BaseLayer):
  """The VQ-GAN losses; updates the EMAs of the mean real / fake logits when they are mutable.

  Attributes:
    g_adversarial_loss_weight: weight of the generator's adversarial loss.
    reconstruction_loss_weight: weight of the reconstruction MSE.
    polyak_decay: decay of the logit EMAs.
    lecam_weight: weight of the LeCam regulariser.
  """

  g_adversarial_loss_weight: float = 0.1
  reconstruction_loss_weight: float = 5.0
  polyak_decay: float = 0.999
  lecam_weight: float = 0.001

  def setup(self):
    ema = base_layer.WeightHParams(
      shape=[],
      init=base_layer.WeightInit.Constant(0.0),
      dtype=jnp.float32,
      # Replicas average their EMAs, as Pax's mean-synced variables.
      collections=[base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC],
    )
    self.create_variable("ema_real_pred", ema, trainable=False)
    self.create_variable("ema_fake_pred", ema, trainable=False)

  def lecam_loss(self, real_pred: jax.Array, fake_pred: jax.Array) -> jax.Array:
    """mean relu(real - ema_fake)^2 + mean relu(ema_real - fake)^2 (with the stored EMAs)."""
    ema_fake = self.get_var("ema_fake_pred")
    ema_real = self.get_var("ema_real_pred")
    return jnp.mean(jnp.square(jax.nn.relu(real_pred - ema_fake))) + jnp.mean(
      jnp.square(jax.nn.relu(ema_real - fake_pred))
    )

  def __call__(self, predictions: Any, input_batch: NestedMap) -> NestedMap:
    """predictions: reconstructed, logits_real, logits_fake, r1_gradient_penalty and (training)
    quantizer_loss; input_batch.video the original. Returns the scalar losses."""
    reconstructed = predictions["reconstructed"]
    logits_real = predictions["logits_real"]
    logits_fake = predictions["logits_fake"]

    decay = self.polyak_decay
    new_ema_fake = jnp.mean(logits_fake) * (1 - decay) + self.get_var("ema_fake_pred") * decay
    new_ema_real = jnp.mean(logits_real) * (1 - decay) + self.get_var("ema_real_pred") * decay
    self.update_var("ema_fake_pred", new_ema_fake)
    self.update_var("ema_real_pred", new_ema_real)

    losses = NestedMap()
    losses.grad_penalty = predictions["r1_gradient_penalty"]
    # The LeCam term reads the EMAs after this step's update (when they are mutable).
    losses.lecam_loss = self.lecam_loss(logits_real, logits_fake) * self.lecam_weight
    losses.d_adversarial_loss = _discriminator_loss(logits_real, logits_fake)
    losses.g_adversarial_loss = _generator_loss(logits_fake) * self.g_adversarial_loss_weight
    diff = jnp.asarray(input_batch.video - reconstructed, jnp.float32)
    losses.reconstruction_loss = jnp.mean(jnp.square(diff)) * self.reconstruction_loss_weight
    losses.perceptual_loss = jnp.array(0.0, jnp.float32)
    if self.do_eval:
      losses.quantizer_loss = jnp.zeros_like(losses.reconstruction_loss)
    else:
      losses.quantizer_loss = predictions["quantizer_loss"]
    losses.d_loss = losses.d_adversarial_loss + losses.grad_penalty + losses.lecam_loss
    losses.g_loss = (
      losses.reconstruction_loss
      + losses.g_adversarial_loss
      + losses.perceptual_loss
      + losses.quantizer_loss
    )
    return losses


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
