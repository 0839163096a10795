"""beam_search against an exhaustive search over every sequence of a tiny vocabulary."""

import itertools

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import beam_search

V, S, EOS = 4, 8, 3  # vocabulary (0, 1, 2 and EOS 3), buffer length


def make_model(seed: int):
  """A second-order Markov LM: logits[t + 1] = table[t, ids[t], ids[t - 1]].

  The state is the token history [B, S]; the search must reorder it with its hypotheses, or
  the logits it sees stop matching the exhaustive search's.
  """
  table = np.asarray(jax.random.normal(jax.random.PRNGKey(seed), (S, V, V, V)) * 2.0, np.float32)

  def extend_fn(history, ids, t):
    history = history.at[:, t].set(ids)
    prev = jnp.where(t > 0, history[:, jnp.maximum(t - 1, 0)], 0)
    return history, jnp.asarray(table)[t, ids, prev]

  def log_probs(history: list[int], t: int) -> np.ndarray:
    prev = history[t - 1] if t > 0 else 0
    logits = table[t, history[t], prev].astype(np.float64)
    return logits - np.log(np.sum(np.exp(logits - logits.max()))) - logits.max()

  return extend_fn, log_probs


def length_norm(n: int, alpha: float) -> float:
  return ((5.0 + n) / 5.0) ** alpha


def exhaustive(log_probs, prompt, max_steps, alpha, min_steps=0):
  """Every prompt + g_1..g_n (g_n = EOS, no EOS before, n > min_steps), best first."""
  results = []
  for n in range(1, max_steps + 1):
    if n <= min_steps or len(prompt) + n > S:
      continue
    for middle in itertools.product(range(EOS), repeat=n - 1):
      seq = list(prompt) + list(middle) + [EOS]
      total = sum(log_probs(seq, t)[seq[t + 1]] for t in range(len(prompt) - 1, len(seq) - 1))
      results.append((total / length_norm(n, alpha), seq))
  return sorted(results, key=lambda r: -r[0])


def run(extend_fn, prompts, beam, max_steps, alpha, **kwargs):
  ids = np.zeros((len(prompts), S), np.int32)
  for b, prompt in enumerate(prompts):
    ids[b, : len(prompt)] = prompt
  lengths = jnp.asarray([len(p) for p in prompts], jnp.int32)
  # The prefill: the history holds the prompts (the search re-feeds from each prompt's end).
  state = jnp.asarray(ids)
  fn = jax.jit(
    lambda state, ids, lengths: beam_search.beam_search_over_fn(
      extend_fn,
      state,
      ids,
      lengths,
      beam_size=beam,
      max_decode_steps=max_steps,
      eos_id=EOS,
      length_norm_alpha=alpha,
      **kwargs,
    )
  )
  return jax.tree_util.tree_map(np.asarray, fn(state, jnp.asarray(ids), lengths))


class BeamSearchTest(absltest.TestCase):
  def test_wide_beam_equals_exhaustive_search(self):
    # 3 new tokens at most: a beam of 9 holds every live hypothesis (3 ** 2), so the K best
    # finished ones must be exactly the exhaustive top K, per row, whatever the prompt length.
    extend_fn, log_probs = make_model(0)
    prompts = [[1], [2, 0, 1]]
    alpha, beam = 0.8, 9
    out = run(extend_fn, prompts, beam, 3, alpha)
    for b, prompt in enumerate(prompts):
      want = exhaustive(log_probs, prompt, 3, alpha)[:beam]
      np.testing.assert_allclose(out.scores[b], [w[0] for w in want], rtol=1e-5)
      for k, (_, seq) in enumerate(want):
        self.assertEqual(out.decode_lengths[b, k], len(seq))
        self.assertEqual(list(out.output_ids[b, k, : len(seq)]), seq)
        self.assertTrue(np.all(out.output_ids[b, k, len(seq) :] == 0))
        # Per-token log-probs sum to the unnormalized score.
        n = len(seq) - len(prompt)
        np.testing.assert_allclose(
          out.logprobs[b, k].sum(), out.scores[b, k] * length_norm(n, alpha), rtol=1e-5
        )
      self.assertTrue(np.all(out.prefix_lengths[b] == len(prompt)))

  def test_length_norm_changes_the_winner(self):
    # alpha = 0 ranks by raw log-prob (short wins more often); a large alpha favours long
    # sequences. Both must agree with the exhaustive ranking under the same alpha.
    extend_fn, log_probs = make_model(3)
    for alpha in (0.0, 2.0):
      out = run(extend_fn, [[0]], 9, 3, alpha)
      want = exhaustive(log_probs, [0], 3, alpha)
      self.assertEqual(list(out.output_ids[0, 0, : len(want[0][1])]), want[0][1])
      np.testing.assert_allclose(out.scores[0, 0], want[0][0], rtol=1e-5)

  def test_min_decode_steps_delays_eos(self):
    extend_fn, log_probs = make_model(1)
    out = run(extend_fn, [[1]], 9, 3, 0.8, min_decode_steps=2)
    want = exhaustive(log_probs, [1], 3, 0.8, min_steps=2)[:9]
    self.assertTrue(np.all(out.decode_lengths[0] == 1 + 3))
    np.testing.assert_allclose(out.scores[0], [w[0] for w in want], rtol=1e-5)

  def test_narrow_beam_is_a_subset_and_unfinished_slots_score_low(self):
    # With K = 2 the search is approximate, but every result is a real finished sequence with
    # its exact score; with a single new token allowed only one sequence can finish.
    extend_fn, log_probs = make_model(2)
    out = run(extend_fn, [[2]], 2, 3, 0.8)
    every = {tuple(seq): score for score, seq in exhaustive(log_probs, [2], 3, 0.8)}
    for k in range(2):
      seq = tuple(out.output_ids[0, k, : out.decode_lengths[0, k]])
      self.assertAlmostEqual(float(out.scores[0, k]), every[seq], places=4)
    self.assertGreaterEqual(out.scores[0, 0], out.scores[0, 1])
    one = run(extend_fn, [[2]], 2, 1, 0.8)
    self.assertEqual(list(one.output_ids[0, 0, :2]), [2, EOS])
    self.assertEqual(one.scores[0, 1], beam_search.NO_SCORE)

  def test_bad_arguments_raise(self):
    extend_fn, _ = make_model(0)
    with self.assertRaisesRegex(ValueError, "beam_size"):
      run(extend_fn, [[1]], 0, 3, 0.8)


if __name__ == "__main__":
  absltest.main()
