"""Pax's quantization test helpers: case grids for parameterized tests, nested-list comparison.

Each generate_*_test_config returns a list of kwargs dicts (one per case) over
the flags that layer's tests vary. `additional_feature_funcs` extend the grid:
each is f(keys, cases) -> (keys, cases).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

from praxis import test_utils

_FeatureFn = Callable[[list[str], list[list[Any]]], tuple[list[str], list[list[Any]]]]


def to_list(w):
  """A nested array as nested Python lists; integral floats become ints, None stays None."""
  if w is None:
    return None
  try:
    value = float(w)
  except (TypeError, ValueError):
    return [to_list(v) for v in w]
  return int(value) if value.is_integer() else value


def _grid(keys, cases, extra: list[_FeatureFn] | None):
  keys, cases = list(keys), [list(c) for c in cases]
  for extend in extra or ():
    keys, cases = extend(keys, cases)
  return [dict(zip(keys, case)) for case in cases]


def _with_symmetry(flag_rows):
  """Each row once with symmetric, once with asymmetric weights (row-major)."""
  return [row + [sym] for row in flag_rows for sym in (True, False)]


def generate_attention_projection_test_config(
  additional_feature_funcs: list[Any] | None = None,
) -> Sequence[dict[str, Any]]:
  """Cases for AttentionProjection: 11 flag rows x weight symmetry."""
  # (is_output_projection, use_bias, attention_combine_dims, use_nhd_shape)
  rows = [
    [True, True, False, True],
    [True, False, True, True],
    [True, True, False, False],
    [True, False, True, False],
    [False, True, False, True],
    [False, False, True, True],
    [False, False, False, True],
    [False, False, True, False],
    [False, True, False, False],
    [True, False, False, False],
    [False, False, False, False],
  ]
  keys = [
    "is_output_projection",
    "use_bias",
    "attention_combine_dims",
    "use_nhd_shape",
    "is_weight_symmetric",
  ]
  return _grid(keys, _with_symmetry(rows), additional_feature_funcs)


def generate_combined_qkv_projection_test_config(
  additional_feature_funcs: list[Any] | None = None,
) -> Sequence[dict[str, Any]]:
  """Cases for CombinedQKVProjectionLayer: (use_bias, attention_combine_dims) x symmetry."""
  rows = [[a, b] for a in (True, False) for b in (True, False)]
  keys = ["use_bias", "attention_combine_dims", "is_weight_symmetric"]
  return _grid(keys, _with_symmetry(rows), additional_feature_funcs)


def generate_linears_test_config(
  additional_feature_funcs: list[Any] | None = None,
) -> Sequence[dict[str, Any]]:
  """Cases for Linear: weight symmetry only."""
  return _grid(["is_weight_symmetric"], [[True], [False]], additional_feature_funcs)


def generate_dotproduct_attention_test_config(
  additional_feature_funcs: list[Any] | None = None,
) -> Sequence[dict[str, Any]]:
  """Cases for DotProductAttention: all 2^7 combinations of its seven flags."""
  keys = [
    "dconv_qkv",
    "combine_qkv",
    "output_proj_use_nhd_shape",
    "use_rotary_position_emb",
    "cast_rotary_position_emb",
    "zero_fully_masked",
    "simulate_packed",
  ]
  cases = [list(c) for c in itertools.product((True, False), repeat=len(keys))]
  return _grid(keys, cases, additional_feature_funcs)


def generate_one_headed_attention_projection_test_config(
  additional_feature_funcs: list[Any] | None = None,
) -> Sequence[dict[str, Any]]:
  """Cases for OneHeadedAttentionProjection: use_bias x weight symmetry."""
  cases = [[b, s] for b in (True, False) for s in (True, False)]
  return _grid(["use_bias", "is_weight_symmetric"], cases, additional_feature_funcs)


class QuantizationTestCase(test_utils.TestCase):
  """TestCase with assertNestedListClose."""

  def assertNestedListClose(self, list1, list2, places=4):  # pylint: disable=invalid-name
    """Asserts two nested lists have the same structure and values equal to `places` decimals."""
    if list1 is None and list2 is None:
      return
    if (list1 is None) != (list2 is None):
      self.fail(f"Comparing None with not-None value: {list1} vs {list2}.")
    is_list1, is_list2 = isinstance(list1, list), isinstance(list2, list)
    if is_list1 != is_list2:
      self.fail(f"Comparing non-list with list: {list1} and {list2}.")
    if not is_list1:
      self.assertAlmostEqual(list1, list2, places)
      return
    self.assertEqual(len(list1), len(list2))
    for v1, v2 in zip(list1, list2):
      self.assertNestedListClose(v1, v2, places)
