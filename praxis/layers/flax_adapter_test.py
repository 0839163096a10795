"""FlaxModuleAdapter / DirectFlaxModuleAdapter: the wrapped module's outputs equal plain Flax's,
and its variables get praxis metadata (trainable params, non-trainable batch stats, shardings)."""

from absl.testing import absltest
import flax.linen as nn
from flax.linen import partitioning as flax_partitioning
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import flax_adapter

Collection = base_layer.WeightHParamsCollection


class _DenseBN(nn.Module):
  @nn.compact
  def __call__(self, x, train: bool = False):
    x = nn.Dense(4)(x)
    return nn.BatchNorm(use_running_average=not train)(x)

  def double(self, x):
    return 2 * self(x)


class _Annotated(nn.Module):
  @nn.compact
  def __call__(self, x):
    w = flax_partitioning.param_with_axes(
      "w", nn.initializers.ones, (3, 4), jnp.float32, axes=("input", "output")
    )
    b = self.param("b", nn.initializers.zeros, (4,))
    return x @ w + b


class FlaxAdapterTest(absltest.TestCase):
  def test_outputs_and_variables_match_plain_flax(self):
    cfg = pax_fiddle.Config(
      flax_adapter.FlaxModuleAdapter, name="a", module_factory_method=_DenseBN
    )
    layer = base_layer.instantiate(cfg)
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    plain = _DenseBN().init(jax.random.PRNGKey(0), x)
    self.assertIn("batch_stats", variables)
    # The same tree as the plain module's, under the child's name (the initial values come from
    # praxis's per-layer rng, not the plain module's own key).
    self.assertEqual(
      jax.tree.map(np.shape, variables["params"]["cld"]), jax.tree.map(np.shape, plain["params"])
    )
    wrapped_vars = {"params": plain["params"], "batch_stats": plain["batch_stats"]}
    out = layer.apply({k: {"cld": v} for k, v in wrapped_vars.items()}, x)
    np.testing.assert_allclose(out, _DenseBN().apply(wrapped_vars, x), rtol=1e-6)
    doubled = layer.apply(
      {k: {"cld": v} for k, v in wrapped_vars.items()}, "double", x, method=layer.call_method
    )
    np.testing.assert_allclose(doubled, 2 * out, rtol=1e-6)

  def test_metadata(self):
    layer = base_layer.instantiate(
      pax_fiddle.Config(flax_adapter.FlaxModuleAdapter, name="a", module_factory_method=_DenseBN)
    )
    meta = layer.abstract_init_with_metadata(jnp.ones((2, 3)))
    self.assertEqual(list(meta["params"]["cld"]["Dense_0"]["kernel"].collections), [])
    stats = meta["batch_stats"]["cld"]["BatchNorm_0"]["mean"]
    self.assertIn(Collection.NON_TRAINABLE, stats.collections)
    self.assertIn(Collection.REQUIRES_MEAN_SYNC, stats.collections)
    annotated = base_layer.instantiate(
      pax_fiddle.Config(
        flax_adapter.FlaxModuleAdapter,
        name="a",
        module_factory_method=_Annotated,
        logical_axes_rules=[("input", "mdl"), ("output", "data")],
        ici_mesh_shape=[1, 1],
        mesh_axis_names=["data", "mdl"],
      )
    )
    meta = annotated.abstract_init_with_metadata(jnp.ones((2, 3)))
    self.assertEqual(meta["params"]["cld"]["w"].tensor_split_dims_mapping, ["mdl", "data"])
    # An unannotated weight beside annotated ones is unsharded on every dim.
    self.assertEqual(meta["params"]["cld"]["b"].tensor_split_dims_mapping, [None])

  def test_direct_adapter_needs_a_module(self):
    layer = flax_adapter.DirectFlaxModuleAdapter(cld=_Annotated(), name="d")
    x = jnp.ones((2, 3))
    variables = layer.init(jax.random.PRNGKey(0), x)
    np.testing.assert_allclose(layer.apply(variables, x), np.full((2, 4), 3.0))
    bad = flax_adapter.DirectFlaxModuleAdapter(cld=None, name="d")
    with self.assertRaisesRegex(TypeError, "needs a Flax module"):
      bad.init(jax.random.PRNGKey(0), x)


if __name__ == "__main__":
  absltest.main()
