"""Tests for praxis.layers.video.quantizer against numpy: ids, decoding, losses, gradients."""

import itertools

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.video import quantizer


def _apply(cfg, x, do_eval=False):
  layer = base_layer.instantiate(cfg)
  ctx = base_layer.JaxContext.HParams(do_eval=do_eval)
  with base_layer.JaxContext.new_context(hparams=ctx):
    variables = layer.init(jax.random.PRNGKey(0), x)
    return layer, variables, layer.apply(variables, x)


def np_log_softmax(z):
  z = z - z.max(-1, keepdims=True)
  return z - np.log(np.exp(z).sum(-1, keepdims=True))


def np_softmax(z):
  return np.exp(np_log_softmax(z))


class LookupFreeQuantizerTest(absltest.TestCase):
  def test_ids_losses_and_decode_match_numpy(self):
    d = 4
    x = np.random.RandomState(0).normal(size=(2, 3, d)).astype(np.float32)
    cfg = pax_fiddle.Config(quantizer.LookupFreeQuantizer, name="q", embedding_dim=d)
    layer, variables, (q, res) = _apply(cfg, x)
    self.assertEqual(variables, {})
    bits = (x >= 0).astype(np.int64)
    np.testing.assert_array_equal(q, np.where(bits, 1.0, -1.0))
    np.testing.assert_array_equal(res.encoding_indices, (bits * 2 ** np.arange(d)).sum(-1))
    np.testing.assert_array_equal(
      layer.apply(variables, res.encoding_indices, method=layer.decode_ids), q
    )
    commit = 0.25 * np.mean((np.where(bits, 1.0, -1.0) - x) ** 2)
    np.testing.assert_allclose(res.e_latent_loss, commit, rtol=1e-5)
    # The entropy loss over all 2^d codes, code k's bit j = (k >> j) & 1; its logit is
    # -|x - c|^2 up to a per-row constant, at temperature 0.01.
    codes = np.array([[1.0 if (k >> j) & 1 else -1.0 for j in range(d)] for k in range(2**d)])
    flat = x.reshape(-1, d).astype(np.float64)
    logits = -((flat[:, None, :] - codes[None]) ** 2).sum(-1) / 0.01
    probs = np_softmax(logits)
    log_probs = np_log_softmax(logits)
    sample_entropy = -np.mean(np.sum(probs * log_probs, -1))
    avg = probs.mean(0)
    avg_entropy = -np.sum(avg * np.log(avg + 1e-5))
    np.testing.assert_allclose(
      res.entropy_loss, 0.1 * (sample_entropy - avg_entropy), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(res.quantizer_loss, res.e_latent_loss + res.entropy_loss, rtol=1e-6)

  def test_eval_has_no_losses_and_groups_split_ids(self):
    x = np.random.RandomState(1).normal(size=(5, 6)).astype(np.float32)
    cfg = pax_fiddle.Config(
      quantizer.LookupFreeQuantizer, name="q", embedding_dim=6, num_token_groups=2
    )
    layer, variables, (_, res) = _apply(cfg, x, do_eval=True)
    self.assertNotIn("quantizer_loss", res)
    bits = (x >= 0).astype(np.int64).reshape(5, 2, 3)
    np.testing.assert_array_equal(res.encoding_indices, (bits * [1, 2, 4]).sum(-1))
    decoded = layer.apply(variables, res.encoding_indices, method=layer.decode_ids)
    np.testing.assert_array_equal(decoded, np.where(x >= 0, 1.0, -1.0))

  def test_straight_through_gradient_and_grouped_entropy(self):
    x = jnp.asarray(np.random.RandomState(2).normal(size=(4, 8)), jnp.float32)
    cfg = pax_fiddle.Config(
      quantizer.LookupFreeQuantizer,
      name="q",
      embedding_dim=8,
      entropy_loss_ratio=0.0,
      commitment_cost=0.0,
    )
    layer = base_layer.instantiate(cfg)
    grad = jax.grad(lambda v: jnp.sum(layer.apply({}, v)[0] * 3.0))(x)
    np.testing.assert_allclose(grad, np.full(x.shape, 3.0))
    # Groups of 1 bit: the batch term is the mean per-bit entropy of the mean bit probability.
    affinity = jnp.stack([2 * x, -2 * x], -1)
    got = quantizer._factorized_entropy_loss(affinity, 1, 1.0)
    p = np_softmax(np.asarray(affinity, np.float64))
    sample = -(p * np.log(p)).sum((-1, -2)).mean()
    mean_p = p.mean(0)  # [8, 2]
    batch = -(mean_p * np.log(mean_p + 1e-5)).sum(-1).mean()
    np.testing.assert_allclose(got, sample - batch, rtol=1e-5)


class ScalarQuantizerTest(absltest.TestCase):
  def test_mixed_radix_ids_round_trip(self):
    widths = (5, 4, 3)
    x = np.random.RandomState(3).normal(size=(7, 3)).astype(np.float32) * 2
    cfg = pax_fiddle.Config(quantizer.ScalarQuantizer, name="q", embedding_dim=3, dim_widths=widths)
    layer, variables, (q, res) = _apply(cfg, x)
    w = np.asarray(widths)
    bounded = np.sin(x) * w * (1 - 1e-3) / 2 - np.where(w % 2, 0.0, 0.5)
    levels = np.clip(np.round(bounded), -(w // 2), w - w // 2 - 1)
    middle = (w - w // 2 * 2 - 1) / 2
    np.testing.assert_allclose(q, levels - middle, atol=1e-6)
    digits = (levels + w // 2).astype(np.int64)
    ids = (digits[:, 0] * 4 + digits[:, 1]) * 3 + digits[:, 2]
    np.testing.assert_array_equal(res.encoding_indices, ids)
    np.testing.assert_allclose(
      layer.apply(variables, res.encoding_indices, method=layer.decode_ids), q, atol=1e-6
    )
    # Every id in range decodes to distinct values inside each channel's levels.
    all_ids = jnp.arange(int(np.prod(w)))
    vals = np.asarray(layer.apply(variables, all_ids, method=layer.decode_ids))
    self.assertLen({tuple(v) for v in vals}, int(np.prod(w)))
    self.assertEqual(
      {tuple(v) for v in vals},
      {tuple(np.array(c) - w // 2 - middle) for c in itertools.product(*[range(n) for n in w])},
    )


if __name__ == "__main__":
  absltest.main()
