"""DotProductAttention's `attention_impl`: the choice of implementation and the equality of them.

On CPU the fused kind that runs is `jax.nn.dot_product_attention(implementation="xla")`; the
cuDNN kind is chosen by the same selection function (tested here as a table) and takes the same
arguments, so on a GPU machine `--test_env=PAX_TEST_CUDNN=1` also compares it (see the end).
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import attention_masks
from praxis.layers import dot_product_attention
from praxis.layers import multi_query_attention

B, T, D, N, H = 2, 16, 32, 4, 8
select = dot_product_attention.select_attention_impl


def build(cls=dot_product_attention.DotProductAttention, **kwargs):
  kwargs.setdefault("input_dim", D)
  kwargs.setdefault("hidden_dim", N * H)
  kwargs.setdefault("num_heads", N)
  return base_layer.instantiate(pax_fiddle.Config(cls, name="atten", **kwargs))


def masks():
  """Causal + padding + segment masks, as the stack builds them (additive, [B, 1, T, T])."""
  x = jnp.zeros((B, T, D))
  paddings = jnp.zeros((B, T)).at[1, -5:].set(1.0)  # row 1: 5 padded positions
  segments = jnp.concatenate([jnp.ones((B, 9)), 2 * jnp.ones((B, 7))], axis=1).astype(jnp.int32)
  mask = attention_masks.convert_paddings_to_mask(paddings)
  mask = attention_masks.merge_masks(mask, attention_masks.causal_mask(x))
  return {
    "causal": attention_masks.causal_mask(x),
    "causal_padding": mask,
    "causal_segment": attention_masks.merge_masks(mask, attention_masks.segment_mask(segments)),
  }


class SelectionTest(parameterized.TestCase):
  @parameterized.parameters(
    ("auto", "cpu", jnp.bfloat16, 128, None, "einsum"),
    ("auto", "tpu", jnp.bfloat16, 128, None, "einsum"),
    ("auto", "gpu", jnp.bfloat16, 128, None, "cudnn"),
    ("auto", "gpu", jnp.float16, 64, None, "cudnn"),
    ("auto", "gpu", jnp.float32, 128, None, "einsum"),  # cuDNN's fused attention is half only
    ("auto", "gpu", jnp.bfloat16, 256, None, "einsum"),  # head dim over cuDNN's limit
    ("auto", "gpu", jnp.bfloat16, 100, None, "einsum"),  # not a multiple of 8
    ("auto", "gpu", jnp.bfloat16, 128, "atten_logit_cap", "einsum"),
    ("xla", "cpu", jnp.float32, 128, None, "xla"),
    ("cudnn", "cpu", jnp.float32, 128, None, "cudnn"),  # asked for: jax says what fails
    ("einsum", "gpu", jnp.bfloat16, 128, None, "einsum"),
  )
  def test_table(self, requested, platform, dtype, h, einsum_only, expected):
    self.assertEqual(select(requested, platform, dtype, h, einsum_only), expected)

  def test_fused_with_einsum_only_feature_raises(self):
    with self.assertRaisesRegex(ValueError, "atten_logit_cap.*attention_impl='einsum'"):
      select("cudnn", "gpu", jnp.bfloat16, 128, "atten_logit_cap (a tanh cap)")

  def test_unknown_raises(self):
    with self.assertRaisesRegex(ValueError, "one of"):
      select("flash", "gpu", jnp.bfloat16, 128, None)

  def test_layer_features_force_einsum(self):
    q = jnp.zeros((B, T, N, H), jnp.bfloat16)
    cases = {
      "atten_logit_cap": build(atten_logit_cap=50.0),
      "attention_extra_logit": build(attention_extra_logit=0.0),
    }
    for reason, layer in cases.items():
      got = layer._einsum_only(None, True)
      self.assertIn(reason, got)
      self.assertEqual(select("auto", "gpu", q.dtype, H, got), "einsum")
    self.assertIsNone(build()._einsum_only(None, True))
    self.assertIn("dropout", build(atten_dropout_prob=0.1)._einsum_only(None, False))
    self.assertIsNone(build(atten_dropout_prob=0.1)._einsum_only(None, True))  # eval


class EqualityTest(parameterized.TestCase):
  """einsum vs jax.nn.dot_product_attention(xla) inside the layer: outputs and gradients."""

  def _run(self, impl, mask, dtype, **kwargs):
    layer = build(attention_impl=impl, fprop_dtype=dtype, **kwargs)
    x = jax.random.normal(jax.random.PRNGKey(1), (B, T, D), jnp.float32)
    variables = layer.init(jax.random.PRNGKey(0), x, x, x, mask)
    # A non-zero per-dim scale, so its gradient path is exercised too.
    variables = jax.tree_util.tree_map(lambda v: v + 0.1, variables)

    def loss(v, x):
      out, probs = layer.apply(v, x, x, x, mask)
      return jnp.sum(out.astype(jnp.float32) ** 2), (out, probs)

    (_, (out, probs)), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(variables, x)
    return out, probs, grads

  @parameterized.product(
    mask_name=["causal", "causal_padding", "causal_segment"],
    kv_heads=[None, 2, 1],
  )
  def test_float32_equal(self, mask_name, kv_heads):
    mask = masks()[mask_name]
    # No biases: a key bias's gradient is zero up to rounding (softmax is shift-invariant).
    kw = dict(num_kv_heads=kv_heads, zero_fully_masked=True, use_bias=False)
    out_e, probs_e, grads_e = self._run("einsum", mask, jnp.float32, **kw)
    out_x, probs_x, grads_x = self._run("xla", mask, jnp.float32, **kw)
    self.assertEqual(probs_e.shape, (B, N, T, T))
    self.assertIsNone(probs_x)  # fused kinds return no probabilities
    np.testing.assert_allclose(out_x, out_e, atol=1e-6, rtol=1e-6)
    flat_e = jax.tree_util.tree_leaves(grads_e)
    flat_x = jax.tree_util.tree_leaves(grads_x)
    self.assertEqual(len(flat_e), len(flat_x))
    for ge, gx in zip(flat_e, flat_x):  # equal up to float32 rounding of sums of ~T*H terms
      np.testing.assert_allclose(gx, ge, atol=1e-6 * float(jnp.max(jnp.abs(ge))), rtol=1e-5)

  def test_bfloat16_close(self):
    mask = masks()["causal_segment"]
    out_e, _, _ = self._run("einsum", mask, jnp.bfloat16)
    out_x, _, _ = self._run("xla", mask, jnp.bfloat16)
    out_f, _, _ = self._run("einsum", mask, jnp.float32)
    self.assertEqual(out_x.dtype, jnp.bfloat16)
    # Both within bf16 rounding of the float32 result, and of each other.
    scale = float(jnp.max(jnp.abs(out_f)))
    for out in (out_e, out_x):
      np.testing.assert_allclose(np.asarray(out, np.float32), out_f, atol=2e-2 * scale)
    np.testing.assert_allclose(
      np.asarray(out_x, np.float32), np.asarray(out_e, np.float32), atol=2e-2 * scale
    )

  def test_fully_masked_rows_zeroed_on_both(self):
    mask = masks()["causal_padding"]  # row 1's last 5 queries see nothing
    for impl in ("einsum", "xla"):
      out, _, _ = self._run(impl, mask, jnp.float32, zero_fully_masked=True, use_bias=False)
      np.testing.assert_array_equal(np.asarray(out)[1, -5:], 0.0)

  def test_auto_on_cpu_is_einsum_with_probs(self):
    _, probs, _ = self._run("auto", masks()["causal"], jnp.bfloat16)
    self.assertEqual(probs.shape, (B, N, T, T))
    np.testing.assert_allclose(np.asarray(probs, np.float32).sum(-1), 1.0, atol=1e-2)

  def test_logit_cap_with_fused_raises(self):
    with self.assertRaisesRegex(ValueError, "atten_logit_cap"):
      self._run("xla", masks()["causal"], jnp.float32, atten_logit_cap=50.0)

  def test_multi_query_layer_equal(self):
    mask = masks()["causal_padding"]
    kw = dict(cls=multi_query_attention.MultiQueryDotProductAttention)
    out_e, _, _ = self._run("einsum", mask, jnp.float32, **kw)
    out_x, _, _ = self._run("xla", mask, jnp.float32, **kw)
    np.testing.assert_allclose(out_x, out_e, atol=2e-6, rtol=2e-6)

  def test_bfloat16_logits_accumulate_in_float32(self):
    layer = build(fprop_dtype=jnp.bfloat16)
    q = jnp.ones((1, 1, N, H), jnp.bfloat16)
    k = jnp.ones((1, 3, N, H), jnp.bfloat16)
    logits = layer.apply({}, q, k, method=layer._atten_logits)
    self.assertEqual(logits.dtype, jnp.float32)
    np.testing.assert_array_equal(logits, float(H))

  @absltest.skipUnless(os.environ.get("PAX_TEST_CUDNN"), "needs a GPU and PAX_TEST_CUDNN=1")
  def test_cudnn_equals_xla(self):
    mask = masks()["causal_segment"]
    out_c, _, _ = self._run("cudnn", mask, jnp.bfloat16)
    out_x, _, _ = self._run("xla", mask, jnp.bfloat16)
    np.testing.assert_allclose(
      np.asarray(out_c, np.float32), np.asarray(out_x, np.float32), atol=1e-2, rtol=1e-2
    )


if __name__ == "__main__":
  absltest.main()
