"""Tests for praxis.base_layer: weights with logical axes, children, initialisers."""

import dataclasses
from typing import Any

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_hyperparams
from praxis import base_layer


class Proj(base_layer.BaseLayer):
  input_dims: int = 0
  output_dims: int = 0

  def setup(self):
    self.w = self.create_variable("w", (self.input_dims, self.output_dims), ("embed", "mlp"))

  def __call__(self, x):
    self.add_summary("x_mean", jnp.mean(x))
    return self.maybe_shard(
      jnp.einsum("bd,df->bf", x.astype(self.compute_dtype), self.w.astype(self.compute_dtype)),
      ("batch", "mlp"),
    )


class Outer(base_layer.BaseLayer):
  dims: int = 0
  proj_tpl: base_hyperparams.Config = base_hyperparams.template_field(Proj)

  def setup(self):
    self.proj = self.create_child(self.proj_tpl, input_dims=self.dims, output_dims=2 * self.dims)

  def __call__(self, x):
    return self.proj(x)


class Top(base_layer.BaseLayer):
  """Two levels of children: Top -> Outer -> Proj; also holds a config that is no layer."""

  dims: int = 0
  outer_tpl: base_hyperparams.Config = base_hyperparams.template_field(Outer)
  settings: Any = None

  def setup(self):
    self.outer = self.create_child(self.outer_tpl, dims=self.dims)

  def __call__(self, x):
    return self.outer(x)


@dataclasses.dataclass
class Settings(base_hyperparams.HParamsMixin):
  """Not a layer: it has an fprop_dtype field, but no layer passes it down to it."""

  fprop_dtype: Any = None


def _built_fprop_dtypes(layer, x) -> dict[str, Any]:
  """Each layer's fprop_dtype as built during init, by module path (from Flax, not the text)."""
  seen = {}

  def record(next_fun, args, kwargs, context):
    module = context.module
    seen[".".join(module.scope.path) or "(root)"] = module.fprop_dtype
    return next_fun(*args, **kwargs)

  with nn.intercept_methods(record):
    layer.init(jax.random.key(0), x)
  return seen


