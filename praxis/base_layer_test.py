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
    return self.maybe_shard(jnp.einsum("bd,df->bf", x.astype(self.compute_dtype),
                                       self.w.astype(self.compute_dtype)),
                            ("batch", "mlp"))


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

  def test_weights_carry_logical_axes_and_children_inherit_dtypes(self):
    layer = Outer.HParams(dims=3, dtype=jnp.float32, fprop_dtype=jnp.bfloat16).Instantiate()
    variables = layer.init(jax.random.key(0), jnp.ones((2, 3)))
    boxed = variables["params"]["proj"]["w"]
    self.assertEqual(boxed.names, ("embed", "mlp"))
    self.assertEqual(boxed.value.shape, (3, 6))
    out, mutated = layer.apply(variables, jnp.ones((2, 3)), mutable=[base_layer.SUMMARIES])
    self.assertEqual(out.dtype, jnp.bfloat16)  # the child inherited fprop_dtype
    self.assertEqual(float(mutated[base_layer.SUMMARIES]["proj"]["x_mean"][0]), 1.0)
    # The template on the config is untouched by create_child's overrides.
    self.assertEqual(layer.proj_tpl.input_dims, 0)

  def test_text_shows_the_dtypes_children_are_built_with(self):
    cfg = Top.HParams(dims=3, fprop_dtype=jnp.bfloat16, settings=Settings.HParams())
    # A template's own value is replaced by create_child: the text must show the parent's.
    cfg.outer_tpl.proj_tpl.fprop_dtype = jnp.float16
    text = base_hyperparams.nested_struct_to_text(cfg).splitlines()
    self.assertContainsSubset(["fprop_dtype : bfloat16",
                               "outer_tpl.fprop_dtype : bfloat16",
                               "outer_tpl.proj_tpl.fprop_dtype : bfloat16",
                               "outer_tpl.proj_tpl.dtype : float32",
                               # Not a layer: nothing passes fprop_dtype down to it.
                               "settings.fprop_dtype : None"], text)
    self.assertNotIn("outer_tpl.proj_tpl.fprop_dtype : float16", text)
    built = _built_fprop_dtypes(base_hyperparams.instantiate(cfg), jnp.ones((2, 3)))
    self.assertEqual(built, {"(root)": jnp.bfloat16, "outer": jnp.bfloat16,
                             "outer.proj": jnp.bfloat16})

  def test_text_of_a_built_layer_passes_its_dtypes_down(self):
    layer = Top.HParams(dims=3, fprop_dtype=jnp.bfloat16).Instantiate()  # As TaskConfig.model.
    text = base_hyperparams.nested_struct_to_text(layer, prefix="model").splitlines()
    self.assertContainsSubset(["model.fprop_dtype : bfloat16",
                               "model.outer_tpl.proj_tpl.fprop_dtype : bfloat16"], text)
    # Without a parent setting, the children show the default (None: compute in `dtype`).
    plain = base_hyperparams.nested_struct_to_text(Top.HParams(dims=3)).splitlines()
    self.assertIn("outer_tpl.proj_tpl.fprop_dtype : None", plain)
    self.assertEqual(
        _built_fprop_dtypes(Top.HParams(dims=3).Instantiate(), jnp.ones((2, 3)))["outer.proj"],
        None)

  def test_wrong_number_of_axes_is_reported(self):

    class Bad(base_layer.BaseLayer):

      @nn.compact
      def __call__(self, x):
        return x * self.create_variable("w", (2, 2), ("embed",))

    with self.assertRaisesRegex(ValueError, r"1 logical axes \('embed',\) for a weight of rank 2"):
      Bad().init(jax.random.key(0), jnp.ones((2, 2)))

  def test_initializer_scales_follow_fan_in_and_out(self):
    key = jax.random.key(1)
    xavier = base_layer.WeightInit.Xavier().initializer(600, 200)(key, (600, 200), jnp.float32)
    limit = np.sqrt(6.0 / 800)
    self.assertLessEqual(float(jnp.max(jnp.abs(xavier))), limit)
    self.assertGreater(float(jnp.max(jnp.abs(xavier))), 0.95 * limit)
    fanin = base_layer.WeightInit.GaussianSqrtFanIn(2.0).initializer(400, 300)(
        key, (400, 300), jnp.float32)
    self.assertAlmostEqual(float(jnp.std(fanin)), 2.0 / 20.0, delta=0.003)
    with self.assertRaisesRegex(ValueError, "not one of"):
      base_layer.WeightInit("glorot")


if __name__ == "__main__":
  absltest.main()
