"""Tests for praxis.layers.video.losses: the R1 penalty of a linear critic and VQGANLoss
against its formulas in numpy (EMA update included)."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers.video import losses


def softplus(x):
  return np.log1p(np.exp(x))


class LossesTest(absltest.TestCase):
  def test_r1_penalty_of_linear_critic(self):
    a = np.random.RandomState(0).normal(size=(3, 4)).astype(np.float32)
    x = jnp.ones((2, 3, 4))
    logits, penalty = losses.r1_gradient_penalty(x, lambda v: jnp.sum(v * a, axis=(1, 2)), 2.0)
    np.testing.assert_allclose(logits, [a.sum()] * 2, rtol=1e-5)
    np.testing.assert_allclose(penalty, 2.0 * np.sum(a**2), rtol=1e-5)

  def test_vqgan_loss_matches_formulas(self):
    rng = np.random.RandomState(1)
    video = rng.normal(size=(2, 3, 4, 4, 3))
    preds = py_utils.NestedMap(
      reconstructed=rng.normal(size=video.shape),
      logits_real=rng.normal(size=(2, 1)),
      logits_fake=rng.normal(size=(2, 1)),
      quantizer_loss=np.float64(0.7),
      r1_gradient_penalty=np.float64(0.2),
    )
    batch = py_utils.NestedMap(video=video)
    layer = base_layer.instantiate(pax_fiddle.Config(losses.VQGANLoss, name="loss"))
    variables = layer.init(jax.random.PRNGKey(0), preds, batch)
    variables = {"non_trainable": {"ema_real_pred": 0.5, "ema_fake_pred": -0.25}}
    out, updated = layer.apply(variables, preds, batch, mutable=["non_trainable"])
    real, fake = preds.logits_real, preds.logits_fake
    ema_fake = fake.mean() * 0.001 + -0.25 * 0.999
    ema_real = real.mean() * 0.001 + 0.5 * 0.999
    np.testing.assert_allclose(updated["non_trainable"]["ema_fake_pred"], ema_fake, rtol=1e-5)
    np.testing.assert_allclose(updated["non_trainable"]["ema_real_pred"], ema_real, rtol=1e-5)
    lecam = np.mean(np.maximum(real - ema_fake, 0) ** 2) + np.mean(
      np.maximum(ema_real - fake, 0) ** 2
    )
    d_adv = softplus(-real).mean() + softplus(fake).mean()
    g_adv = 0.1 * softplus(-fake).mean()
    recon = 5.0 * np.mean((video - preds.reconstructed) ** 2)
    np.testing.assert_allclose(out.lecam_loss, 0.001 * lecam, rtol=1e-4)
    np.testing.assert_allclose(out.d_loss, d_adv + 0.2 + 0.001 * lecam, rtol=1e-4)
    np.testing.assert_allclose(out.g_loss, recon + g_adv + 0.7, rtol=1e-4)
    ctx = base_layer.JaxContext.HParams(do_eval=True)
    with base_layer.JaxContext.new_context(hparams=ctx):
      out = layer.apply(variables, preds, batch)
    self.assertEqual(float(out.quantizer_loss), 0.0)  # eval ignores the quantizer loss


if __name__ == "__main__":
  absltest.main()