class BaseLayerTest(absltest.TestCase):
  def test_init_returns_arrays_and_the_boxes_keep_the_logical_axes(self):
    layer = Outer.HParams(dims=3, dtype=jnp.float32, fprop_dtype=jnp.bfloat16).Instantiate()
    variables = layer.init(jax.random.key(0), jnp.ones((2, 3)))
    self.assertIsInstance(variables["params"]["proj"]["w"], jax.Array)  # Pax: plain arrays
    self.assertEqual(variables["params"]["proj"]["w"].shape, (3, 6))
    boxed = base_layer.init_boxed(layer, jax.random.key(0), jnp.ones((2, 3)))
    self.assertEqual(boxed["params"]["proj"]["w"].names, ("embed", "mlp"))
    meta = layer.abstract_init_with_metadata(jnp.ones((2, 3)))
    self.assertEqual(tuple(meta["params"]["proj"]["w"].shape), (3, 6))
    self.assertEqual(meta["params"]["proj"]["w"].logical_axes, ("embed", "mlp"))
    out, mutated = layer.apply(variables, jnp.ones((2, 3)), mutable=[base_layer.SUMMARIES])
    self.assertEqual(out.dtype, jnp.bfloat16)  # the child inherited fprop_dtype
    # Pax's summary keys carry the summary type.
    self.assertEqual(float(mutated[base_layer.SUMMARIES]["proj"]["x_mean_scalar"]), 1.0)
    # Summaries fed back in the variables are overwritten under the same key, not renumbered.
    _, again = layer.apply(
      {**variables, **mutated}, 3 * jnp.ones((2, 3)), mutable=[base_layer.SUMMARIES]
    )
    self.assertEqual(list(again[base_layer.SUMMARIES]["proj"]), ["x_mean_scalar"])
    self.assertEqual(float(again[base_layer.SUMMARIES]["proj"]["x_mean_scalar"]), 3.0)
    # The template on the config is untouched by create_child's overrides.
    self.assertEqual(layer.proj_tpl.input_dims, 0)

  def test_text_shows_configured_values_and_children_build_with_inherited_ones(self):
    cfg = Top.HParams(dims=3, fprop_dtype=jnp.bfloat16, settings=Settings.HParams())
    # As in Pax, a child that sets its own value keeps it; the others take the parent's.
    cfg.outer_tpl.proj_tpl.fprop_dtype = jnp.float16
    text = base_hyperparams.nested_struct_to_text(cfg).splitlines()
    # As Pax's model_params.txt: the values as configured (a child's unset fprop_dtype is None).
    self.assertContainsSubset(
      [
        "fprop_dtype : type/jax.numpy/bfloat16",
        "outer_tpl.fprop_dtype : NoneType",
        "outer_tpl.proj_tpl.fprop_dtype : type/jax.numpy/float16",
        "outer_tpl.proj_tpl.dtype : type/jax.numpy/float32",
        "settings.fprop_dtype : NoneType",
      ],
      text,
    )
    built = _built_fprop_dtypes(base_hyperparams.instantiate(cfg), jnp.ones((2, 3)))
    self.assertEqual(
      built, {"(root)": jnp.bfloat16, "outer": jnp.bfloat16, "outer.proj": jnp.float16}
    )

  def test_text_of_a_built_layer_shows_its_templates_as_built(self):
    layer = Top.HParams(dims=3, fprop_dtype=jnp.bfloat16).Instantiate()  # As TaskConfig.model.
    text = base_hyperparams.nested_struct_to_text(layer, prefix="model").splitlines()
    # Building passes the parent's fprop_dtype into its templates (Pax's build does too).
    self.assertContainsSubset(
      [
        "model.fprop_dtype : type/jax.numpy/bfloat16",
        "model.outer_tpl.fprop_dtype : type/jax.numpy/bfloat16",
      ],
      text,
    )
    # As in Pax, a layer built with fprop_dtype None computes in its dtype and says so.
    self.assertEqual(
      _built_fprop_dtypes(Top.HParams(dims=3).Instantiate(), jnp.ones((2, 3)))["outer.proj"],
      jnp.float32,
    )

  def test_wrong_number_of_axes_is_reported(self):

    class Bad(base_layer.BaseLayer):
      @nn.compact
      def __call__(self, x):
        return x * self.create_variable("w", (2, 2), ("embed",))

    with self.assertRaisesRegex(ValueError, r"1 logical axes \('embed',\) for a weight of rank 2"):
      Bad().init(jax.random.key(0), jnp.ones((2, 2)))

  def test_initializer_scales_follow_fan_in_and_out(self):
    key = jax.random.key(1)
    xavier = base_layer.init_var(
      base_layer.WeightHParams([600, 200], init=base_layer.WeightInit.Xavier()), key
    )
    limit = np.sqrt(6.0 / 800)
    self.assertLessEqual(float(jnp.max(jnp.abs(xavier))), limit)
    self.assertGreater(float(jnp.max(jnp.abs(xavier))), 0.95 * limit)
    fanin = base_layer.init_var(
      base_layer.WeightHParams([400, 300], init=base_layer.WeightInit.GaussianSqrtFanIn(2.0)), key
    )
    self.assertAlmostEqual(float(jnp.std(fanin)), 2.0 / 20.0, delta=0.003)
    # Pax's default fans of a rank-3 weight: fan_in = dim -2 x dim 0, fan_out = dim -1 x dim 0.
    self.assertEqual(base_layer.get_fan_in_fan_out([4, 5, 6]), (20, 24))
    with self.assertRaisesRegex(ValueError, "unknown WeightInit method 'glorot'"):
      base_layer.init_var(
        base_layer.WeightHParams([2], init=base_layer.WeightInit("glorot", 1)), key
      )

  def test_pax_style_layer_variables_children_and_defaults(self):

    class Child(base_layer.BaseLayer):
      dims: int = 2

      def setup(self):
        self.create_variable("w", base_layer.WeightHParams(shape=[self.dims, self.dims]))
        self.create_variable(
          "count",
          base_layer.WeightHParams(shape=[], init=base_layer.WeightInit.Constant(0)),
          trainable=False,
        )

      def __call__(self, x):
        self.update_var("count", self.get_var("count") + 1)
        return x.astype(self.fprop_dtype) @ self.theta.w

    class Parent(base_layer.BaseLayer):
      child_tpl: base_hyperparams.Config = base_hyperparams.template_field(Child)

      def setup(self):
        self.create_child("child", self.child_tpl)
        self.create_children("more", [self.child_tpl.clone(), self.child_tpl.clone()])

      def __call__(self, x):
        return self.more[1](self.more[0](self.child(x)))

    layer = base_layer.instantiate(
      base_hyperparams.Config(
        Parent, name="p", fprop_dtype=jnp.bfloat16, params_init=base_layer.WeightInit.Gaussian(0.5)
      )
    )
    variables = layer.init(jax.random.key(0), jnp.ones((1, 2)))
    self.assertEqual(sorted(variables["params"]), ["child", "more_0", "more_1"])
    self.assertEqual(variables["non_trainable"]["child"]["count"].shape, ())
    out, updated = layer.apply(variables, jnp.ones((1, 2)), mutable=[base_layer.NON_TRAINABLE])
    self.assertEqual(out.dtype, jnp.bfloat16)  # theta casts to the inherited fprop_dtype
    self.assertEqual(int(updated["non_trainable"]["more_1"]["count"]), 1)
    configs = layer.abstract_init_with_mdl_config(jnp.ones((1, 2)))
    # The children inherited the parent's non-default params_init.
    self.assertEqual(configs["child"]["_hparams"].params_init.scale, 0.5)
    # Pax's default initialiser, recognisable by its scale.
    self.assertTrue(base_layer.is_default_param_init(Child().params_init))


