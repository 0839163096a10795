"""Variable paths, JSON round trips, shapes and sizes."""

import os

from absl.testing import absltest
import flax.struct
import jax.numpy as jnp
import numpy as np

from paxml.toolkit import var_utils


class Results(flax.struct.PyTreeNode):
  correct: np.ndarray
  total: np.ndarray
  name: str = flax.struct.field(pytree_node=False, default="dev")


class VarUtilsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.tree = {"params": {"Dense_0": {"kernel": jnp.ones((2, 3)), "bias": jnp.zeros(3)}},
                 "batch_stats": {"mean": np.arange(3.0)}, "none": None}

  def test_paths(self):
    self.assertEqual(var_utils.nested_vars_to_paths(self.tree)["params"]["Dense_0"]["kernel"],
                     "/params/Dense_0/kernel")
    paths = [p for p, _ in var_utils.flatten_with_paths(self.tree)]
    self.assertEqual(paths, ["/batch_stats/mean", "/params/Dense_0/bias",
                             "/params/Dense_0/kernel"])
    # A path mask: weight decay on kernels only.
    mask = [p.endswith("kernel") for p, _ in var_utils.flatten_with_paths(self.tree)]
    self.assertEqual(mask, [False, False, True])

  def test_json_round_trip_keeps_dtypes_and_static_fields(self):
    results = Results(correct=np.int64(7), total=np.array([3.5, 1.0], np.float32), name="x")
    template = Results(correct=np.int64(0), total=np.zeros(2, np.float32), name="x")
    back = var_utils.parse_pytree_json(var_utils.dump_pytree_json(results), template)
    self.assertEqual(back.correct, 7)
    self.assertIsInstance(back.correct, np.int64)
    self.assertEqual(back.total.dtype, np.float32)
    np.testing.assert_array_equal(back.total, [3.5, 1.0])
    self.assertEqual(back.name, "x")
    path = os.path.join(self.create_tempdir().full_path, "sub", "results.json")
    var_utils.write_pytree_json_file(path, results)
    np.testing.assert_array_equal(var_utils.read_pytree_json_file(path, template).total,
                                  [3.5, 1.0])
    with self.assertRaisesRegex(ValueError, "different tree structure"):
      var_utils.parse_pytree_json(var_utils.dump_pytree_json({"a": 1}), template)

  def test_sizes_and_shapes(self):
    self.assertEqual(var_utils.total_dimensionality(self.tree), 6 + 3 + 3)
    self.assertEqual(var_utils.total_dimensionality({"a": None}), 0)
    summary = var_utils.summarize_shape(self.tree)
    self.assertIn("/params/Dense_0/kernel: (2, 3) dtype=float32", summary)

  def test_split_and_flatten_leading_axis(self):
    x = {"a": np.arange(12).reshape(6, 2)}
    split = var_utils.split_leading_axis(3, x)
    self.assertEqual(split["a"].shape, (3, 2, 2))
    np.testing.assert_array_equal(var_utils.flatten_leading_axes(split)["a"], x["a"])
    with self.assertRaisesRegex(ValueError, "multiple"):
      var_utils.split_leading_axis(4, x)


if __name__ == "__main__":
  absltest.main()
