"""optimization.get_best_bound against a brute-force numpy search."""

from absl.testing import absltest
import numpy as np

from praxis.layers.quantization import optimization


def _numpy_best(t, bound, qmin, qmax):
  best, best_err = None, np.inf
  for f in np.linspace(1.0, 0.5, 11):
    scale = bound * f / qmax
    err = np.mean(np.abs(np.clip(np.round(t / scale), qmin, qmax) * scale - t))
    if err < best_err - 1e-12:
      best, best_err = bound * f, err
  return best


class GetBestBoundTest(absltest.TestCase):
  def test_per_tensor_and_per_channel_match_brute_force(self):
    t = np.random.default_rng(0).standard_t(3, size=(64, 3)).astype(np.float32)
    hard = np.abs(t).max()
    got = optimization.get_best_bound(t, np.float32(hard), -8, 7)
    np.testing.assert_allclose(got, _numpy_best(t, hard, -8, 7), rtol=1e-5)
    bounds = np.abs(t).max(axis=0, keepdims=True)  # [1, C]
    got = optimization.get_best_bound(t, bounds, -8, 7, per_channel=True)
    want = [_numpy_best(t[:, c], bounds[0, c], -8, 7) for c in range(3)]
    np.testing.assert_allclose(np.asarray(got)[0], want, rtol=1e-5)
    self.assertTrue(np.all(np.asarray(got) <= bounds + 1e-6))


if __name__ == "__main__":
  absltest.main()
