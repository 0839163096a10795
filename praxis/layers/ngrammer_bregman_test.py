"""BregmanCompression / BregmanNgrammer / NgrammerStub against numpy re-computations."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import ngrammer


def _np_layer_norm(x, scale, bias, eps=1e-6):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * (1 + scale) + bias


class BregmanNgrammerTest(absltest.TestCase):
  def test_compression_is_per_head_pca(self):
    cfg = pax_fiddle.Config(
      ngrammer.BregmanCompression,
      name="c",
      num_heads=2,
      dim_per_head=4,
      num_components=3,
      end_step=5,
    )
    layer = base_layer.instantiate(cfg)
    x = np.random.default_rng(0).normal(size=(2, 5, 2, 4)).astype(np.float32)
    with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True)):
      variables = layer.init(jax.random.PRNGKey(0), x)
      coeffs = layer.apply(variables, x)
      self.assertEqual(coeffs.shape, (2, 5, 2, 3))
      bound = layer.bind(variables)
      head1 = bound.bregman_layers[1](x[:, :, 1].reshape(10, 4))[1]
    np.testing.assert_allclose(coeffs[:, :, 1].reshape(10, 3), head1, rtol=1e-5, atol=1e-6)

  def test_ngrammer_adds_the_bilinear_bigram(self):
    n, h, c, v, e = 2, 4, 2, 3, 4
    cfg = pax_fiddle.Config(
      ngrammer.BregmanNgrammer,
      name="g",
      ngram_vocab_size=v,
      ngram_emb_dim=e,
      num_heads=n,
      num_components=c,
      dim_per_head=h,
      concat_ngrams=False,
      end_step=5,
    )
    layer = base_layer.instantiate(cfg)
    embs = np.random.default_rng(1).normal(size=(2, 5, n * h)).astype(np.float32)
    with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True)):
      variables = layer.init(jax.random.PRNGKey(0), None, embs)
      out = np.asarray(layer.apply(variables, None, embs, merge_heads=False))
      bound = layer.bind(variables)
      coeffs = np.asarray(bound.bregman_compression_layer(embs.reshape(2, 5, n, h)))
    p = variables["params"]
    prev = np.concatenate([coeffs[:, :1], coeffs[:, :-1]], axis=1)  # position 0 pairs with itself
    for i in range(n):
      # Pax's order: the previous position's coefficients take correlation's first index.
      weights = np.einsum(
        "blc,blk,ckv->blv", prev[:, :, i], coeffs[:, :, i], p["correlation"][..., i]
      )
      ngram = weights @ p["embedding_table"][..., i]  # [B, L, E]
      ln = p[f"ngram_layer_norm_{i}"]
      expected = _np_layer_norm(ngram, ln["scale"], ln["bias"])
      emb_ln = p[f"emb_layer_norm_{i}"]
      expected = expected + _np_layer_norm(
        embs.reshape(2, 5, n, h)[:, :, i], emb_ln["scale"], emb_ln["bias"]
      )
      np.testing.assert_allclose(out[:, :, i], expected, rtol=1e-4, atol=1e-4)

  def test_stub_is_the_per_head_norm(self):
    cfg = pax_fiddle.Config(ngrammer.NgrammerStub, name="s", dim_per_head=3, num_heads=2)
    layer = base_layer.instantiate(cfg)
    embs = np.random.default_rng(2).normal(size=(1, 4, 6)).astype(np.float32)
    pad = np.array([[0, 0, 0, 1]], np.float32)
    variables = layer.init(jax.random.PRNGKey(0), None, embs)
    out = np.asarray(layer.apply(variables, None, embs, pad))
    heads = embs.reshape(1, 4, 2, 3)
    for i in range(2):
      ln = variables["params"][f"emb_layer_norm_{i}"]
      expected = _np_layer_norm(heads[:, :, i], ln["scale"], ln["bias"]) * (1 - pad[..., None])
      np.testing.assert_allclose(out.reshape(1, 4, 2, 3)[:, :, i], expected, rtol=1e-5, atol=1e-5)
    step = layer.apply(variables, embs, 2, method=layer.extend_step)
    np.testing.assert_allclose(step, layer.apply(variables, None, embs)[:, 2], rtol=1e-6)


if __name__ == "__main__":
  absltest.main()
