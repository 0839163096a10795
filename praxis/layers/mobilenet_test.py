"""Tests for praxis.layers.mobilenet: Pax's variable tree (all under the `body` Sequential),
depthwise convolutions, the residual of same-shape blocks, shapes, and channel rounding."""

from absl.testing import absltest
import flax
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import mobilenet


def tree_shapes(variables):
  return {"/".join(k): v.shape for k, v in flax.traverse_util.flatten_dict(variables).items()}


class MobileNetTest(absltest.TestCase):
  def test_tree_and_shapes(self):
    cfg = pax_fiddle.Config(
      mobilenet.MobileNet,
      name="mobilenet",
      expansions=[1, 3],
      strides=[1, 2],
      channels=[16, 24],
      output_channels=32,
      num_classes=5,
    )
    net = base_layer.instantiate(cfg)
    images = jnp.ones((2, 25, 25, 3))
    variables = net.init(jax.random.PRNGKey(0), images)
    shapes = tree_shapes(variables["params"])
    self.assertEqual(shapes["body/layers_0/w"], (3, 3, 3, 32))  # entry conv, 32 channels
    # Block 0 has no expansion: depthwise then project.
    self.assertEqual(shapes["body/layers_1/body/layers_0/w"], (3, 3, 1, 32))
    self.assertEqual(shapes["body/layers_1/body/layers_1/w"], (1, 1, 32, 16))
    # Block 1: expansion 16 -> 48, depthwise on 48, project to 24.
    self.assertEqual(shapes["body/layers_2/body/layers_0/w"], (1, 1, 16, 48))
    self.assertEqual(shapes["body/layers_2/body/layers_1/w"], (3, 3, 1, 48))
    self.assertEqual(shapes["body/layers_3/w"], (1, 1, 24, 32))  # final conv
    self.assertEqual(shapes["body/layers_5/linear/w"], (32, 5))  # predictions (after pooling)
    self.assertEqual(net.apply(variables, images).shape, (2, 5))

  def test_same_shape_block_adds_its_input(self):
    block = base_layer.instantiate(
      pax_fiddle.Config(
        mobilenet.InvertedResidualBlock, name="b", input_dim=4, output_dim=4, expansion=2
      )
    )
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 5, 5, 4)), jnp.float32)
    variables = block.init(jax.random.PRNGKey(0), x)
    body = block.apply(variables, x, method=lambda m, y: m.body(y))
    np.testing.assert_allclose(block.apply(variables, x), body + x, rtol=1e-6)

  def test_make_divisible(self):
    self.assertEqual(mobilenet._make_divisible(32 * 0.35, 8), 16)  # 11.2 -> 8 is >10% low
    self.assertEqual(mobilenet._make_divisible(24 * 1.4, 8), 32)
    self.assertEqual(mobilenet._make_divisible(3, 8, 8), 8)


if __name__ == "__main__":
  absltest.main()
