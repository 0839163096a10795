"""Tests for praxis.layers.stochastics: Dropout (eval is the identity, training is inverted
dropout) and StochasticResidual."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis.layers import stochastics


class DropoutTest(absltest.TestCase):
  def test_deterministic_and_keep_prob_one_are_identity(self):
    x = jax.random.normal(jax.random.key(0), (4, 8))
    layer = stochastics.Dropout.HParams(keep_prob=0.5).Instantiate()
    # No "dropout" rng is given: eval must not need one.
    np.testing.assert_array_equal(layer.apply({}, x, deterministic=True), x)
    keep_all = stochastics.Dropout.HParams(keep_prob=1.0).Instantiate()
    np.testing.assert_array_equal(
      keep_all.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(1)}), x
    )

  def test_training_drops_at_the_right_rate_and_rescales(self):
    keep_prob = 0.7
    x = 1.0 + jax.random.uniform(jax.random.key(0), (200, 500))  # never 0, so a 0 means dropped
    layer = stochastics.Dropout.HParams(keep_prob=keep_prob).Instantiate()
    out = np.asarray(layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(1)}))
    kept = out != 0
    n = kept.size
    # Binomial(n, p): the kept fraction is within 5 standard deviations of keep_prob.
    self.assertLess(abs(kept.mean() - keep_prob), 5 * np.sqrt(keep_prob * (1 - keep_prob) / n))
    np.testing.assert_allclose(out[kept], np.asarray(x)[kept] / keep_prob, rtol=1e-6)
    # The gradient is the same mask, scaled: d out / d x = keep / keep_prob.
    grad = jax.grad(
      lambda v: jnp.sum(
        layer.apply({}, v, deterministic=False, rngs={"dropout": jax.random.key(1)})
      )
    )(x)
    np.testing.assert_allclose(np.asarray(grad), kept / keep_prob, rtol=1e-6)

  def test_rng_decides_the_mask(self):
    x = jnp.ones((64, 64))
    layer = stochastics.Dropout.HParams(keep_prob=0.5).Instantiate()
    a = layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    b = layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    c = layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(2)})
    np.testing.assert_array_equal(a, b)
    self.assertFalse(np.array_equal(np.asarray(a), np.asarray(c)))

  def test_broadcast_dims_share_the_mask(self):
    x = jnp.ones((3, 10, 32))
    layer = stochastics.Dropout.HParams(
      keep_prob=0.5, noise_shape_broadcast_dims=(1,)
    ).Instantiate()
    out = np.asarray(layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(0)}))
    for t in range(1, 10):
      np.testing.assert_array_equal(out[:, t], out[:, 0])
    self.assertTrue(0 < (out[:, 0] == 0).mean() < 1)

  def test_bfloat16_stays_bfloat16_and_bad_keep_prob_is_reported(self):
    x = jnp.ones((4, 4), jnp.bfloat16)
    layer = stochastics.Dropout.HParams(keep_prob=0.5).Instantiate()
    out = layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(0)})
    self.assertEqual(out.dtype, jnp.bfloat16)
    self.assertTrue(set(np.unique(np.asarray(out, np.float32))) <= {0.0, 2.0})
    with self.assertRaisesRegex(ValueError, r"keep_prob must be in \(0, 1\], got 0.0"):
      stochastics.Dropout.HParams(keep_prob=0.0).Instantiate().apply({}, x, deterministic=False)

  def test_without_deterministic_pax_context_decides(self):
    x = jnp.ones((64, 64))
    layer = stochastics.Dropout.HParams(keep_prob=0.5).Instantiate()
    with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True)):
      np.testing.assert_array_equal(layer.apply({}, x), x)
    out = np.asarray(layer.apply({}, x, rngs={"dropout": jax.random.key(0)}))
    self.assertTrue(set(np.unique(out)) == {0.0, 2.0})

  def test_pax_random_stream_noise_shape_and_mask_formula(self):
    x = jnp.ones((2, 10, 6, 8))
    cfg = stochastics.Dropout.HParams(
      keep_prob=0.8, noise_shape=[10, 6, 8], noise_shape_broadcast_dims=[2]
    )
    layer = cfg.Instantiate()
    key = jax.random.key(5)
    out = np.asarray(layer.apply({}, x, rngs={"random": key}))
    # One [10, 6, 1] draw shared over the batch and the last dim; Pax's floor(keep + U) mask
    # from the layer's "random" key.
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(out[..., 0:1] * np.ones((1, 1, 1, 8)), out)
    self.assertTrue(set(np.unique(out)) <= {0.0, 1.25})
    # The "random" stream wins over "dropout" when both are given.
    both = layer.apply({}, x, rngs={"random": key, "dropout": jax.random.key(9)})
    np.testing.assert_array_equal(both, out)
    with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True)):
      np.testing.assert_array_equal(layer.apply({}, x), x)
      at_eval = stochastics.Dropout.HParams(keep_prob=0.5, dropout_at_eval=True).Instantiate()
      self.assertIn(0.0, np.asarray(at_eval.apply({}, x, rngs={"random": key})))


class StochasticResidualTest(absltest.TestCase):
  def test_drops_whole_examples_and_rescales_the_kept(self):
    layer = stochastics.StochasticResidual.HParams(survival_prob=0.5, residual_weight=2.0)
    layer = layer.Instantiate()
    x = jnp.zeros((400, 3, 2))
    residual = jnp.ones((400, 3, 2))
    np.testing.assert_array_equal(layer.apply({}, x, residual, deterministic=True), 2.0 * residual)
    out = np.asarray(
      layer.apply({}, x, residual, deterministic=False, rngs={"random": jax.random.key(0)})
    )
    # Kept: residual / 0.5 * 2.0 = 4; dropped: 0. One draw per example.
    self.assertTrue(set(np.unique(out)) == {0.0, 4.0})
    np.testing.assert_array_equal(out, np.broadcast_to(out[:, :1, :1], out.shape))
    self.assertAlmostEqual(float((out[:, 0, 0] > 0).mean()), 0.5, delta=0.1)


if __name__ == "__main__":
  absltest.main()
