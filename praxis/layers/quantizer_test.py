"""Tests for the vector quantizers and their codebook statistics against numpy."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import pax_fiddle
from praxis.layers import quantizer
from praxis.layers import quantizer_objectives


class ObjectivesTest(absltest.TestCase):
  def test_pplx_entropy_and_coverage(self):
    codes = np.array([[[0, 1], [0, 2], [1, 2], [3, 3]]])  # [1, 4, G=2], last row padded
    paddings = np.array([[0, 0, 0, 1]])
    pplx, entropy, hist = quantizer_objectives.batch_pplx_entropy_from_codes(
      jnp.asarray(codes), 4, paddings=jnp.asarray(paddings)
    )
    np.testing.assert_allclose(hist, [[2, 1, 0, 0], [0, 1, 2, 0]])
    p = np.array([2, 1]) / 3
    want = np.exp(-np.sum(p * np.log(p)))  # both groups have the same distribution
    np.testing.assert_allclose(pplx, want, rtol=1e-5)
    np.testing.assert_allclose(entropy, np.log(want), rtol=1e-5)
    coverage = quantizer_objectives.batch_codebook_coverage(
      jnp.asarray(codes), 4, paddings=jnp.asarray(paddings)
    )
    np.testing.assert_allclose(coverage, 0.5)


class QuantizeVectorTest(absltest.TestCase):
  def test_nearest_code_word(self):
    rng = np.random.default_rng(0)
    latent = rng.normal(size=(2, 3, 2, 4)).astype(np.float32)  # [B, T, G, H]
    codebook = rng.normal(size=(5, 2, 4)).astype(np.float32)  # [V, G, H]
    q, codes, onehot = quantizer.quantize_vector(jnp.asarray(latent), jnp.asarray(codebook))
    dist = ((latent[..., None, :] - np.moveaxis(codebook, 0, 1)[None, None]) ** 2).sum(-1)
    want = dist.argmin(-1)  # [B, T, G]
    np.testing.assert_array_equal(codes, want)
    np.testing.assert_allclose(q, codebook[want, np.arange(2)], rtol=1e-6)
    self.assertEqual(onehot.shape, (2, 3, 2, 5))


class VectorQuantizerTest(absltest.TestCase):
  def test_loss_codes_and_straight_through(self):
    vq = pax_fiddle.Config(
      quantizer.VectorQuantizer, name="vq", num_latent_classes=3, latent_dim=2, beta=0.25
    ).Instantiate()
    z = jnp.array([[[1.0, 0.1], [0.0, 2.0], [5.0, 5.0]]])
    paddings = jnp.array([[0.0, 0.0, 1.0]])
    v = vq.init(jax.random.key(0), z, paddings)
    self.assertEqual(v["params"]["w"].shape, (3, 1, 2))
    w = jnp.array([[[1.0, 0.0]], [[0.0, 1.0]], [[-1.0, 0.0]]])
    out = vq.apply({"params": {"w": w}}, z, paddings)
    np.testing.assert_array_equal(out.z_codes[0, :, 0], [0, 1, 0])  # padded row: code 0
    # Codes come from the normalised latents; the losses compare the raw (masked) latents.
    zr = np.array([[1.0, 0.1], [0.0, 2.0]])
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    per_frame = ((zr - q) ** 2).mean(-1).sum() / 2
    np.testing.assert_allclose(out.loss, per_frame * 1.25, rtol=1e-4)
    grad = jax.grad(lambda zz: vq.apply({"params": {"w": w}}, zz, paddings).z_q.sum())(z)
    self.assertGreater(float(jnp.abs(grad[0, :2]).sum()), 0.0)

  def test_random_quantizer_tree_and_no_gradient(self):
    rq = pax_fiddle.Config(
      quantizer.RandomVectorQuantizer,
      name="rq",
      latent_dim=3,
      projection_dim=4,
      num_latent_classes=5,
      num_groups=2,
    ).Instantiate()
    z = jnp.ones((2, 6, 3))
    v = rq.init(jax.random.key(0), z, jnp.zeros((2, 6)))
    shapes = {k: a.shape for k, a in v["params"].items()}
    self.assertEqual(
      shapes, {"random_proj": (3, 4), "random_bias": (4,), "random_codebook": (5, 2, 2)}
    )
    out = rq.apply(v, z, jnp.zeros((2, 6)))
    self.assertEqual(out.z_codes.shape, (2, 6, 2))


if __name__ == "__main__":
  absltest.main()
