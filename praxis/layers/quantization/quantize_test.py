"""quantize: config rewriters swap float layers for quantized ones; a rewritten LM serves PTQ
weights with a loss close to the float model's."""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import fiddle as fdl
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import layers
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import ngrammer
from praxis.layers import quantization
from praxis.layers.quantization import quantization_hparams as qh
from praxis.layers.quantization import quantize

VOCAB, DIMS = 32, 16


def _lm_config():
  stack = pax_fiddle.Config(
    layers.transformers.StackedTransformer,
    num_layers=2,
    model_dims=DIMS,
    hidden_dims=2 * DIMS,
    num_heads=2,
    dim_per_head=DIMS // 2,
  )
  return pax_fiddle.Config(
    layers.TransformerLm,
    name="lm",
    model_dims=DIMS,
    vocab_size=VOCAB,
    stacked_transformer_tpl=stack,
  )


def _linear_classes(config):
  return {
    fdl.get_callable(tr.tr_fflayer_tpl.fflayer_tpl.linear_tpl)
    for tr in quantization.utils.find_target_tpl(config, layers.transformers.Transformer)
  }


class RewriteTest(absltest.TestCase):
  def test_linear_only_swaps_ffn_linears_and_softmax(self):
    config = _lm_config()
    config.softmax_tpl.scale_sqrt_depth = True
    quantize.set_transformer_quantization(
      config, linear_only=True, quantize_embedding_softmax=True, num_bits=4, block_size=8
    )
    self.assertEqual(_linear_classes(config), {quantization.Linear})
    linear = config.stacked_transformer_tpl.transformer_layer_params_tpl.tr_fflayer_tpl
    wp = linear.fflayer_tpl.linear_tpl.quantization.weight_params
    self.assertEqual((wp.precision, wp.block_size), (4, 8))
    self.assertIs(fdl.get_callable(config.softmax_tpl), quantization.SharedEmbeddingSoftmax)
    # The softmax keeps the float template's settings.
    self.assertTrue(config.softmax_tpl.scale_sqrt_depth)
    atten = config.stacked_transformer_tpl.transformer_layer_params_tpl.tr_atten_tpl
    self.assertIs(fdl.get_callable(atten.proj_tpl), layers.attentions.AttentionProjection)

  def test_transposed_softmax_and_ngrammer(self):
    config = _lm_config()
    config.ngrammer_tpl = pax_fiddle.Config(
      ngrammer.VQNgrammer, num_clusters=2, num_heads=2, dim_per_head=8, ngram_emb_dim=8
    )
    quantize.set_transformer_quantization(
      config,
      linear_only=True,
      quantize_embedding_softmax=True,
      transposed_embedding_softmax=True,
      quantize_ngrammer_embedding=True,
    )
    self.assertIs(
      fdl.get_callable(config.softmax_tpl), quantization.NClassMajorSharedEmbeddingSoftmax
    )
    self.assertIs(fdl.get_callable(config.ngrammer_tpl), quantization.VQNgrammer)
    self.assertEqual(config.ngrammer_tpl.num_clusters, 2)

  def test_skip_transformers_and_errors(self):
    config = _lm_config()
    config.stacked_transformer_tpl.transformer_layer_params_tpl.name = "skipme"
    quantize.set_transformer_quantization(config, linear_only=True, skip_transformers=["skipme"])
    self.assertEqual(_linear_classes(config), {layers.Linear})
    with self.assertRaisesRegex(ValueError, "weight_quant_only=False"):
      quantize.set_transformer_quantization(_lm_config(), weight_quant_only=False)
    with self.assertRaisesRegex(ValueError, "num_bits_act"):
      quantize.set_transformer_quantization(_lm_config(), num_bits_act=8)

  def test_mixed_precision_and_inference_mode(self):
    config = _lm_config()
    quantize.set_transformer_mixed_precision_quantization(
      config,
      mode=qh.QuantizationMode.TRAINING,
      num_bits={qh.TransformerLayer.LINEAR: 4, qh.TransformerLayer.EMBEDDING_SOFTMAX: 8},
    )
    tr = config.stacked_transformer_tpl.transformer_layer_params_tpl
    self.assertEqual(
      tr.tr_fflayer_tpl.fflayer_tpl.linear_tpl.quantization.weight_params.precision, 4
    )
    self.assertEqual(config.softmax_tpl.quantization.weight_params.precision, 8)
    quantize.set_inference_mode(config)
    self.assertEqual(config.softmax_tpl.quantization.mode, qh.QuantizationMode.INFERENCE)
    self.assertEqual(
      tr.tr_fflayer_tpl.fflayer_tpl.linear_tpl.quantization.mode, qh.QuantizationMode.INFERENCE
    )

  def test_multi_query_attention(self):
    tr = pax_fiddle.Config(
      layers.transformers.Transformer,
      tr_atten_tpl=pax_fiddle.Config(layers.multi_query_attention.MultiQueryDotProductAttention),
    )
    quantize.quantize_transformer_layer_weights(
      tr, qh.QuantizationType.PTQ, qh.QuantizationMode.TRAINING, qh.WeightQuantizationParams()
    )
    self.assertIs(
      fdl.get_callable(tr.tr_atten_tpl.headless_proj_tpl),
      quantization.multi_query_attention.OneHeadedAttentionProjection,
    )
    self.assertIs(fdl.get_callable(tr.tr_atten_tpl.proj_tpl), quantization.AttentionProjection)

  def test_diffusion(self):
    class Block(base_layer.BaseLayer):
      conv_tpl: pax_fiddle.Config = base_layer.template_field(layers.Conv2D)

    config = pax_fiddle.Config(Block)
    quantize.set_diffusion_quantization(config, Block)
    self.assertIs(fdl.get_callable(config.conv_tpl), quantization.Conv2D)

  def test_for_transformer_rewrites_a_built_model(self):
    @dataclasses.dataclass(frozen=True)
    class Task:
      model: object

    class Exp:
      def task(self):
        return Task(model=base_layer.instantiate(_lm_config()))

    wrapped = quantize.for_transformer(linear_only=True)(Exp)
    self.assertEqual(wrapped.__name__, "Exp")
    model = wrapped().task().model
    self.assertIsInstance(model, layers.TransformerLm)
    linear = model.stacked_transformer_tpl.transformer_layer_params_tpl.tr_fflayer_tpl
    self.assertIs(fdl.get_callable(linear.fflayer_tpl.linear_tpl), quantization.Linear)
    float_model = Exp().task().model
    float_ffn = float_model.stacked_transformer_tpl.transformer_layer_params_tpl.tr_fflayer_tpl
    self.assertIs(fdl.get_callable(float_ffn.fflayer_tpl.linear_tpl), layers.Linear)
    # (the float experiment is untouched)


