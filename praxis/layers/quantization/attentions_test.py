"""Quantized attention layers against numpy: int8 serving weights, their outputs, AQT attention."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import attentions as float_attentions
from praxis.layers.quantization import attentions
from praxis.layers.quantization import multi_query_attention
from praxis.layers.quantization import quantization_hparams as qh


def _np_quantize(w, contract_axes):
  """Symmetric int8 per channel: scale = max|w| / 127 over the contracted axes."""
  scale = np.abs(w).max(axis=contract_axes, keepdims=True) / 127.0
  q = np.clip(np.round(w / scale), -128, 127)
  return q.astype(np.int8), scale


def _serve(cls, x, weight_kwargs=None, **layer_kwargs):
  """(float output, int8-served output, serving params) of one PTQ layer."""
  build = lambda mode: base_layer.instantiate(
    pax_fiddle.Config(
      cls,
      name="l",
      quantization=qh.QuantizationParams(
        quantization_type=qh.QuantizationType.PTQ,
        mode=mode,
        weight_params=qh.WeightQuantizationParams(**(weight_kwargs or {})),
      ),
      **layer_kwargs,
    )
  )
  train, serve = build(qh.QuantizationMode.TRAINING), build(qh.QuantizationMode.INFERENCE)
  with base_layer.JaxContext.new_context():
    variables = train.init(jax.random.PRNGKey(0), x)
    variables = jax.tree.map(lambda v: v + 0.1 if v.ndim == 1 else v, variables)  # non-zero b
    float_out = train.apply(variables, x)
    q_vars, _ = train.apply(variables, mutable=[], method=train.quantize_weight)
    served_shapes = jax.tree.map(jnp.shape, serve.init(jax.random.PRNGKey(0), x))
    q_out = serve.apply(q_vars, x)
  # The serving layer's variables are exactly what quantize_weight produced.
  assert jax.tree.map(jnp.shape, q_vars) == served_shapes, (q_vars, served_shapes)
  return float_out, q_out, variables["params"], q_vars["params"]


class QuantizedProjectionTest(parameterized.TestCase):
  @parameterized.parameters(
    dict(is_output_projection=False, use_nhd_shape=False, combine=False),
    dict(is_output_projection=True, use_nhd_shape=False, combine=False),
    dict(is_output_projection=True, use_nhd_shape=True, combine=False),
    dict(is_output_projection=False, use_nhd_shape=False, combine=True),
    dict(is_output_projection=True, use_nhd_shape=True, combine=True),
  )
  def test_attention_projection_int8_matches_numpy(
    self, is_output_projection, use_nhd_shape, combine
  ):
    rng = np.random.default_rng(0)
    shape = (2, 5, 3, 4) if is_output_projection else (2, 5, 8)
    x = rng.normal(size=shape).astype(np.float32)
    float_out, q_out, f_params, q_params = _serve(
      attentions.AttentionProjection,
      x,
      input_dim=8,
      num_heads=3,
      dim_per_head=4,
      is_output_projection=is_output_projection,
      use_nhd_shape=use_nhd_shape,
      attention_combine_dims=combine,
      use_bias=not combine,
    )
    w = np.asarray(f_params["w"])
    # The weight as [D, N, H] or [N, H, D] (attention_combine_dims stores N*H as one dim).
    full = (3, 4, 8) if (is_output_projection and use_nhd_shape) else (8, 3, 4)
    w_full = w.reshape(full)
    if is_output_projection:
      contract = (0, 1) if use_nhd_shape else (1, 2)
    else:
      contract = (0,)
    q, scale = _np_quantize(w_full, contract)
    np.testing.assert_array_equal(np.asarray(q_params["w"]).reshape(full), q)
    self.assertEqual(q_params["w"].dtype, jnp.int8)
    deq = q.astype(np.float32) * scale
    if is_output_projection:
      eqn = "btnh,nhd->btd" if use_nhd_shape else "btnh,dnh->btd"
    else:
      eqn = "btd,dnh->btnh"
    expected = np.einsum(eqn, x, deq)
    if not combine:
      expected = expected + np.asarray(f_params["b"])
    np.testing.assert_allclose(q_out, expected, rtol=1e-4, atol=1e-4)
    # ... and int8 costs little against the float layer.
    np.testing.assert_allclose(q_out, float_out, atol=0.02 * np.abs(float_out).max())

  def test_sub_channel_serving(self):
    x = np.random.default_rng(1).normal(size=(2, 3, 8)).astype(np.float32)
    _, q_out, f_params, q_params = _serve(
      attentions.AttentionProjection,
      x,
      weight_kwargs=dict(block_size=4),
      input_dim=8,
      num_heads=2,
      dim_per_head=3,
    )
    w = np.asarray(f_params["w"]).reshape(2, 4, 2, 3)  # [blocks, b, N, H]
    q, scale = _np_quantize(w, (1,))
    self.assertEqual(q_params["w_quantized_scale"].shape, (2, 2, 3))
    np.testing.assert_array_equal(q_params["w"], q)
    deq = (q * scale).reshape(8, 2, 3)
    expected = np.einsum("btd,dnh->btnh", x, deq) + np.asarray(f_params["b"])
    np.testing.assert_allclose(q_out, expected, rtol=1e-4, atol=1e-4)

  def test_combined_qkv_int8_matches_numpy(self):
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype(np.float32)
    float_out, q_out, f_params, q_params = _serve(
      attentions.CombinedQKVProjectionLayer, x, input_dim=8, num_heads=2, dim_per_head=3
    )
    w = np.asarray(f_params["w"])  # [3, D, N, H]
    q, scale = _np_quantize(w, (1,))
    np.testing.assert_array_equal(q_params["w"], q)
    self.assertEqual(q_params["w_quantized_scale"].shape, (3, 2, 3))
    deq = q.astype(np.float32) * scale
    b = np.asarray(f_params["b"])
    for i in range(3):
      expected = np.einsum("btd,dnh->btnh", x, deq[i]) + b[i]
      np.testing.assert_allclose(q_out[i], expected, rtol=1e-4, atol=1e-4)
      np.testing.assert_allclose(q_out[i], float_out[i], atol=0.02 * np.abs(float_out[i]).max())

  def test_one_headed_projection_int8_matches_numpy(self):
    x = np.random.default_rng(3).normal(size=(4, 8)).astype(np.float32)
    _, q_out, f_params, q_params = _serve(
      multi_query_attention.OneHeadedAttentionProjection, x, input_dim=8, output_dim=5
    )
    q, scale = _np_quantize(np.asarray(f_params["w"]), (0,))
    np.testing.assert_array_equal(q_params["w"], q)
    expected = x @ (q * scale) + np.asarray(f_params["b"])
    np.testing.assert_allclose(q_out, expected, rtol=1e-4, atol=1e-4)


class QuantizedDotProductAttentionTest(parameterized.TestCase):
  def _run(self, act_precision):
    cfg = dict(input_dim=8, hidden_dim=8, num_heads=2)
    f = base_layer.instantiate(
      pax_fiddle.Config(float_attentions.DotProductAttention, name="a", **cfg)
    )
    q = base_layer.instantiate(
      pax_fiddle.Config(
        attentions.DotProductAttention,
        name="a",
        quantization=qh.QuantizationParams(
          quantization_type=qh.QuantizationType.AQT,
          mode=qh.QuantizationMode.TRAINING,
          act_params=qh.ActQuantizationParams(precision=act_precision),
        ),
        **cfg,
      )
    )
    x = np.random.default_rng(4).normal(size=(2, 5, 8)).astype(np.float32)
    mask = float_attentions.causal_mask(jnp.asarray(x))
    with base_layer.JaxContext.new_context():
      variables = f.init(jax.random.PRNGKey(0), x, x, x, mask)
      out_f, _ = f.apply(variables, x, x, x, mask)
      out_q, _ = q.apply(variables, x, x, x, mask)
    return np.asarray(out_f), np.asarray(out_q)

  def test_aqt_attention_quantizes_both_einsums(self):
    out_f, out_8 = self._run(8)
    _, out_2 = self._run(2)
    scale = np.abs(out_f).max()
    # Same variables as the float layer; int8 activations cost little, 2 bits a lot.
    np.testing.assert_allclose(out_8, out_f, atol=0.05 * scale)
    self.assertGreater(np.abs(out_8 - out_f).max(), 1e-6)
    self.assertGreater(np.abs(out_2 - out_f).max(), 5 * np.abs(out_8 - out_f).max())

  def test_only_aqt_is_supported(self):
    layer = base_layer.instantiate(
      pax_fiddle.Config(
        attentions.DotProductAttention,
        name="a",
        input_dim=4,
        hidden_dim=4,
        num_heads=2,
        quantization=qh.QuantizationParams(quantization_type=qh.QuantizationType.PTQ),
      )
    )
    x = jnp.zeros((1, 2, 4))
    with self.assertRaisesRegex(NotImplementedError, "AQT"):
      layer.init(jax.random.PRNGKey(0), x, x, x, jnp.zeros((1, 1, 2, 2)))


if __name__ == "__main__":
  absltest.main()
