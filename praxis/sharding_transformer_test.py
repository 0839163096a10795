"""The praxis stacked transformers under the Pax v1 rules on 8 fake CPU devices.

On meshes (1, 8, 1), (1, 4, 2) and (2, 2, 2): the forward pass and the gradients equal the
single-device result (float32, rtol/atol 1e-5: only the summation order differs), and every
weight is placed as the table says for weights (embed -> data; mlp, heads, vocab -> mdl; the rest
replicated).
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import functools

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import sharding
from praxis.layers import transformers

P = jax.sharding.PartitionSpec
B, T, D = 8, 6, 16
# The weight half of set_sharding_params_v1, written out per logical name.
WEIGHT_PLACEMENT = {"embed": "data", "mlp": "mdl", "heads": "mdl", "vocab": "mdl"}


def _stacked():
  return transformers.StackedTransformer.HParams.config(
    num_layers=2, model_dims=D, hidden_dims=32, num_heads=4, dim_per_head=4
  ).Instantiate()


def _repeated():
  block = transformers.StackedTransformer.HParams.config(
    num_layers=1, model_dims=D, hidden_dims=32, num_heads=4, dim_per_head=4
  )
  return transformers.StackedTransformerRepeated.HParams.config(
    block=block, x_times=2
  ).Instantiate()


class StackedTransformerShardingTest(parameterized.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    rng = np.random.RandomState(0)
    cls.inputs = jnp.asarray(rng.randn(B, T, D), jnp.float32)
    paddings = np.zeros((B, T), np.float32)
    paddings[1, -2:] = 1.0  # one padded example, so masks take part
    cls.paddings = jnp.asarray(paddings)

  _references = {}

  def _check(self, make_model, ici):
    model = make_model()
    mesh = sharding.make_mesh(ici)
    key = jax.random.PRNGKey(0)
    abstract = jax.eval_shape(
      functools.partial(base_layer.init_boxed, model), key, self.inputs, self.paddings
    )
    variables = nn.unbox(model.init(key, self.inputs, self.paddings))

    def loss_and_out(v, x, pad):
      out = model.apply(v, x, pad)
      return jnp.mean(jnp.square(out)), out

    step = jax.value_and_grad(loss_and_out, has_aux=True)
    if make_model not in self._references:  # one single-device run per model
      self._references[make_model] = jax.jit(step)(variables, self.inputs, self.paddings)
    (_, ref_out), ref_grads = self._references[make_model]

    shardings = sharding.logical_to_shardings(abstract, mesh)
    boxes = jax.tree.leaves(abstract, is_leaf=lambda x: isinstance(x, nn.Partitioned))
    seen = set()
    for box, placed in zip(boxes, jax.tree.leaves(shardings)):
      expected = P(*[WEIGHT_PLACEMENT.get(name) for name in box.names])
      self.assertEqual(placed.spec, expected, box.names)
      seen.update(box.names)
    self.assertContainsSubset({"embed", "mlp", "heads", "kv"}, seen)

    sharded_vars = jax.device_put(variables, shardings)
    x = jax.device_put(self.inputs, sharding.batch_sharding(mesh, 3))
    pad = jax.device_put(self.paddings, sharding.batch_sharding(mesh, 2))
    with sharding.activate(mesh):
      (_, out), grads = jax.jit(step, out_shardings=((None, None), shardings))(sharded_vars, x, pad)
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
    for (path, g), r in zip(jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(ref_grads)):
      np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5, err_msg=jax.tree_util.keystr(path))
    return seen

  @parameterized.parameters((1, 8, 1), (1, 4, 2), (2, 2, 2))
  def test_stacked(self, *ici):
    self._check(_stacked, ici)

  def test_repeated_has_replicated_layers_axis(self):
    self.assertIn("layers", self._check(_repeated, (2, 2, 2)))


if __name__ == "__main__":
  absltest.main()
