"""Tests for praxis.layers.glam: the dense GLaM LM it configures, and MoE's refusal."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import py_utils
from praxis.layers import glam

V, D, F, N, LAYERS = 16, 6, 8, 2, 2


def dense_lm(**kwargs):
  return base_layer.instantiate(
    glam.GlamUniTransformerLmHParams(
      name="lm",
      vocab_size=V,
      model_dim=D,
      ff_dim=F,
      attention_num_heads=N,
      attention_key_value_dim=D // N,
      num_transformer_layers=LAYERS,
      **kwargs,
    )
  )


class GlamTest(absltest.TestCase):
  def test_dense_variable_tree(self):
    """GLaM's choices show in the tree: no position table, RmsNorm scales without biases,
    relative bias, gated FFN without biases, the blocks scanned under repeat/sub."""
    lm = dense_lm()
    ids = jnp.zeros((1, 3), jnp.int32)
    params = lm.init(jax.random.PRNGKey(0), ids, jnp.zeros_like(ids))["params"]
    self.assertNotIn("position_emb", params)
    self.assertEqual(params["final_ln"]["scale"].shape, (D,))
    self.assertNotIn("bias", params["final_ln"])
    layer = params["transformer"]["repeat"]["sub"]["x_layers_0"]
    self.assertEqual(layer["layer_norm"]["scale"].shape, (LAYERS, D))
    self.assertIn("relative_bias", layer["self_attention"])
    ffn = layer["ff_layer"]
    self.assertEqual(sorted(ffn["ffn_layer1"]), ["linear"])  # no bias
    self.assertEqual(ffn["ffn_layer1_gate"]["linear"]["w"].shape, (LAYERS, D, F))
    self.assertEqual(ffn["ffn_layer2"]["linear"]["w"].shape, (LAYERS, F, D))

  def test_dense_decoding_matches_forward(self):
    lm = dense_lm()
    ids = jnp.asarray(np.random.default_rng(0).integers(0, V, (2, 4)), jnp.int32)
    zeros = jnp.zeros_like(ids)
    ctx = base_layer.JaxContext.HParams(do_eval=True)
    with base_layer.JaxContext.new_context(hparams=ctx):
      variables = lm.init(jax.random.PRNGKey(1), ids, zeros)
      logits = lm.apply(variables, ids, zeros).logits  # [B, T, V]
      _, cache = lm.apply(variables, zeros, jnp.ones_like(ids), mutable=["decoder_cache"])
      for t in range(ids.shape[1]):
        state = py_utils.merge_dict(cache, variables)
        out, cache = lm.apply(state, ids[:, t], method=lm.extend_step, mutable=["decoder_cache"])
        np.testing.assert_allclose(out.logits, logits[:, t], atol=1e-5)

  def test_moe_is_refused(self):
    cfg = glam.GlamUniTransformerLmHParams(
      vocab_size=V,
      model_dim=D,
      ff_dim=F,
      attention_num_heads=N,
      attention_key_value_dim=D // N,
      num_transformer_layers=4,
      moe=True,
      e_dim=2,
      c_dim=2,
    )
    moe = cfg.stacked_transformer_tpl.block.moe_layer_tpl
    self.assertEqual((moe.num_experts, moe.expert_capacity_dim, moe.gating_func), (2, 2, "top2"))
    lm = base_layer.instantiate(cfg)
    ids = jnp.zeros((1, 3), jnp.int32)
    with self.assertRaisesRegex(NotImplementedError, "TransformerFeedForwardMoe"):
      lm.init(jax.random.PRNGKey(0), ids, jnp.zeros_like(ids))


if __name__ == "__main__":
  absltest.main()
