"""BregmanPCA: the losses against numpy formulas, the PCA fixed point, and one training step."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import bregman


def _layer(activation, **kwargs):
  cfg = pax_fiddle.Config(
    bregman.BregmanPCA,
    name="pca",
    num_components=2,
    input_dims=[4],
    activation_type=activation,
    negative_slope=0.2,
    end_step=10,
    **kwargs,
  )
  return base_layer.instantiate(cfg)


class BregmanTest(absltest.TestCase):
  def test_losses_match_numpy(self):
    rng = np.random.default_rng(0)
    coeffs = rng.normal(size=(3, 2)).astype(np.float32)
    comps = rng.normal(size=(2, 4)).astype(np.float32)
    mean = rng.normal(size=(1, 4)).astype(np.float32)
    pre = coeffs @ comps + mean
    labels = rng.normal(size=(3, 4)).astype(np.float32)
    np.testing.assert_allclose(
      bregman._squared_loss(coeffs, comps, mean, labels),
      np.mean(np.sum(0.5 * (pre - labels) ** 2, 1)),
      rtol=1e-5,
    )
    probs = np.exp(labels) / np.exp(labels).sum(-1, keepdims=True)
    log_q = pre - np.log(np.exp(pre).sum(-1, keepdims=True))
    kl = np.mean(np.sum(probs * (np.log(probs) - log_q), -1))
    np.testing.assert_allclose(bregman._softmax_loss(coeffs, comps, mean, probs), kl, rtol=1e-4)

  def test_exact_reconstruction_is_a_fixed_point(self):
    layer = _layer(bregman.ActivationType.IDENTITY)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(5, 4)), jnp.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    bound = layer.bind(variables)
    comps, mean = jnp.eye(4), jnp.zeros((1, 4))
    np.testing.assert_allclose(bound.coefficients_grad_fn(x, comps, mean, x), 0.0, atol=1e-6)
    np.testing.assert_allclose(bound.components_grad_fn(x, comps, mean, x), 0.0, atol=1e-6)

  def test_training_step_updates_state_and_reduces_the_loss(self):
    for activation in bregman.ActivationType:
      layer = _layer(activation, coefficients_lr=0.05, components_lr=0.05)
      x = np.random.default_rng(2).uniform(0.1, 1.0, size=(8, 4)).astype(np.float32)
      x = x / x.sum(-1, keepdims=True) if activation == "SOFTMAX" else x
      variables = layer.init(jax.random.PRNGKey(0), x)
      (out, coeffs), updated = layer.apply(variables, x, mutable=["non_trainable"])
      np.testing.assert_array_equal(out, x)
      self.assertEqual(coeffs.shape, (8, 2))
      state = updated["non_trainable"]
      self.assertEqual(float(state["step"]), 1.0)
      bound = layer.bind(variables)
      before = bound.bregman_loss_fn(
        jnp.zeros_like(coeffs),
        variables["non_trainable"]["components"],
        variables["non_trainable"]["mean"],
        x,
      )
      after = bound.bregman_loss_fn(coeffs, state["components"], state["mean"], x)
      self.assertLess(float(after), float(before), activation)


if __name__ == "__main__":
  absltest.main()
