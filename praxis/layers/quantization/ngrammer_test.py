"""Quantized (VQ)Ngrammer: the float layer's tree and output, with int8 bi-gram tables served."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import ngrammer as float_ngrammer
from praxis.layers.quantization import ngrammer
from praxis.layers.quantization import quantization_hparams as qh

B, L, N, H, E = 2, 5, 2, 4, 4
UNIGRAMS, BUCKETS, K = 7, 11, 3


def _quant(mode):
  return qh.QuantizationParams(quantization_type=qh.QuantizationType.PTQ, mode=mode)


def _layer(cls, **kwargs):
  fields = dict(
    name="ng",
    ngram_vocab_size=BUCKETS,
    ngram_emb_dim=E,
    num_heads=N,
    dim_per_head=H,
    concat_ngrams=False,
  )
  if cls in (float_ngrammer.VQNgrammer, ngrammer.VQNgrammer):
    fields["num_clusters"] = K
  else:
    fields["unigram_vocab_size"] = UNIGRAMS
  return base_layer.instantiate(pax_fiddle.Config(cls, **fields, **kwargs))


def _inputs():
  rng = np.random.default_rng(0)
  return rng.integers(0, UNIGRAMS, size=(B, L)), rng.normal(size=(B, L, N * H)).astype(np.float32)


class NgrammerTest(absltest.TestCase):
  def test_serving_int8_tables_matches_float_on_dequantized_tables(self):
    ids, embs = _inputs()
    floaty = _layer(float_ngrammer.Ngrammer)
    materialize = _layer(ngrammer.Ngrammer, quantization=_quant(qh.QuantizationMode.MATERIALIZE))
    serve = _layer(ngrammer.Ngrammer, quantization=_quant(qh.QuantizationMode.INFERENCE))
    with base_layer.JaxContext.new_context():
      variables = floaty.init(jax.random.PRNGKey(0), ids, embs)
      # MATERIALIZE holds exactly the float layer's variables.
      self.assertEqual(
        jax.tree.structure(materialize.init(jax.random.PRNGKey(0), ids, embs)),
        jax.tree.structure(variables),
      )
      q = materialize.apply(variables, method=materialize.quantize_weight)
      served = serve.apply(q, ids, embs)
      # The float layer over the dequantized tables is what serving must give.
      deq = jax.tree.map(lambda x: x, variables)
      for i in range(N):
        table = q["params"][f"ngram_table_{i}"]
        self.assertEqual(table["emb_var"].dtype, jnp.int8)
        deq["params"][f"ngram_table_{i}"]["emb_var"] = (
          table["emb_var"].astype(jnp.float32) * table["emb_var_quantized_scale"][:, None]
        )
      want = floaty.apply(deq, ids, embs)
      close = floaty.apply(variables, ids, embs)
    np.testing.assert_allclose(served, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(served, close, atol=0.05)


class VQNgrammerTest(absltest.TestCase):
  def test_inner_ngrammer_is_quantized(self):
    ids, embs = _inputs()
    floaty = _layer(float_ngrammer.VQNgrammer)
    serve = _layer(ngrammer.VQNgrammer, quantization=_quant(qh.QuantizationMode.INFERENCE))
    with base_layer.JaxContext.new_context():
      float_vars = floaty.init(jax.random.PRNGKey(0), ids, embs)
      q_vars = serve.init(jax.random.PRNGKey(0), ids, embs)
    table = q_vars["params"]["ngram_layer"]["ngram_table_0"]
    self.assertEqual(table["emb_var"].dtype, jnp.int8)
    self.assertEqual(table["emb_var_quantized_scale"].shape, (BUCKETS,))
    # Everything else is the float layer's.
    self.assertEqual(
      jax.tree.structure(q_vars["non_trainable"]), jax.tree.structure(float_vars["non_trainable"])
    )


if __name__ == "__main__":
  absltest.main()