class PtqLmTest(parameterized.TestCase):
  @parameterized.parameters(True, False)
  def test_int8_lm_loss_close_to_float(self, linear_only):
    ids = np.random.default_rng(0).integers(0, VOCAB, size=(2, 8))
    paddings = np.zeros((2, 8), np.float32)
    labels = py_utils.NestedMap(class_ids=ids, class_weights=1.0 - paddings)

    def build(mode):
      config = _lm_config()
      if mode is not None:
        quantize.set_transformer_quantization(
          config, mode=mode, linear_only=linear_only, quantize_embedding_softmax=True
        )
      return base_layer.instantiate(config)

    floaty = build(None)
    materialize = build(qh.QuantizationMode.MATERIALIZE)
    serve = build(qh.QuantizationMode.INFERENCE)
    with base_layer.JaxContext.new_context():
      variables = floaty.init(jax.random.PRNGKey(0), ids, paddings, labels=labels)
      q = materialize.apply(variables, method=materialize.quantize_weight)
      float_loss = floaty.apply(variables, ids, paddings, labels=labels).avg_xent
      int8_loss = serve.apply(q, ids, paddings, labels=labels).avg_xent
    ffn = q["params"]["transformer"]["x_layers_0"]["ff_layer"]["ffn_layer1"]["linear"]
    self.assertEqual(ffn["w"].dtype, jnp.int8)
    self.assertEqual(q["params"]["softmax"]["logits_ffn"]["linear"]["w"].dtype, jnp.int8)
    query = q["params"]["transformer"]["x_layers_0"]["self_attention"]["query"]["w"]
    self.assertEqual(query.dtype, jnp.float32 if linear_only else jnp.int8)
    np.testing.assert_allclose(int8_loss, float_loss, rtol=0.01)


if __name__ == "__main__":
  absltest.main()