class CompactChildrenTest(absltest.TestCase):
  def test_children_created_in_compact_are_bound_and_listed(self):
    class AddOne(base_layer.BaseLayer):
      @nn.compact
      def __call__(self, x):
        b = self.create_variable("b", base_layer.WeightHParams(shape=[x.shape[-1]]))
        return x + b

    class Parent(base_layer.BaseLayer):
      kids_tpls: list[Any] = base_hyperparams.template_field(list)

      @nn.compact
      def __call__(self, x):
        x = self.create_child("single", base_hyperparams.Config(AddOne))(x)
        for kid in self.create_children("kids", list(self.kids_tpls)):
          x = kid(x)
        return x

    self.assertEqual(Parent().kids_tpls, [])
    layer = base_hyperparams.Config(
      Parent, kids_tpls=[base_hyperparams.Config(AddOne)] * 2
    ).Instantiate()
    x = jnp.ones((1, 3))
    variables = layer.init(jax.random.PRNGKey(0), x)
    self.assertEqual(sorted(variables["params"]), ["kids_0", "kids_1", "single"])
    want = x + sum(variables["params"][k]["b"] for k in ("kids_0", "kids_1", "single"))
    np.testing.assert_allclose(layer.apply(variables, x), want)
    # The reflected config leaves lists of templates to the children's own entries.
    configs = layer.abstract_init_with_mdl_config(x)
    self.assertIsNone(configs["_hparams"].kids_tpls)
    self.assertIs(base_layer.BaseLayerApi, base_layer.BaseLayer)


class PmapAxisTest(absltest.TestCase):
  def test_is_running_under_pmap_sees_only_the_batch_axis(self):
    self.assertFalse(base_layer.is_running_under_pmap())
    x = jnp.ones((1,))
    under = jax.pmap(lambda v: v * base_layer.is_running_under_pmap(), axis_name="batch")(x)
    other = jax.pmap(lambda v: v * base_layer.is_running_under_pmap(), axis_name="other")(x)
    self.assertEqual(float(under[0]), 1.0)
    self.assertEqual(float(other[0]), 0.0)


if __name__ == "__main__":
  absltest.main()
