"""Tests for praxis.sample_decode: the loop over a table-driven model, and the helpers, against
numpy written from their definitions."""

from typing import Any

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import decoder_utils
from praxis import pytypes
from praxis import sample_decode
from praxis import token_samplers

DECODE_CACHE = base_layer.DECODE_CACHE
EOS = 2
# Logits at each position (read at a row's segment_pos); the argmax per position is
# 3, 4, EOS, 5, 3, 4, 5, 3.
_ARGMAX = [3, 4, EOS, 5, 3, 4, 5, 3]
TABLE = np.random.default_rng(0).uniform(size=(8, 6)).astype(np.float32)
TABLE[np.arange(8), _ARGMAX] += 2.0
LOG_PROBS = np.asarray(jax.nn.log_softmax(TABLE))


class TableLm(base_layer.BaseLayer):
  """A model whose next-token logits depend only on the position: TABLE[segment_pos]."""

  table: Any = None

  def __call__(self, ids, paddings, **kwargs):
    self.put_variable(DECODE_CACHE, "steps", jnp.zeros((ids.shape[0],), jnp.int32))

  def extend_step(self, ids, segment_pos):
    steps = self.get_variable(DECODE_CACHE, "steps")
    self.put_variable(DECODE_CACHE, "steps", steps + 1)
    return pytypes.NestedMap(logits=jnp.asarray(self.table)[segment_pos])

  def transform_decode_state(self, transform_fn):
    steps = self.get_variable(DECODE_CACHE, "steps")
    self.put_variable(DECODE_CACHE, "steps", transform_fn(steps, 0, -1))


def _run(decode_fn, seed=0):
  """decode_fn(model, fprop_fn, extend_step_fn, transform_state_fn) under apply."""

  def method(mdl):
    return decode_fn(
      mdl,
      lambda m, ids, paddings: m(ids, paddings),
      lambda m, ids, segment_pos: m.extend_step(ids, segment_pos).logits,
      lambda m, fn: m.transform_decode_state(fn),
    )

  out, _ = TableLm(table=TABLE).apply(
    {}, method=method, mutable=[DECODE_CACHE], rngs={"random": jax.random.PRNGKey(seed)}
  )
  return out


