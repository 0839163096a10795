"""BregmanPCA: an online PCA of a layer's activations under a Bregman divergence.

Standard PCA fits mean + coefficients @ components to the data under the squared loss; Bregman
PCA (Collins, Dasgupta, Schapire 2001) matches the divergence to the activation that produced
the data: squared loss for an identity, a leaky-ReLU matching loss, or the softmax (KL) loss.
The layer passes its inputs through unchanged and returns their coefficients; while training
it also takes one step on its mean and components (non-trainable variables).

Shape letters: B batch, K components, D... the per-example input dims.
"""

from __future__ import annotations

from collections.abc import Sequence
import enum
import functools

import jax
from jax import lax
import jax.numpy as jnp
import jax.scipy.special as jsp

from praxis import base_layer
from praxis import pytypes

WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit


def _predict(coefficients: jax.Array, components: jax.Array, mean: jax.Array) -> jax.Array:
  """coefficients [B, K], components [K, D...], mean [1, D...] -> pre-activations [B, D...]."""
  return jnp.tensordot(coefficients, components, 1) + mean


def _squared_loss(coefficients, components, mean, labels) -> jax.Array:
  """Mean over the batch of 0.5 * |prediction - labels|^2 (the identity's divergence)."""
  preds = _predict(coefficients, components, mean).reshape(labels.shape[0], -1)  # [B, D]
  labels = lax.stop_gradient(labels.reshape(labels.shape[0], -1))  # [B, D]
  return jnp.mean(jnp.sum(0.5 * jnp.square(preds - labels), axis=1))


def _leaky_relu_loss(coefficients, components, mean, labels, negative_slope: float) -> jax.Array:
  """The matching loss of a leaky ReLU with slope s, whose inverse is a leaky ReLU with 1/s.

  With z the predicted pre-activation, f(z) its activation, and z* = f^-1(y) the labels'
  pre-image: 0.5 * (z f(z) - z* y) - y (z - z*), summed over dims, averaged over the batch.
  """
  labels = lax.stop_gradient(labels.reshape(labels.shape[0], -1))  # [B, D]
  labels_pre = jax.nn.leaky_relu(labels, negative_slope=1.0 / negative_slope)
  preds_pre = _predict(coefficients, components, mean).reshape(labels.shape[0], -1)
  preds = jax.nn.leaky_relu(preds_pre, negative_slope=negative_slope)
  loss = 0.5 * (preds_pre * preds - labels_pre * labels) - labels * (preds_pre - labels_pre)
  return jnp.mean(jnp.sum(loss, axis=1))


def _softmax_loss(coefficients, components, mean, labels) -> jax.Array:
  """KL(labels || softmax(logits)) over the last dim, averaged over all other positions."""
  logits = _predict(coefficients, components, mean)
  logits = logits.reshape(-1, logits.shape[-1])  # [N, C]
  labels = lax.stop_gradient(labels.reshape(-1, labels.shape[-1]))  # [N, C]
  log_labels = jnp.log(jnp.maximum(labels, 1e-6))
  return jnp.mean(jsp.logsumexp(logits, axis=1) + jnp.sum(labels * (log_labels - logits), axis=1))


def _inverse_softmax(probs: jax.Array) -> jax.Array:
  """Centred log-probabilities: a pre-image of `probs` under softmax."""
  logs = jnp.log(jnp.maximum(probs, 1e-6))
  return logs - jnp.mean(logs, axis=-1, keepdims=True)


@enum.unique
class ActivationType(str, enum.Enum):
  """The activations whose matching Bregman loss BregmanPCA implements."""

  IDENTITY = "IDENTITY"
  LEAKY_RELU = "LEAKY_RELU"
  SOFTMAX = "SOFTMAX"


def _unit_rms(grad: jax.Array) -> jax.Array:
  """grad scaled to norm sqrt(size) (each entry about 1): steps then depend only on the lr."""
  return grad / jnp.maximum(jnp.linalg.norm(grad), 1e-6) * jnp.sqrt(jnp.size(grad))


