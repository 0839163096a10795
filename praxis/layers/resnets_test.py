"""Tests for praxis.layers.resnets and ConvBNAct: Pax's variable tree, output shapes, the
residual sum, and the preset configs."""

from absl.testing import absltest
import flax
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import convolutions
from praxis.layers import resnets


def tree_shapes(variables):
  flat = flax.traverse_util.flatten_dict(variables)
  return {"/".join(k): v.shape for k, v in flat.items()}


class ResNetTest(absltest.TestCase):
  def test_resnet5_tree_and_shape(self):
    net = base_layer.instantiate(resnets.ResNet.HParamsResNet5().set(name="resnet"))
    images = jnp.ones((2, 25, 25, 3))
    variables = net.init(jax.random.PRNGKey(0), images)
    shapes = tree_shapes(variables["params"])
    self.assertEqual(shapes["entryflow_conv/w"], (7, 7, 3, 4))  # channels[0] / 4 (bottleneck)
    self.assertEqual(shapes["stage_0_block_0/body_1/w"], (1, 1, 4, 4))  # kernels=[1]
    self.assertEqual(shapes["stage_0_block_0/body_2/bn/gamma"], (16,))
    self.assertEqual(shapes["stage_0_block_0/shortcut/w"], (1, 1, 4, 16))
    self.assertIn("stage_0_block_0/body_0/bn/moving_mean", tree_shapes(variables["non_trainable"]))
    self.assertEqual(net.apply(variables, images).shape, (2, 16))  # global average pooled

  def test_basic_blocks_strides_and_block_features(self):
    cfg = pax_fiddle.Config(
      resnets.ResNet,
      name="resnet",
      block_params=pax_fiddle.Config(resnets.ResNetBasicBlock),
      strides=[1, 2],
      channels=[8, 16],
      blocks=[1, 2],
      kernels=[3, 3],
      return_block_features=True,
    )
    net = base_layer.instantiate(cfg)
    images = jnp.ones((1, 32, 32, 3))
    variables = net.init(jax.random.PRNGKey(1), images)
    shapes = tree_shapes(variables["params"])
    self.assertEqual(shapes["entryflow_conv/w"], (7, 7, 3, 8))  # basic blocks: no contraction
    self.assertNotIn("stage_0_block_0/shortcut/w", shapes)  # same shape: identity shortcut
    self.assertEqual(shapes["stage_1_block_0/shortcut/w"], (1, 1, 8, 16))
    self.assertNotIn("stage_1_block_0/body_2/w", shapes)  # two convs per basic block
    features = net.apply(variables, images)
    # 32 -> 16 (entry conv) -> 8 (max pool) -> 8 (stage 0) -> 4 (stage 1).
    self.assertEqual({k: v.shape for k, v in features.items()}, {2: (1, 8, 8, 8), 3: (1, 4, 4, 16)})

  def test_zero_init_residual_block_is_its_shortcut(self):
    block = base_layer.instantiate(
      pax_fiddle.Config(
        resnets.ResNetBlock, name="block", input_dim=8, output_dim=8, zero_init_residual=True
      )
    )
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 4, 4, 8)), jnp.float32)
    variables = block.init(jax.random.PRNGKey(0), x)
    np.testing.assert_allclose(block.apply(variables, x), jnp.maximum(x, 0), atol=1e-6)

  def test_presets_and_mismatched_stages(self):
    self.assertEqual(tuple(resnets.ResNet.HParamsResNet101().blocks), (3, 4, 23, 3))
    self.assertIs(resnets.ResNet.HParamsResNet18().block_params.cls, resnets.ResNetBasicBlock)
    bad = pax_fiddle.Config(resnets.ResNet, name="r", strides=[1], channels=[8, 16])
    with self.assertRaisesRegex(ValueError, "one entry per stage"):
      base_layer.instantiate(bad).init(jax.random.PRNGKey(0), jnp.ones((1, 8, 8, 3)))


class ConvBNActTest(absltest.TestCase):
  def test_conv_then_batch_norm_then_activation(self):
    layer = base_layer.instantiate(
      pax_fiddle.Config(
        convolutions.ConvBNAct, name="c", filter_shape=(3, 3, 2, 4), filter_stride=(1, 1)
      )
    )
    x = jnp.asarray(np.random.default_rng(2).normal(size=(2, 5, 5, 2)), jnp.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    conv = jax.lax.conv_general_dilated(
      x, variables["params"]["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    mean, var = conv.mean((0, 1, 2)), conv.var((0, 1, 2))
    expected = np.maximum((conv - mean) / np.sqrt(var + 1e-3), 0)  # training: batch statistics
    np.testing.assert_allclose(layer.apply(variables, x), expected, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
