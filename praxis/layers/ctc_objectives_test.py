"""Tests for the CTC alignment helpers against a brute-force enumeration of alignments."""

import itertools

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from praxis.layers import ctc_objectives


def _collapse(path, blank=0):
  out, prev = [], None
  for s in path:
    if s != blank and s != prev:
      out.append(s)
    prev = s
  return out


class CtcObjectivesTest(absltest.TestCase):
  def test_loss_and_best_path_match_brute_force(self):
    rng = np.random.default_rng(0)
    t, k = 5, 3
    logits = rng.normal(size=(1, t, k)).astype(np.float32)
    logprobs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    labels = np.array([[1, 2, 0]])
    labelpaddings = np.array([[0.0, 0.0, 1.0]])
    loss, aux = ctc_objectives.ctc_loss_with_alignments(
      jnp.asarray(logprobs), jnp.zeros((1, t)), jnp.asarray(labels), jnp.asarray(labelpaddings)
    )
    total = 0.0
    for path in itertools.product(range(k), repeat=t):
      if _collapse(path) == [1, 2]:
        total += np.exp(sum(logprobs[0, i, s] for i, s in enumerate(path)))
    np.testing.assert_allclose(loss[0], -np.log(total), rtol=1e-4)
    self.assertEqual(aux.state_logprobs.shape, (t, 1, 4))  # N + 1 label states

  def test_alignment_follows_a_dominant_path(self):
    # Frames say 1 1 blank 2 2 with high confidence: label states 1 1 1 2 2.
    path = [1, 1, 0, 2, 2]
    logprobs = np.full((1, 5, 3), np.log(0.01), np.float32)
    logprobs[0, np.arange(5), path] = np.log(0.98)
    _, aux = ctc_objectives.ctc_loss_with_alignments(
      jnp.asarray(logprobs), jnp.zeros((1, 5)), jnp.array([[1, 2]]), jnp.zeros((1, 2))
    )
    np.testing.assert_array_equal(aux.alignment[0], [1, 1, 1, 2, 2])
    starts = ctc_objectives.forced_alignment(
      jnp.asarray(logprobs), jnp.zeros((1, 5)), jnp.array([[1, 2]]), jnp.zeros((1, 2))
    )
    np.testing.assert_array_equal(starts, [[0, 3]])

  def test_validity_and_label_alignment(self):
    labels = jnp.array([[1, 1, 0], [1, 2, 0]])
    labelpaddings = jnp.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    logitpaddings = jnp.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    # "1 1" needs a blank between the repeats: 3 frames, only 2 here.
    np.testing.assert_array_equal(
      ctc_objectives.is_valid_ctc_seq(logitpaddings, labels, labelpaddings), [0.0, 1.0]
    )
    frames = jnp.array([[0, 0, 1, 1, 2, 0], [1, 2, 2, 3, 3, 3]])
    pads = jnp.array([[0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0]])
    alignment, lengths = ctc_objectives.frame_alignment_to_label_alignment(frames, pads)
    np.testing.assert_array_equal(lengths, [2, 3])
    np.testing.assert_array_equal(alignment[:, :3], [[2, 4, 0], [0, 1, 3]])


if __name__ == "__main__":
  absltest.main()
