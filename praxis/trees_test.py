"""Tests for praxis.trees against hand-written expectations."""

import collections
import re

from absl.testing import absltest
import jax
import numpy as np

from praxis import trees
from praxis.pytypes import NestedMap

Pair = collections.namedtuple("Pair", ["left", "right"])


class PathTreeTest(absltest.TestCase):
  def test_paths_join_keys_with_slash_and_glue_indices(self):
    tree = {"w": [1, Pair(left=2, right=(3, 4))], "n": NestedMap(b=5)}
    self.assertEqual(
      trees.to_path_tree(tree),
      {
        "w": ["w[0]", Pair(left="w[1]/left", right=("w[1]/right[0]", "w[1]/right[1]"))],
        "n": NestedMap(b="n/b"),
      },
    )

  def test_is_leaf_blanks_the_leaves_it_selects(self):
    self.assertEqual(
      trees.to_path_tree({"a": 1, "b": "skip"}, is_leaf=lambda v: v == "skip"),
      {"a": "a", "b": None},
    )

  def test_fullmatch_needs_the_whole_path_to_match(self):
    tree = NestedMap(lm=NestedMap(w=0, wb=1), head=NestedMap(w=2))
    self.assertEqual(
      trees.fullmatch_path(tree, "lm/w"),
      NestedMap(lm=NestedMap(w=True, wb=False), head=NestedMap(w=False)),
    )
    self.assertEqual(
      trees.fullmatch_path(tree, [".*/w", re.compile("lm/.*")]),
      NestedMap(lm=NestedMap(w=True, wb=True), head=NestedMap(w=True)),
    )


class SubsetTest(absltest.TestCase):
  def test_subset_rules(self):
    self.assertTrue(trees.is_subset([1, 2], [1, 2, 3]))  # a prefix
    self.assertFalse(trees.is_subset([1, 3], [1, 2, 3]))  # not a prefix
    self.assertTrue(trees.is_subset({"a": [1]}, NestedMap(a=[1, 2], b=0)))  # dict in NestedMap
    self.assertFalse(trees.is_subset({"a": 1, "c": 2}, {"a": 1}))
    self.assertFalse(trees.is_subset((1,), [1]))  # container types must agree
    self.assertFalse(trees.is_subset((), jax.sharding.PartitionSpec()))

  def test_extract_takes_superset_leaves_in_subset_shape(self):
    spec = {"ids": jax.ShapeDtypeStruct((2, 3), np.int32)}
    full = NestedMap(ids=np.zeros((2, 3), np.int32), extra=np.ones(1))
    got = trees.extract_elements_matching_subset_structure(spec, full)
    self.assertEqual(type(got), dict)
    self.assertEqual(list(got), ["ids"])
    self.assertIs(got["ids"], full.ids)
    with self.assertRaisesRegex(ValueError, "not in the superset"):
      trees.extract_elements_matching_subset_structure({"x": 1}, full)
    with self.assertRaisesRegex(ValueError, "has only 1"):
      trees.extract_elements_matching_subset_structure([1, 2], [1])

  def test_shape_dtype_and_copy(self):
    tree = NestedMap(a=np.zeros((2, 5), np.float32))
    self.assertEqual(trees.get_shape_dtype(tree).a, jax.ShapeDtypeStruct((2, 5), np.float32))
    copied = trees.copy(tree)
    self.assertIsNot(copied, tree)
    self.assertIs(copied.a, tree.a)


if __name__ == "__main__":
  absltest.main()
