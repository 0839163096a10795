"""stats.compute_stats against numpy's masked mean / std / max."""

from absl.testing import absltest
import numpy as np

from praxis.layers import stats


class ComputeStatsTest(absltest.TestCase):
  def test_matches_numpy_over_the_valid_entries(self):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 7)).astype(np.float32)
    padding = (rng.uniform(size=(3, 7)) < 0.3).astype(np.float32)
    out = stats.compute_stats(x, padding)
    valid = x[padding == 0]
    np.testing.assert_allclose(out.mean_v, valid.mean(), rtol=1e-5)
    np.testing.assert_allclose(out.std_v, valid.std(), rtol=1e-5)
    np.testing.assert_allclose(out.max_v, np.abs(valid).max(), rtol=1e-6)

  def test_no_padding_and_all_padded(self):
    x = np.array([[1.0, -3.0], [2.0, 4.0]], np.float32)
    out = stats.compute_stats(x)
    np.testing.assert_allclose([out.mean_v, out.max_v], [1.0, 4.0])
    empty = stats.compute_stats(x, np.ones_like(x))
    np.testing.assert_allclose([empty.mean_v, empty.std_v, empty.max_v], [0.0, 0.0, 0.0])
    with self.assertRaisesRegex(ValueError, "same rank"):
      stats.compute_stats(x, np.zeros((2,), np.float32))


if __name__ == "__main__":
  absltest.main()
