"""Tests for praxis.base_hyperparams: configs, templates, sharing, text."""

import dataclasses
from typing import Any

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_hyperparams as bh


class Scale(bh.HParamsMixin, nn.Module):
  dims: int = 0
  factor: float = 1.0

  @nn.compact
  def __call__(self, x):
    w = self.param("w", nn.initializers.ones, (self.dims,))
    return x * w * self.factor


class Block(bh.HParamsMixin, nn.Module):
  dims: int = 0
  inner_tpl: bh.Config = bh.template_field(Scale, factor=2.0)

  def setup(self):
    # The parent fills in what it knows before building its child.
    self.inner = bh.instantiate(self.inner_tpl.clone().set(dims=self.dims))

  def __call__(self, x):
    return self.inner(x)


class Pair(bh.HParamsMixin, nn.Module):
  left: nn.Module | None = None
  right: nn.Module | None = None

  def __call__(self, x):
    return self.left(x) + self.right(x)


@dataclasses.dataclass
class Plain(bh.HParamsMixin):
  size: int = 1
  names: tuple[str, ...] = ()


@dataclasses.dataclass
class Typed(bh.HParamsMixin):
  dtype: Any = jnp.float32
  fprop: Any = None
  other: Any = np.dtype("int32")
  fn: Any = None


class BaseHyperparamsTest(absltest.TestCase):
  def test_unknown_field_raises_at_once_with_valid_names(self):
    cfg = Scale.HParams.config(dims=1)
    with self.assertRaisesRegex(AttributeError, r"input_dimz.*valid parameter names: dims, factor"):
      cfg.input_dimz = 31337

  def test_hparams_call_equals_config_and_partial_builds_partial(self):
    self.assertEqual(Scale.HParams(dims=3), Scale.HParams.config(dims=3))
    part = Plain.HParams.partial(size=4)
    self.assertIsInstance(part, bh.Partial)
    built = bh.instantiate(part)
    self.assertEqual(built(names=("a",)), Plain(size=4, names=("a",)))

  def test_template_stays_config_until_parent_builds_it(self):
    cfg = Block.HParams.config(dims=3)
    self.assertIsInstance(cfg.inner_tpl, bh.Config)
    cfg.inner_tpl.factor = 5.0
    block = cfg.Instantiate()
    self.assertIsInstance(block.inner_tpl, bh.Config)
    variables = block.init(jax.random.key(0), jnp.ones((3,)))
    self.assertEqual(variables["params"]["inner"]["w"].shape, (3,))
    out = block.apply(variables, jnp.ones((3,)))
    self.assertEqual(out.tolist(), [5.0, 5.0, 5.0])

  def test_templates_are_fresh_per_config(self):
    a, b = Block.HParams.config(), Block.HParams.config()
    a.inner_tpl.factor = 7.0
    self.assertEqual(b.inner_tpl.factor, 2.0)

  def test_one_config_used_twice_shares_weights(self):
    shared = Scale.HParams(dims=2)
    pair = bh.instantiate(Pair.HParams(left=shared, right=shared))
    self.assertIs(pair.left, pair.right)
    variables = pair.init(jax.random.key(0), jnp.ones((2,)))
    self.assertEqual(jax.tree.leaves(variables), [variables["params"]["left"]["w"]])
    unshared = bh.instantiate(Pair.HParams(left=Scale.HParams(dims=2), right=Scale.HParams(dims=2)))
    self.assertLen(jax.tree.leaves(unshared.init(jax.random.key(0), jnp.ones((2,)))), 2)

  def test_instantiate_overrides_do_not_touch_the_config(self):
    cfg = Plain.HParams(size=2)
    self.assertEqual(cfg.Instantiate(size=9).size, 9)
    self.assertEqual(cfg.size, 2)

  def test_text_lists_every_value_including_defaults(self):
    mod = Block.__module__
    text = bh.nested_struct_to_text(Block.HParams.config(dims=3))
    self.assertEqual(
      text.splitlines(),
      [
        f"cls : type/{mod}/Block",
        "dims : 3",
        f"inner_tpl.cls : type/{mod}/Scale",
        "inner_tpl.dims : 0",
        "inner_tpl.factor : 2.0",
        "inner_tpl.name : NoneType",
        "name : NoneType",
      ],
    )

  def test_text_writes_types_functions_and_nested_containers(self):
    cfg = Typed.HParams(fprop=jnp.bfloat16, other={"b": 2, "a": [1, "x"]}, fn=jnp.sum)
    self.assertEqual(
      bh.nested_struct_to_text(cfg).splitlines(),
      [
        f"cls : type/{Typed.__module__}/Typed",
        "dtype : type/jax.numpy/float32",
        "fn : callable/jax.numpy/sum",
        "fprop : type/jax.numpy/bfloat16",
        "other.a : [1, 'x']",
        "other.b : 2",
      ],
    )

  def test_text_quotes_strings_with_the_cheaper_quote_and_prefixes_paths(self):
    cfg = Plain.HParams(names=("it's", 'say "hi"'), size=2)
    text, types = bh.nested_struct_to_text(cfg, include_types=True, prefix="task")
    self.assertIn("task.size : 2", text.splitlines())
    self.assertIn("""task.names : ("it's", 'say "hi"')""", text.splitlines())
    self.assertEqual(types["task.size"], "int")
    self.assertEqual(bh.nested_struct_to_text("a'b"), ' : "a\'b"\n')

  def test_text_rejects_a_config_that_contains_itself(self):
    cfg = Pair.HParams()
    cfg.left = cfg
    with self.assertRaisesRegex(ValueError, "circular reference"):
      bh.nested_struct_to_text(cfg)


if __name__ == "__main__":
  absltest.main()