class BregmanPCA(base_layer.BaseLayer):
  """Online Bregman PCA of the inputs (https://cseweb.ucsd.edu/~dasgupta/papers/pca.pdf).

  Non-trainable variables (all averaged across replicas): step (float scalar), mean [1, D...],
  components [K, D...] and components_momentum [K, D...]. The coefficients of a batch are
  found by `coefficients_steps` normalised-gradient steps with momentum from zero; while
  training, the mean moves by an EMA of the inverse-activated batch mean and the components by
  one normalised momentum step, inside [start_step, end_step).

  Attributes:
    num_components: K.
    input_dims: the per-example input shape (an int or a list).
    activation_type: an ActivationType, choosing the Bregman loss.
    negative_slope: the leaky ReLU's slope (LEAKY_RELU).
    mean_beta: EMA decay of the mean.
    coefficients_lr: step size of the coefficient solve (decays linearly to 0 over its steps).
    coefficients_beta: momentum of the coefficient solve.
    coefficients_steps: number of steps of the coefficient solve.
    components_lr: step size of the components' update.
    components_beta: momentum of the components' update.
    start_step: first step that updates mean and components.
    end_step: the step after the last one that does (must exceed start_step).
    constant_lr_schedule: True keeps components_lr constant; False decays it linearly to 0 at
      end_step.
  """

  num_components: int = 0
  input_dims: int | Sequence[int] = 0
  activation_type: ActivationType = ActivationType.IDENTITY
  negative_slope: float = 0.0
  mean_beta: float = 0.99
  coefficients_lr: float = 0.01
  coefficients_beta: float = 0.9
  coefficients_steps: int = 20
  components_lr: float = 0.01
  components_beta: float = 0.9
  start_step: int = 0
  end_step: int = 0
  constant_lr_schedule: bool = True

  def setup(self) -> None:
    if not self.num_components or not self.input_dims or self.end_step <= self.start_step:
      raise ValueError(
        "BregmanPCA needs num_components, input_dims and end_step > start_step; got "
        f"{self.num_components}, {self.input_dims}, [{self.start_step}, {self.end_step})."
      )
    dims = (
      list(self.input_dims) if isinstance(self.input_dims, (list, tuple)) else [self.input_dims]
    )
    synced = [base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC]
    zeros = WeightInit.Constant(0.0)
    if self.activation_type == ActivationType.IDENTITY:
      self.activation_fn = lambda x: x
      self.inv_activation_fn = lambda x: x
      self.bregman_loss_fn = _squared_loss
    elif self.activation_type == ActivationType.LEAKY_RELU:
      self.activation_fn = functools.partial(jax.nn.leaky_relu, negative_slope=self.negative_slope)
      self.inv_activation_fn = functools.partial(
        jax.nn.leaky_relu, negative_slope=1.0 / self.negative_slope
      )
      self.bregman_loss_fn = functools.partial(_leaky_relu_loss, negative_slope=self.negative_slope)
    elif self.activation_type == ActivationType.SOFTMAX:
      self.activation_fn = jax.nn.softmax
      self.inv_activation_fn = _inverse_softmax
      self.bregman_loss_fn = _softmax_loss
    else:
      raise ValueError(
        f"BregmanPCA activation_type {self.activation_type!r} is not one of {list(ActivationType)}."
      )
    # Gradients of the loss with respect to the coefficients and to the components.
    self.coefficients_grad_fn = jax.grad(self.bregman_loss_fn, argnums=0)
    self.components_grad_fn = jax.grad(self.bregman_loss_fn, argnums=1)
    self.create_variable(
      "step",
      WeightHParams(shape=[], init=zeros, dtype=jnp.float32, collections=synced),
      trainable=False,
    )
    self.create_variable(
      "mean", WeightHParams(shape=[1] + dims, init=zeros, collections=synced), trainable=False
    )
    self.create_variable(
      "components",
      WeightHParams(shape=[self.num_components] + dims, collections=synced),
      trainable=False,
    )
    self.create_variable(
      "components_momentum",
      WeightHParams(shape=[self.num_components] + dims, init=zeros, collections=synced),
      trainable=False,
    )

  def base_learning_rate(self, step: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(lr multiplier, 1.0 inside [start_step, end_step) else 0.0) at `step`."""
    active = jnp.where((step >= self.start_step) & (step < self.end_step), 1.0, 0.0)
    decaying = jnp.maximum(1.0 - (step - self.start_step) / (self.end_step - self.start_step), 0.0)
    lr = jnp.where(self.constant_lr_schedule, 1.0, decaying)
    return lr * active, active

  def reconstruct(self, coefficients: jax.Array) -> jax.Array:
    """coefficients [B, K] -> activation(mean + coefficients @ components) [B, D...]."""
    return self.activation_fn(
      _predict(coefficients, self.get_var("components"), self.get_var("mean"))
    )

  def _solve_coefficients(self, inputs, components, mean) -> jax.Array:
    """[B, K]: coefficients_steps momentum steps on the loss, lr decaying linearly to 0."""

    def body(count, carry):
      coeffs, momentum = carry
      grad = _unit_rms(self.coefficients_grad_fn(coeffs, components, mean, inputs))
      momentum = self.coefficients_beta * momentum + (1.0 - self.coefficients_beta) * grad
      lr = (1.0 - count / self.coefficients_steps) * self.coefficients_lr
      return coeffs - lr * momentum, momentum

    zeros = jnp.zeros((inputs.shape[0], self.num_components), inputs.dtype)
    coeffs, _ = lax.fori_loop(0, self.coefficients_steps, body, (zeros, zeros))
    return lax.stop_gradient(coeffs)

  def __call__(
    self, inputs: jax.Array, mask: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array]:
    """inputs [B, D...], mask [B, K] or None -> (inputs in fprop_dtype, coefficients [B, K]).

    mask zeroes coefficients (per example and component) in the components' update only.
    """
    mean = self.get_var("mean")
    components = self.get_var("components")
    inputs = self._cast_to_fprop_dtype(inputs)
    training = not self.do_eval
    if training:
      step = self.get_var("step")
      lr, active = self.base_learning_rate(step)
      self.update_var("step", step + 1)
      beta = 1.0 - active * (1.0 - self.mean_beta)  # 1 (no change) outside the update window
      batch_mean = self.inv_activation_fn(jnp.mean(inputs, axis=0, keepdims=True))  # [1, D...]
      mean = beta * mean + (1.0 - beta) * batch_mean
    coefficients = self._solve_coefficients(inputs, components, mean)
    if training:
      masked = coefficients if mask is None else coefficients * mask
      grad = _unit_rms(self.components_grad_fn(masked, components, mean, inputs))
      momentum = self.get_var("components_momentum")
      momentum = self.components_beta * momentum + (1.0 - self.components_beta) * grad * active
      components = components - lr * self.components_lr * momentum
      # As in Pax, the momentum is used for this step but not written back to
      # components_momentum (which stays at its initial zeros).
      self.update_var("mean", mean)
      self.update_var("components", components)
    self.add_summary("bregman_loss", self.bregman_loss_fn(coefficients, components, mean, inputs))
    return inputs, coefficients


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
PARAMS = base_layer.PARAMS
