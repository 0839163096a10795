"""Tests for var_util: paths, bobbin's JSON format, sizes, shapes."""

import os

from absl.testing import absltest
import flax.linen as nn
import flax.struct
import jax.numpy as jnp
import numpy as np

from paxml.toolkit import var_util


class _Results(flax.struct.PyTreeNode):
  total: np.ndarray
  count: float


class _Sower(nn.Module):
  @nn.compact
  def __call__(self, x):
    self.sow("tensorboard", "mean", x.mean())
    return x


class _Net(nn.Module):
  @nn.compact
  def __call__(self, x):
    return _Sower()(_Sower()(x))


class PathTest(absltest.TestCase):
  def test_paths(self):
    tree = {"params": {"Dense_0": {"kernel": jnp.zeros((2, 3)), "bias": jnp.zeros(3)}}}
    self.assertEqual(
      var_util.nested_vars_to_paths(tree)["params"]["Dense_0"]["kernel"], "/params/Dense_0/kernel"
    )
    mask = {p: p.endswith("kernel") for p, _ in var_util.flatten_with_paths(tree)}
    self.assertEqual(mask, {"/params/Dense_0/bias": False, "/params/Dense_0/kernel": True})

  def test_two_sown_values_get_distinct_paths(self):
    _, variables = _Net().apply({}, jnp.ones(3), mutable=["tensorboard"])
    paths = [p for p, _ in var_util.flatten_with_paths(variables)]
    self.assertEqual(paths, ["/tensorboard/_Sower_0/mean/0", "/tensorboard/_Sower_1/mean/0"])


class JsonTest(absltest.TestCase):
  def test_reads_bobbins_format_and_round_trips(self):
    # As bobbin writes it: arrays tagged, 0-d values as plain numbers.
    text = '{"total": {"__array__": true, "dtype": "int32", "data": [1, 2]}, "count": 3.0}'
    template = _Results(total=np.zeros(2, np.int32), count=0.0)
    parsed = var_util.parse_pytree_json(text, template)
    np.testing.assert_array_equal(parsed.total, [1, 2])
    self.assertEqual(parsed.total.dtype, np.int32)
    self.assertEqual(parsed.count, 3.0)
    path = os.path.join(self.create_tempdir().full_path, "r.json")
    var_util.write_pytree_json_file(path, parsed)
    back = var_util.read_pytree_json_file(path, template)
    np.testing.assert_array_equal(back.total, [1, 2])
    self.assertEqual(var_util.dump_pytree_json(back), var_util.dump_pytree_json(parsed))


class SizeTest(absltest.TestCase):
  def test_total_dimensionality_and_summary(self):
    tree = {"a": jnp.zeros((2, 3)), "b": {"c": np.zeros(3, np.int32)}, "n": None}
    self.assertEqual(var_util.total_dimensionality(tree), 9)
    self.assertEqual(
      var_util.summarize_shape(tree),
      "a: (2, 3) dtype=float32\nb:\n  c: (3,) dtype=int32\nn: None\n",
    )

  def test_split_and_flatten(self):
    x = {"a": jnp.arange(6)}
    split = var_util.split_leading_axis(3, x)
    self.assertEqual(split["a"].shape, (3, 2))
    np.testing.assert_array_equal(var_util.flatten_leading_axes(split)["a"], x["a"])
    with self.assertRaisesRegex(ValueError, "6 rows into 4 groups"):
      var_util.split_leading_axis(4, x)


if __name__ == "__main__":
  absltest.main()
