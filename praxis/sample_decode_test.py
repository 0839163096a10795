"""Tests for praxis.sample_decode's helpers against numpy written from their definitions."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from praxis import pytypes
from praxis import sample_decode


class SampleDecodeHelpersTest(absltest.TestCase):
  def test_sort_samples_by_scores(self):
    rng = np.random.default_rng(0)
    logprobs = -rng.uniform(size=(2, 3, 4)).astype(np.float32)
    # Two small log-probs, then padding (>= 1.0, counts as 0): sample 1 of row 0 scores best.
    logprobs[0, 1] = [-0.001, -0.001, 1.0, 1.0]
    ids = rng.integers(0, 9, (2, 3, 4))
    result = pytypes.NestedMap(logprobs=jnp.asarray(logprobs), output_ids=jnp.asarray(ids))
    out = sample_decode.sort_samples_by_scores(result, top_k_recall_target=1.0)
    scores = np.where(logprobs >= 1.0, 0.0, logprobs).sum(-1)  # [B, N]
    order = np.argsort(-scores, axis=-1)
    self.assertEqual(order[0, 0], 1)
    for b in range(2):
      np.testing.assert_array_equal(out.output_ids[b], ids[b, order[b]])
      np.testing.assert_allclose(out.logprobs[b], logprobs[b, order[b]])

  def test_split_batch_dim(self):
    x = jnp.arange(2 * 6 * 3).reshape(2, 6, 3)
    y = sample_decode.split_batch_dim(x, 1, 3)
    self.assertEqual(y.shape, (2, 2, 3, 3))
    np.testing.assert_array_equal(y[1, 1, 2], x[1, 5])
    with self.assertRaises(ValueError):
      sample_decode.split_batch_dim(x, 1, 4)

  def test_right_align(self):
    np.testing.assert_array_equal(
      sample_decode.right_align_segment_position(jnp.array([4, 5, 6]), 6),
      [[0, 0, 0, 1, 2, 3], [0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5]],
    )
    ids = jnp.array([[5, 6, 0, 0], [7, 8, 9, 0]])
    aligned, paddings = sample_decode.right_align_prefix_ids(ids, jnp.array([2, 3]), jnp.float32)
    np.testing.assert_array_equal(aligned[:, 2:], [[5, 6], [8, 9]])
    np.testing.assert_array_equal(aligned[1, 1], 7)
    np.testing.assert_array_equal(paddings, [[1, 1, 0, 0], [1, 0, 0, 0]])
    self.assertEqual(paddings.dtype, jnp.float32)


if __name__ == "__main__":
  absltest.main()
