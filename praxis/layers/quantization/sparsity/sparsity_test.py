"""Pruning masks against plain numpy references (loops over groups, sorts, percentiles)."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from praxis.layers.quantization.sparsity import sparsity
from praxis.layers.quantization.sparsity import sparsity_hparams as sh


def _np_nm_rows(x, n, m, stride=1):
  """Reference N:M along the last axis: group members are `stride` apart; ties keep lower index."""
  x = np.abs(np.asarray(x, np.float64))
  keep = np.zeros(x.shape, bool)
  length = x.shape[-1]
  for idx in np.ndindex(*x.shape[:-1]):
    row = x[idx]
    for base in range(0, length, m * stride):
      for t in range(stride):
        members = [base + j * stride + t for j in range(m)]
        # Stable sort on -|x| keeps the lower index first among equal values.
        order = sorted(members, key=lambda i: (-row[i], i))
        for i in order[:n]:
          keep[idx + (i,)] = True
  return keep


class NMMaskTest(parameterized.TestCase):
  @parameterized.product(n_m=[(1, 4), (2, 4), (3, 8)], order=["R", "C"])
  def test_matches_numpy_reference(self, n_m, order):
    n, m = n_m
    x = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)
    mask = np.asarray(sparsity.get_sparsity_mask(x, n, m, order=order))
    ref = _np_nm_rows(x, n, m) if order == "R" else _np_nm_rows(x.T, n, m).T
    np.testing.assert_array_equal(mask, ref)
    # Exactly n kept per group of m.
    self.assertEqual(mask.sum(), x.size * n // m)

  def test_offset_groups_are_strided(self):
    x = np.random.default_rng(1).normal(size=(4, 32)).astype(np.float32)
    mask = np.asarray(sparsity.get_sparsity_mask(x, 2, 4, order="R", offset=8))
    np.testing.assert_array_equal(mask, _np_nm_rows(x, 2, 4, stride=8))
    fast = np.asarray(sparsity.get_sparsity_mask_optimized_for_offset(x, 2, 4, order="R", offset=8))
    np.testing.assert_array_equal(fast, mask)

  def test_ties_keep_lower_index(self):
    mask = np.asarray(sparsity.get_sparsity_mask(np.ones((1, 4)), 2, 4, order="R"))
    np.testing.assert_array_equal(mask, [[True, True, False, False]])

  def test_block_scores_keep_whole_blocks(self):
    x = np.array([[1.0, 1.0, 5.0, 0.0, 2.0, 2.0, 0.1, 0.1]])  # block sums 2, 5, 4, 0.2
    mask = np.asarray(sparsity.get_sparsity_mask(x, 2, 4, order="R", block_size=2))
    np.testing.assert_array_equal(mask, [[False, False, True, True, True, True, False, False]])

  def test_errors_say_what_to_fix(self):
    with self.assertRaisesRegex(AssertionError, "N must be lower than M"):
      sparsity.get_sparsity_mask(np.ones(8), 4, 2)
    with self.assertRaisesRegex(ValueError, "divisible by m"):
      sparsity.get_sparsity_mask(np.ones(6), 1, 4)


class UnstructuredAndChannelTest(absltest.TestCase):
  def test_unstructured_is_a_percentile_threshold(self):
    x = np.random.default_rng(2).normal(size=(10, 10)).astype(np.float32)
    mask = np.asarray(sparsity.get_sparsity_mask_unstructured(x, None, 70.0))
    np.testing.assert_array_equal(mask, np.abs(x) > np.percentile(np.abs(x), 70.0))
    self.assertEqual(mask.sum(), 30)

  def test_unstructured_prunes_a_superset_of_the_old_mask(self):
    x = np.arange(1.0, 11.0)
    old = np.ones(10, bool)
    old[9] = False  # the largest value is already pruned
    mask = np.asarray(sparsity.get_sparsity_mask_unstructured(x, old, 50.0))
    self.assertFalse(mask[9])

  def test_channelwise_keeps_top_channel_sums(self):
    x = np.array([[1.0, 5.0, 2.0, 4.0], [1.0, 5.0, 2.0, 4.0]])
    mask = np.asarray(sparsity.get_sparsity_mask_channelwise(x, 0.5, -1))
    np.testing.assert_array_equal(mask, np.tile([False, True, False, True], (2, 1)))
    dropped = np.asarray(sparsity.apply_sparsity(x, mask, channelwise_dim=-1))
    np.testing.assert_array_equal(dropped, x[:, [1, 3]])

  def test_activation_weighted_score(self):
    rng = np.random.default_rng(3)
    w, x = rng.normal(size=(4, 3)), rng.normal(size=(2, 5, 4))
    score = np.asarray(sparsity.compute_score(w, sh.SparsityScore.ACTIVATION_WEIGHTED, inputs=x))
    ref = np.abs(x).sum(axis=(0, 1))[:, None] * np.abs(w)
    np.testing.assert_allclose(score, ref, rtol=1e-5)

  def test_pruned_value_fills_pruned_entries(self):
    out = np.asarray(
      sparsity.apply_sparsity(np.ones(4), np.array([1, 0, 1, 0], bool), pruned_value=-2.0)
    )
    np.testing.assert_array_equal(out, [1, -2, 1, -2])


class HParamsTest(absltest.TestCase):
  def test_structured_needs_a_tuple(self):
    with self.assertRaisesRegex(AssertionError, "Prune rate must be either None"):
      sh.SparsityHParams(weight_params=sh.WeightSparsityParams(prune_rate=0.5))

  def test_sr_ste_needs_structured(self):
    with self.assertRaisesRegex(ValueError, "SR-STE only works with structured"):
      sh.SparsityHParams(
        sparsity_type=sh.SparsityType.UNSTRUCTURED,
        weight_params=sh.WeightSparsityParams(prune_rate=0.5, sparse_ste=True),
      )


if __name__ == "__main__":
  absltest.main()
