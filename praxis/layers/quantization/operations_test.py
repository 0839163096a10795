"""quantization.operations against numpy: scale formulas, round-trip error bounds, int einsums."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams


def _rng(seed=0):
  return np.random.default_rng(seed)


class ReducePrecisionTest(absltest.TestCase):
  def test_symmetric_per_channel_scale_and_error_bound(self):
    w = _rng().normal(size=(16, 5)).astype(np.float32)  # [in, out]
    q, scale, zp = operations.reduce_einsum_weight_precision(
      "ab,bc->ac", w, calculation_dtype=jnp.float32
    )
    self.assertIsNone(zp)
    self.assertEqual(q.dtype, jnp.int8)
    np.testing.assert_allclose(scale, np.abs(w).max(axis=0) / 127.0, rtol=1e-6)
    # Rounding error is at most half a step per channel.
    err = np.abs(np.asarray(q, np.float32) * scale - w)
    self.assertTrue(np.all(err <= scale / 2 + 1e-6))

  def test_asymmetric_maps_min_to_qmin(self):
    w = _rng(1).uniform(0.5, 3.0, size=(8, 3)).astype(np.float32)
    q, scale, zp = operations.reduce_precision(w, [0], use_symmetric=False, bits=4)
    np.testing.assert_allclose(scale, (w.max(0) - w.min(0))[None] / 15.0, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(q).min(axis=0), [-8, -8, -8])
    np.testing.assert_allclose(np.asarray(q) * scale - zp, w, atol=np.max(scale) / 2 + 1e-5)

  def test_quantized_einsum_close_to_float(self):
    rng = _rng(2)
    x = rng.normal(size=(3, 16)).astype(np.float32)
    w = rng.normal(size=(16, 4)).astype(np.float32)
    for symmetric in (True, False):
      q, s, zp = operations.reduce_einsum_weight_precision(
        "ab,bc->ac", w, calculation_dtype=jnp.float32, use_symmetric=symmetric
      )
      out = operations.einsum("ab,bc->ac", x, q, s, zp)
      np.testing.assert_allclose(out, x @ w, atol=0.1)

  def test_int_by_int_einsum_is_exact_integer_math(self):
    rng = _rng(3)
    x = rng.integers(-100, 100, size=(2, 8)).astype(np.int8)
    w = rng.integers(-100, 100, size=(8, 3)).astype(np.int8)
    out = operations.einsum("ab,bc->ac", jnp.asarray(x), jnp.asarray(w), jnp.ones(3))
    np.testing.assert_array_equal(out, x.astype(np.int64) @ w.astype(np.int64))

  def test_fakequant_has_straight_through_gradient(self):
    w = _rng(4).normal(size=(8, 2)).astype(np.float32)
    grad = jax.grad(lambda t: operations.fakequant_einsum("ab,bc->ac", t).sum())(w)
    # Every element except the per-channel max (which also drives the scale) passes 1.
    self.assertGreater(np.mean(np.isclose(grad, 1.0, atol=1e-3)), 0.8)


class SubChannelTest(absltest.TestCase):
  def test_sub_channel_shape(self):
    shape, dims = operations.get_sub_channel_shape([8, 6], 2, [0])
    self.assertEqual((list(shape), list(dims)), ([4, 2, 6], [1]))
    shape, dims = operations.get_sub_channel_shape([8, 6], 3, [0])  # 3 does not divide 8
    self.assertEqual((list(shape), list(dims)), ([8, 6], [0]))

  def test_block_fakequant_is_finer_than_per_channel(self):
    w = _rng(5).normal(size=(64, 4)).astype(np.float32)
    w[:8] *= 50.0  # one block of outliers
    coarse = operations.fakequant_einsum("ab,bc->ac", w, bits=4)
    fine = operations.fakequant_einsum("ab,bc->ac", w, bits=4, block_size=8)
    self.assertLess(np.abs(fine - w)[8:].mean(), np.abs(coarse - w)[8:].mean())


class CustomEinsumTest(absltest.TestCase):
  def test_forward_and_gradient_close_to_float(self):
    rng = _rng(6)
    x = rng.normal(size=(4, 8)).astype(np.float32)
    w = rng.normal(size=(8, 3)).astype(np.float32)
    params = quantization_hparams.QuantizedTrainingParams(
      einsum_output_dtype=jnp.float32, random_rounding_bwd=False
    )
    key = jax.random.PRNGKey(0)

    def loss(x, w):
      return jnp.sum(
        operations.custom_einsum(x, w, eqn="ab,bc->ac", prng_key=key, params=params) ** 2
      )

    np.testing.assert_allclose(
      operations.custom_einsum(x, w, eqn="ab,bc->ac", prng_key=key, params=params), x @ w, atol=0.1
    )
    gx, gw = jax.grad(loss, argnums=(0, 1))(x, w)
    rx, rw = jax.grad(lambda x, w: jnp.sum((x @ w) ** 2), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(gx, rx, atol=0.1 * np.abs(rx).max())
    np.testing.assert_allclose(gw, rw, atol=0.1 * np.abs(rw).max())


class FactorizeTest(absltest.TestCase):
  def test_full_rank_reconstructs(self):
    m = _rng(7).normal(size=(5, 4)).astype(np.float32)
    a, b = operations.factorize_weight(m, 4)
    np.testing.assert_allclose(a @ b, m, atol=1e-4)


if __name__ == "__main__":
  absltest.main()
