"""Tests for praxis.pax_fiddle: Pax's config API on praxis layers."""

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle


class Leaf(base_layer.BaseLayer):
  dims: int = 2

  def setup(self):
    self.create_variable("w", base_layer.WeightHParams(shape=[self.dims]))

  def __call__(self, x):
    return x.astype(self.fprop_dtype) * self.theta.w


class Holder(base_layer.BaseLayer):
  """A template field (Config annotation, Pax style) and an instance field."""

  leaf_tpl: pax_fiddle.Config[Leaf] = pax_fiddle.template_field(Leaf)
  inner: base_layer.BaseLayer = pax_fiddle.instance_field(Leaf)

  def setup(self):
    self.create_child("leaf", self.leaf_tpl)

  def __call__(self, x):
    return self.leaf(x) + self.inner(x)


class PaxFiddleTest(absltest.TestCase):
  def test_seed_snippet_runs_as_written(self):
    from praxis import layers  # pylint: disable=import-outside-toplevel

    cfg = pax_fiddle.Config(layers.Linear, name="l", input_dims=2, output_dims=3)
    layer = base_layer.instantiate(cfg)
    x = jnp.ones((4, 2))
    variables = layer.init(jax.random.PRNGKey(0), x)
    self.assertIsInstance(variables["params"]["w"], jax.Array)
    np.testing.assert_allclose(layer.apply(variables, x), x @ variables["params"]["w"], rtol=1e-6)

  def test_templates_stay_configs_and_instances_are_built_with_inherited_fields(self):
    cfg = pax_fiddle.Config(Holder, name="h", dtype=jnp.float32, fprop_dtype=jnp.bfloat16)
    self.assertIsInstance(cfg.leaf_tpl, pax_fiddle.Config)
    self.assertIsInstance(cfg.inner, pax_fiddle.Config)  # configurable before building
    cfg.inner.dims = 2
    holder = pax_fiddle.instantiate(cfg)
    self.assertIsInstance(holder.leaf_tpl, pax_fiddle.Config)
    self.assertIsInstance(holder.inner, Leaf)
    self.assertEqual(holder.inner.fprop_dtype, jnp.bfloat16)  # copied from the parent config
    self.assertEqual(holder.leaf_tpl.fprop_dtype, jnp.bfloat16)
    variables = holder.init(jax.random.PRNGKey(0), jnp.ones((2,)))
    self.assertEqual(sorted(variables["params"]), ["inner", "leaf"])
    self.assertEqual(holder.apply(variables, jnp.ones((2,))).dtype, jnp.bfloat16)

  def test_unknown_field_and_cls_and_clone_set(self):
    cfg = pax_fiddle.Config(Leaf, dims=3)
    with self.assertRaises(AttributeError):
      cfg.dimz = 4
    self.assertIs(cfg.cls, Leaf)
    other = cfg.clone().set(dims=5)
    self.assertEqual((cfg.dims, other.dims), (3, 5))
    self.assertEqual(Leaf.HParams.config(dims=3).dims, 3)  # the seed's style, same Config

  def test_auto_config_builds_a_config_tree(self):

    @pax_fiddle.auto_config
    def make():
      return Holder(
        dtype=jnp.float32, params_init=base_layer.WeightInit.Gaussian(2.0), inner=Leaf(dims=2)
      )

    cfg = make.as_buildable()
    self.assertIsInstance(cfg, pax_fiddle.Config)
    self.assertIsInstance(cfg.inner, pax_fiddle.Config)
    model = cfg.Instantiate()
    configs = model.abstract_init_with_mdl_config(jnp.ones((2,)))
    self.assertEqual(configs["inner"]["_hparams"].params_init.scale, 2.0)

  def test_inline_children_inherit(self):

    class Outer(base_layer.BaseLayer):
      @nn.compact
      def __call__(self, x):
        return Leaf(name="a")(x)

    layer = Outer(fprop_dtype=jnp.float16, params_init=base_layer.WeightInit.Constant(3.0))
    variables = layer.init(jax.random.PRNGKey(0), jnp.ones((2,)))
    np.testing.assert_allclose(variables["params"]["a"]["w"], [3.0, 3.0])
    self.assertEqual(layer.apply(variables, jnp.ones((2,), jnp.float16)).dtype, jnp.float16)

  def test_instantiate_in_setup_or_compact_makes_a_child(self):
    # Built in a parent's setup (named by the config, else by the attribute) or compact method
    # (named by the config, else ClassName_N), as Pax's instantiate.
    class InSetup(nn.Module):
      name_in_config: str | None = None

      def setup(self):
        self.layer = pax_fiddle.Config(Leaf, name=self.name_in_config).Instantiate()

      def __call__(self, x):
        return self.layer(x)

    class InCompact(nn.Module):
      @nn.compact
      def __call__(self, x):
        return pax_fiddle.Config(Leaf).Instantiate()(x)

    x = jnp.ones((2,))
    key = jax.random.PRNGKey(0)
    self.assertEqual(list(InSetup().init(key, x)["params"]), ["layer"])
    self.assertEqual(list(InSetup(name_in_config="x").init(key, x)["params"]), ["x"])
    self.assertEqual(list(InCompact().init(key, x)["params"]), ["Leaf_0"])

  def test_function_args_annotated_config_stay_configs(self):
    def takes_template(tpl: pax_fiddle.Config[Leaf]):
      return tpl

    built = pax_fiddle.build(pax_fiddle.Config(takes_template, tpl=pax_fiddle.Config(Leaf)))
    self.assertIsInstance(built, pax_fiddle.Config)
    self.assertIs(built.cls, Leaf)

  def test_arg_factories_in_a_partial_make_new_values_per_call(self):
    partial = pax_fiddle.build(
      pax_fiddle.Partial(dict, box=pax_fiddle.ArgFactory(dict, inner=pax_fiddle.ArgFactory(list)))
    )
    first, second = partial(), partial()
    self.assertEqual(first, {"box": {"inner": []}})
    self.assertIsNot(first["box"], second["box"])
    self.assertIsNot(first["box"]["inner"], second["box"]["inner"])


if __name__ == "__main__":
  absltest.main()
