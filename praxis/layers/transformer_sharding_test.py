"""Tests for transformer_sharding: Pax's set_sharding_params_v1 writes the canonical mesh-axis
mappings into every template of a TransformerLm config (dense, MoE, tied softmax)."""

from absl.testing import absltest

from praxis import pax_fiddle
from praxis.layers import embedding_softmax
from praxis.layers import glam
from praxis.layers import transformer_models
from praxis.layers import transformers

BATCH = ("replica", "data")


def v1(lm_p, training_optimized=True):
  return transformer_models.TransformerLm.set_sharding_params_v1(
    lm_p,
    replica_axis="replica",
    data_axis="data",
    mdl_axis="mdl",
    ici_mesh_shape=[1, 2, 2],
    mesh_axis_names=["replica", "data", "mdl"],
    training_optimized=training_optimized,
  )


class SetShardingParamsV1Test(absltest.TestCase):
  def test_dense_lm(self):
    lm_p = pax_fiddle.Config(
      transformer_models.TransformerLm,
      model_dims=8,
      vocab_size=16,
      stacked_transformer_tpl=pax_fiddle.Config(transformers.StackedTransformer),
      softmax_tpl=pax_fiddle.Config(embedding_softmax.SharedEmbeddingSoftmax),
    )
    lm_p = v1(lm_p)
    self.assertEqual(lm_p.mesh_axis_names, ["replica", "data", "mdl"])
    softmax = lm_p.softmax_tpl
    self.assertEqual(softmax.weight_split_dims_mapping.wt, ["data", "mdl"])  # [D, V]
    self.assertEqual(softmax.lookup_style, "matmul")
    self.assertEqual(softmax.activation_split_dims_mapping.out, [BATCH, None, "mdl"])
    layer = lm_p.stacked_transformer_tpl.transformer_layer_params_tpl
    self.assertEqual(layer.tr_atten_tpl.weight_split_dims_mapping.proj, ["data", "mdl", None])
    self.assertEqual(layer.tr_fflayer_tpl.weight_split_dims_mapping.ffn1, ["mdl", "data"])
    self.assertEqual(layer.tr_fflayer_tpl.activation_split_dims_mapping.ffn1, [BATCH, None, "mdl"])

  def test_moe_glam_not_training_optimized(self):
    lm_p = glam.GlamUniTransformerLmHParams(
      vocab_size=16,
      model_dim=8,
      ff_dim=8,
      attention_num_heads=2,
      attention_key_value_dim=4,
      num_transformer_layers=2,
      moe=True,
      e_dim=2,
      c_dim=2,
    )
    lm_p = v1(lm_p, training_optimized=False)
    self.assertEqual(lm_p.softmax_tpl.weight_split_dims_mapping.wt, ["mdl", "data"])  # [V, D]
    moe = lm_p.stacked_transformer_tpl.block.moe_layer_tpl
    self.assertEqual(moe.weight_split_dims_mapping.emh, ["data", None, "mdl"])
    self.assertEqual(moe.weight_split_dims_mapping.ehm, ["data", "mdl", None])
    # Not training-optimized: expert outputs split by batch only.
    self.assertEqual(moe.activation_split_dims_mapping.egcm, [BATCH, None, None, None])
    self.assertEqual(moe.activation_split_dims_mapping.gsm, [BATCH, None, None])

  def test_expert_parallel_mesh_is_refused(self):
    lm_p = pax_fiddle.Config(transformer_models.TransformerLm, model_dims=8, vocab_size=16)
    with self.assertRaisesRegex(NotImplementedError, "data_expert"):
      transformer_models.TransformerLm.set_custom_sharding_params(
        lm_p, ici_mesh_shape=[2, 2], mesh_axis_names=["data_expert", "mdl"]
      )


if __name__ == "__main__":
  absltest.main()
