"""Quantized embedding / softmax layers against numpy per-class (row) quantization."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import embedding_softmax as float_embedding_softmax
from praxis.layers.quantization import embedding_softmax
from praxis.layers.quantization import quantization_hparams as qh

V, D = 12, 8


def _qparams(mode, qtype=qh.QuantizationType.PTQ, use_symmetric=True):
  return qh.QuantizationParams(
    quantization_type=qtype,
    mode=mode,
    weight_params=qh.WeightQuantizationParams(use_symmetric=use_symmetric),
  )


def _build(cls, mode, **kwargs):
  return base_layer.instantiate(
    pax_fiddle.Config(
      cls, name="emb", num_classes=V, input_dims=D, quantization=_qparams(mode, **kwargs)
    )
  )


def _np_row_quantize(table):
  """Symmetric int8 per row: (q, scale) with table ~ q * scale[:, None]."""
  scale = np.abs(table).max(axis=1) / 127.0
  return np.round(table / scale[:, None]).astype(np.int8), scale


class EmbeddingTest(parameterized.TestCase):
  def test_quantize_weight_is_numpy_row_quantization(self):
    layer = _build(embedding_softmax.Embedding, qh.QuantizationMode.MATERIALIZE)
    ids = np.array([[0, 3, 11]])
    with base_layer.JaxContext.new_context():
      variables = layer.init(jax.random.PRNGKey(1), ids)
      q = layer.apply(variables, method=layer.quantize_weight)["params"]
    table = np.asarray(variables["params"]["emb_var"])
    want_q, want_scale = _np_row_quantize(table)
    self.assertEqual(q["emb_var"].dtype, jnp.int8)
    self.assertEqual(q["emb_var_quantized_scale"].shape, (V,))
    np.testing.assert_allclose(q["emb_var_quantized_scale"], want_scale, rtol=1e-5)
    np.testing.assert_array_equal(q["emb_var"], want_q)

  @parameterized.parameters("index", "matmul")
  def test_inference_lookup_rescales_rows(self, lookup_style):
    serve = base_layer.instantiate(
      pax_fiddle.Config(
        embedding_softmax.Embedding,
        name="emb",
        num_classes=V,
        input_dims=D,
        lookup_style=lookup_style,
        scale_sqrt_depth=True,
        quantization=_qparams(qh.QuantizationMode.INFERENCE),
      )
    )
    rng = np.random.default_rng(0)
    q = rng.integers(-127, 128, size=(V, D)).astype(np.int8)
    scale = rng.uniform(0.01, 0.1, size=(V,)).astype(np.float32)
    ids = np.array([[1, 5, 5], [0, 11, 2]])
    variables = {"params": {"emb_var": q, "emb_var_quantized_scale": scale}}
    with base_layer.JaxContext.new_context():
      out = serve.apply(variables, ids)
    want = q.astype(np.float32)[ids] * scale[ids][..., None] * np.sqrt(D)
    np.testing.assert_allclose(out, want, rtol=1e-5)

  @parameterized.parameters(qh.QuantizationType.FQ, qh.QuantizationType.AQT)
  def test_training_lookup_is_fake_quantized(self, qtype):
    layer = _build(embedding_softmax.Embedding, qh.QuantizationMode.TRAINING, qtype=qtype)
    ids = np.array([[2, 7, 9]])
    with base_layer.JaxContext.new_context():
      variables = layer.init(jax.random.PRNGKey(2), ids)
      out = layer.apply(variables, ids)
    q, scale = _np_row_quantize(np.asarray(variables["params"]["emb_var"]))
    want = (q.astype(np.float32) * scale[:, None])[ids]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-6)


class SharedEmbeddingSoftmaxTest(absltest.TestCase):
  def test_ptq_serving_close_to_float(self):
    def build(mode):
      return base_layer.instantiate(
        pax_fiddle.Config(
          embedding_softmax.SharedEmbeddingSoftmax,
          name="softmax",
          num_classes=V,
          input_dims=D,
          quantization=_qparams(mode),
        )
      )

    floaty = base_layer.instantiate(
      pax_fiddle.Config(
        float_embedding_softmax.SharedEmbeddingSoftmax, name="softmax", num_classes=V, input_dims=D
      )
    )
    materialize, serve = (
      build(qh.QuantizationMode.MATERIALIZE),
      build(qh.QuantizationMode.INFERENCE),
    )
    x = np.random.default_rng(3).normal(size=(2, D)).astype(np.float32)
    ids = np.array([[4, 0, 11]])
    with base_layer.JaxContext.new_context():
      variables = floaty.init(jax.random.PRNGKey(3), x, method=floaty.get_logits)
      q = materialize.apply(variables, method=materialize.quantize_weight)
      w = q["params"]["logits_ffn"]["linear"]["w"]
      self.assertEqual(w.dtype, jnp.int8)
      self.assertEqual(w.shape, (D, V))
      logits = serve.apply(q, x, method=serve.get_logits)
      want_logits = floaty.apply(variables, x, method=floaty.get_logits)
      embs = serve.apply(q, ids, method=serve.emb_lookup)
      want_embs = floaty.apply(variables, ids, method=floaty.emb_lookup)
    np.testing.assert_allclose(logits, want_logits, atol=0.02 * np.abs(want_logits).max())
    np.testing.assert_allclose(embs, want_embs, atol=0.01 * np.abs(want_embs).max())


class NClassMajorSharedEmbeddingSoftmaxTest(absltest.TestCase):
  def test_materialize_then_serve(self):
    build = lambda mode: _build(embedding_softmax.NClassMajorSharedEmbeddingSoftmax, mode)
    materialize, serve = (
      build(qh.QuantizationMode.MATERIALIZE),
      build(qh.QuantizationMode.INFERENCE),
    )
    x = np.random.default_rng(4).normal(size=(3, D)).astype(np.float32)
    ids = np.array([1, 10])
    with base_layer.JaxContext.new_context():
      variables = materialize.init(jax.random.PRNGKey(4), x, method=materialize.get_logits)
      q = materialize.apply(variables, method=materialize.quantize_weight)
      logits = serve.apply(q, x, method=serve.get_logits)
      embs = serve.apply(q, ids, method=serve.emb_lookup)
    w = np.asarray(variables["params"]["w"])  # [D, V]
    bias = np.asarray(variables["params"]["bias"]["b"])
    self.assertEqual(q["params"]["w"].shape, (V, D))  # class-major
    q_np, scale = _np_row_quantize(w.T)
    np.testing.assert_array_equal(q["params"]["w"], q_np)
    np.testing.assert_allclose(logits, x @ w + bias, atol=0.02 * np.abs(x @ w).max())
    np.testing.assert_allclose(embs, q_np[ids] * scale[ids][:, None], rtol=1e-5)

  def test_training_mode_is_refused(self):
    layer = _build(
      embedding_softmax.NClassMajorSharedEmbeddingSoftmax, qh.QuantizationMode.TRAINING
    )
    with self.assertRaisesRegex(ValueError, "INFERENCE or MATERIALIZE"):
      layer.init(jax.random.PRNGKey(0), np.zeros((1, D), np.float32), method=layer.get_logits)


if __name__ == "__main__":
  absltest.main()
