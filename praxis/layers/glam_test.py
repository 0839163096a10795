"""Tests for praxis.layers.glam: the dense and the MoE GLaM LMs it configures."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import glam
from praxis.layers import models

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

  def test_moe_tree_and_aux_losses(self):
    """A MoE GLaM: every other layer routes over e_dim experts; the LM's aux-loss weight counts
    one load-balance loss per MoE layer plus the softmax's z-loss."""
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
    ids = jnp.asarray([[1, 2, 3]], jnp.int32)
    zeros = jnp.zeros_like(ids)
    variables = lm.init(jax.random.PRNGKey(0), ids, zeros)
    sub = variables["params"]["transformer"]["repeat"]["sub"]
    self.assertEqual(sub["x_layers_0"]["ff_layer"]["gate"].shape, (2, D, 2))  # [blocks, D, E]
    self.assertEqual(sub["x_layers_0"]["ff_layer"]["wi_0"].shape, (2, 2, D, F))
    self.assertIn("ffn_layer1_gate", sub["x_layers_1"]["ff_layer"])  # the dense layer
    labels = py_utils.NestedMap(class_ids=ids, class_weights=jnp.ones_like(ids))
    out, _ = lm.apply(variables, ids, zeros, labels=labels, mutable=["aux_loss"])
    self.assertEqual(float(out.aux_loss_weight), 3.0)
    np.testing.assert_allclose(out.total_loss, out.avg_xent + out.aux_loss, rtol=1e-6)
    self.assertGreater(float(out.aux_loss), 0.0)
    # LanguageModel sums the same recorded losses (one value per scanned block) into a scalar.
    model = base_layer.instantiate(pax_fiddle.Config(models.LanguageModel, name="m", lm_tpl=cfg))
    batch = py_utils.NestedMap(ids=ids, labels=ids, paddings=zeros, weights=jnp.ones_like(ids))
    (metrics, _), _ = model.apply(
      {"params": {"lm": variables["params"]}}, batch, mutable=["aux_loss"]
    )
    np.testing.assert_allclose(metrics["aux_loss"][0], out.aux_loss, rtol=1e-6)


if __name__ == "__main__":
  absltest.main()