class SampleDecodeLoopTest(absltest.TestCase):
  def test_greedy_feeds_the_prompt_then_stops_at_eos(self):
    ids = jnp.array([[1, 7, 8], [1, 0, 0]])
    out = _run(
      lambda m, fprop, extend, transform: sample_decode.greedy_decode(
        m, extend, ids, jnp.zeros((2, 3)), 6, fprop_fn=fprop, transform_state_fn=transform,
        prefix_lengths=jnp.array([3, 1]), eos_id=EOS, max_prefix_len=3,
      )
    )  # fmt: skip
    # Row 0 copies 7, 8 (positions 1, 2), then position 2's argmax is EOS; row 1 generates
    # from position 0: 3, 4, EOS.
    np.testing.assert_array_equal(out.output_ids[:, 0], [[1, 7, 8, 2, 0, 0], [1, 3, 4, 2, 0, 0]])
    np.testing.assert_array_equal(out.decode_lengths[:, 0], [4, 4])
    np.testing.assert_allclose(
      out.logprobs[1, 0], [1.0, LOG_PROBS[0, 3], LOG_PROBS[1, 4], LOG_PROBS[2, 2], 1.0, 1.0]
    )
    np.testing.assert_array_equal(out.prefix_ids[:, 0], [[1, 7, 8], [1, 0, 0]])

  def test_fprop_for_prefix_left_aligns_and_counts_new_tokens(self):
    right_aligned = jnp.array([[0, 7, 8], [0, 0, 9]])
    paddings = jnp.array([[1.0, 0, 0], [1, 1, 0]])

    def decode(m, fprop, extend, transform, **kwargs):
      return sample_decode.greedy_decode(
        m, extend, right_aligned, paddings, 6, fprop_for_prefix=True, fprop_fn=fprop,
        transform_state_fn=transform, max_prefix_len=3, max_decode_steps=3,
        prefix_lengths=jnp.array([2, 1]), eos_id=EOS, **kwargs,
      )  # fmt: skip

    out = _run(decode)
    # Row 0 (segment_pos 1 first): 4, EOS; row 1 (segment_pos 0): 3, 4, EOS.
    np.testing.assert_array_equal(out.output_ids[:, 0], [[7, 8, 4, 2, 0, 0], [9, 3, 4, 2, 0, 0]])
    np.testing.assert_array_equal(out.decode_lengths[:, 0], [4, 4])
    np.testing.assert_array_equal(out.prefix_ids[:, 0], [[7, 8, 0], [9, 0, 0]])
    # min_decode_steps (ours): no EOS among the first 3 new tokens, so all 3 are generated.
    late = _run(lambda *a: decode(*a, min_decode_steps=3))
    np.testing.assert_array_equal(late.decode_lengths[:, 0], [5, 4])
    self.assertNotIn(EOS, np.asarray(late.output_ids[0, 0, 2:5]).tolist())
    self.assertEqual(int(late.output_ids[0, 0, 3]), np.argsort(TABLE[2])[-2])

  def test_samples_stop_sequences_and_per_example_limits(self):
    ids = jnp.array([[1], [1]])
    sampler = token_samplers.DefaultNextTokenSampler(top_k=1)  # every sample is the argmax

    def decode(m, fprop, extend, transform):
      return sample_decode.sample_decode(
        m, extend, transform, None, sampler, ids, jnp.zeros((2, 1)), 7, num_samples=2,
        fprop_fn=fprop, prefix_lengths=jnp.array([1, 1]),
        # Row 0 stops after "3 4" (the left 0 matches anything); row 1 after 1 new token.
        eos_id=jnp.array([[0, 3, 4], [0, 9, 9]]),
        per_example_max_decode_steps=jnp.array([6, 1]), return_entropy_score=True,
      )  # fmt: skip

    out = _run(decode)
    self.assertEqual(out.output_ids.shape, (2, 2, 7))
    np.testing.assert_array_equal(out.output_ids[0, 1], [1, 3, 4, 0, 0, 0, 0])
    np.testing.assert_array_equal(out.output_ids[1, 0], [1, 3, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(out.decode_lengths, [[3, 3], [2, 2]])
    entropy = -(np.exp(LOG_PROBS[0]) * LOG_PROBS[0]).sum()
    self.assertAlmostEqual(float(out.entropy[0, 0, 1]), entropy, places=5)

  def test_fixed_length_scan_matches_the_while_loop_and_stacks_summaries(self):
    ids = jnp.array([[1], [1]])
    sampler = token_samplers.DefaultNextTokenSampler(top_k=1)

    def method(mdl, early_exit):
      mdl.add_summary("before_loop", jnp.ones(()))  # recorded outside: must survive the scan
      return sample_decode.sample_decode(
        mdl, lambda m, i, pos: m.extend_step(i, pos).logits, None, None, sampler, ids,
        jnp.zeros((2, 1)), 5, num_samples=1, fprop_fn=lambda m, i, p: m(i, p),
        prefix_lengths=jnp.array([1, 1]), eos_id=EOS, early_exit=early_exit,
      )  # fmt: skip

    outs = {}
    for early_exit in (True, False):
      outs[early_exit] = TableLm(table=TABLE).apply(
        {}, early_exit, method=method, mutable=[DECODE_CACHE, base_layer.SUMMARIES],
        rngs={"random": jax.random.PRNGKey(0)},
      )  # fmt: skip
    (loop, _), (scan, scan_vars) = outs[True], outs[False]
    for name in ("output_ids", "logprobs", "decode_lengths"):
      np.testing.assert_array_equal(loop[name], scan[name])
    # Steps 0..4 from position 0: argmaxes 3, 4, EOS, then padding; the scan runs all 5 steps
    # and its summary holds each step's sampled ids [steps, B].
    summaries = scan_vars[base_layer.SUMMARIES]
    self.assertEqual(summaries["new_ids_scalar"].shape, (5, 2))
    np.testing.assert_array_equal(summaries["new_ids_scalar"][:3, 0], [3, 4, EOS])
    self.assertIn("before_loop_scalar", summaries)

  def test_classifier_free_guidance_mixes_each_row_pair(self):
    # Rows come in (conditioned, unconditioned) pairs; the sampler (greedy here) sees
    # uncond + scale * (cond - uncond) and both rows of a pair continue with its token.
    shift = np.random.default_rng(1).normal(size=(2, 6)).astype(np.float32) * 3  # per row

    class ShiftedLm(TableLm):
      def extend_step(self, ids, segment_pos):
        return pytypes.NestedMap(logits=jnp.asarray(self.table)[segment_pos] + shift)

    sampler = token_samplers.DefaultNextTokenSampler(top_k=1)
    scale = 1.75

    def method(mdl):
      return sample_decode.sample_decode(
        mdl, lambda m, i, pos: m.extend_step(i, pos).logits, None, None, sampler,
        jnp.array([[1], [1]]), jnp.zeros((2, 1)), 4, num_samples=1,
        fprop_fn=lambda m, i, p: m(i, p), prefix_lengths=jnp.array([1, 1]),
        cf_guidance_scale=jnp.array([scale]),
      )  # fmt: skip

    out, _ = ShiftedLm(table=TABLE).apply(
      {}, method=method, mutable=[DECODE_CACHE], rngs={"random": jax.random.PRNGKey(0)}
    )
    cond, uncond = TABLE[:3] + shift[0], TABLE[:3] + shift[1]  # positions 0..2
    mixed = uncond + scale * (cond - uncond)
    self.assertEqual(out.output_ids.shape, (1, 1, 4))  # only the conditioned row comes back
    np.testing.assert_array_equal(out.output_ids[0, 0], [1] + list(mixed.argmax(-1)))
    logprobs = np.asarray(jax.nn.log_softmax(mixed))
    np.testing.assert_allclose(
      out.logprobs[0, 0, 1:], logprobs[np.arange(3), mixed.argmax(-1)], rtol=1e-5
    )

  def test_result_callback_streams_every_interval(self):
    chunks, calls = [], []

    def callback_fn(out):
      jax.debug.callback(lambda ids, done: chunks.append((ids, done)), out.output_ids, out.done)

    callback = decoder_utils.StreamingResultCallback(
      callback_fn, interval_steps=2, init_fn=calls.append, done_fn=lambda: calls.append("done")
    )

    def decode(m, fprop, extend, transform):
      return sample_decode.sample_decode(
        m, extend, transform, None, token_samplers.DefaultNextTokenSampler(top_k=1),
        jnp.array([[1], [1]]), jnp.zeros((2, 1)), 7, num_samples=1, fprop_fn=fprop,
        prefix_lengths=jnp.array([1, 1]), eos_id=EOS, result_callback=callback,
      )  # fmt: skip

    out = _run(decode)
    np.testing.assert_array_equal(out.output_ids[0, 0], [1, 3, 4, EOS, 0, 0, 0])
    # Steps 0-1 give "3 4"; at step 2 every row is done, which sends "EOS" (and padding).
    self.assertLen(chunks, 2)
    np.testing.assert_array_equal(chunks[0][0], [[[3, 4]], [[3, 4]]])
    np.testing.assert_array_equal(chunks[1][0], [[[EOS, 0]], [[EOS, 0]]])
    np.testing.assert_array_equal(chunks[1][1], [[True], [True]])
    self.assertEqual(calls, [(2, 1), "done"])

  def test_sampled_rows_are_sorted_by_score(self):
    ids = jnp.array([[1], [1]])
    sampler = token_samplers.DefaultNextTokenSampler(top_k=0)

    def decode(m, fprop, extend, transform):
      return sample_decode.sample_decode(
        m, extend, transform, None, sampler, ids, jnp.zeros((2, 1)), 5, num_samples=4,
        fprop_fn=fprop, prefix_lengths=jnp.array([1, 1]), temperature=3.0, eos_id=EOS,
        top_k_recall_target=1.0,
      )  # fmt: skip

    out = _run(decode)
    logprobs = np.asarray(out.logprobs)
    scores = np.where(logprobs >= 1.0, 0.0, logprobs).sum(-1)  # [B, N]
    self.assertTrue(np.all(np.diff(scores, axis=1) <= 0))
    self.assertGreater(len({tuple(r) for r in np.asarray(out.output_ids).reshape(8, 5)}), 1)
    # Each logprob is the table's log-prob of the token at that position.
    for b, n in [(0, 0), (1, 3)]:
      for t in range(1, int(out.decode_lengths[b, n])):
        token = int(out.output_ids[b, n, t])
        self.assertAlmostEqual(float(logprobs[b, n, t]), LOG_PROBS[t - 1, token], places=5)


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
