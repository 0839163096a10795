"""Tests for praxis.metric_utils.top_k_accuracy on a hand-checked case."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from praxis import metric_utils

LOGITS = jnp.asarray([[0.1, 0.5, 0.2, 0.9], [0.8, 0.1, 0.4, 0.3], [0.0, 0.0, 1.0, 0.0]])
LABELS = jnp.asarray([1, 3, 0])  # ranks 2, 3, and tied for 2nd


class TopKAccuracyTest(absltest.TestCase):
  def test_ranks_ties_and_weights(self):
    top1 = metric_utils.top_k_accuracy(1, LOGITS, label_ids=LABELS)
    top2 = metric_utils.top_k_accuracy(2, LOGITS, label_ids=LABELS)
    self.assertAlmostEqual(float(top1), 0.0)
    self.assertAlmostEqual(float(top2), 2.0 / 3.0, places=6)  # a tie with the 2nd counts
    weighted = metric_utils.top_k_accuracy(
      3, LOGITS, label_probs=jnp.eye(4)[LABELS], weights=jnp.asarray([0.0, 1.0, 1.0])
    )
    np.testing.assert_allclose(weighted, 1.0)

  def test_needs_labels(self):
    with self.assertRaisesRegex(ValueError, "label_ids"):
      metric_utils.top_k_accuracy(1, LOGITS)


if __name__ == "__main__":
  absltest.main()
