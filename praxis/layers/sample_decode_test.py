"""Tests of the decode loop against a plain-Python decoder over a fake causal model.

The fake model gives the logits at position t from the token at t and the sum of all tokens up
to t, so a decoder that feeds a wrong token, a wrong position or stale state picks different
tokens. The reference reruns the whole-sequence model for every new token, as a user would
without a cache.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis.layers import sample_decode

VOCAB = 11
MOD = 7


def _tables(seed=0):
  rng = np.random.default_rng(seed)
  return (
    rng.normal(size=(VOCAB, VOCAB)).astype(np.float32) * 3,
    rng.normal(size=(MOD, VOCAB)).astype(np.float32) * 3,
  )


def full_model(ids, tables):
  """numpy: logits [B, T, V] of a whole sequence; position t sees tokens <= t only."""
  a, b = tables
  return a[ids] + b[np.cumsum(ids, axis=-1) % MOD]


def make_extend_fn(tables):
  """The same model one position at a time; its state is the history of fed tokens [B, S]."""
  a, b = jnp.asarray(tables[0]), jnp.asarray(tables[1])

  def extend_fn(history, ids, time_step):
    history = history.at[:, time_step].set(ids)
    seen = jnp.arange(history.shape[1]) <= time_step  # [S]
    total = jnp.sum(jnp.where(seen, history, 0), axis=-1)  # [B]
    return history, a[ids] + b[total % MOD]

  return extend_fn


def reference_greedy(ids, prefix_lengths, tables, *, seqlen, max_new, eos_id):
  """Python decoding without a cache: rerun the full model, take the argmax, append."""
  outputs, logprobs = [], []
  for row, plen in zip(ids, prefix_lengths):
    seq, lps = list(row[:plen]), [0.0] * plen
    while len(seq) < seqlen and len(seq) - plen < max_new:
      logits = full_model(np.array([seq]), tables)[0, -1]
      token = int(np.argmax(logits))
      log_probs = logits - np.log(np.sum(np.exp(logits - logits.max()))) - logits.max()
      seq.append(token)
      lps.append(float(log_probs[token]))
      if token == eos_id:
        break
    outputs.append(seq)
    logprobs.append(lps)
  return outputs, logprobs


def run_decode(ids, prefix_lengths, tables, hparams, rng=None):
  # The "prefill": the history holds the prompt and junk after it, which the loop must overwrite
  # before it is seen.
  history = jnp.where(np.arange(ids.shape[1]) < np.asarray(prefix_lengths)[:, None], ids, 5)
  fn = jax.jit(
    lambda h, i, p, r: sample_decode.sample_decode(make_extend_fn(tables), h, i, p, hparams, r)
  )
  return jax.tree.map(np.asarray, fn(history, jnp.asarray(ids), jnp.asarray(prefix_lengths), rng))


class SampleDecodeTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.tables = _tables()
    rng = np.random.default_rng(1)
    self.ids = rng.integers(0, VOCAB, size=(4, 12)).astype(np.int32)
    self.prefix_lengths = np.array([1, 3, 5, 2], np.int32)

  def check_against_reference(self, hparams, max_new):
    out = run_decode(self.ids, self.prefix_lengths, self.tables, hparams)
    ref_ids, ref_lps = reference_greedy(
      self.ids,
      self.prefix_lengths,
      self.tables,
      seqlen=hparams.seqlen,
      max_new=max_new,
      eos_id=hparams.eos_id,
    )
    for b in range(len(self.ids)):
      n = len(ref_ids[b])
      self.assertEqual(out.decode_lengths[b], n, f"row {b}")
      np.testing.assert_array_equal(out.output_ids[b, :n], ref_ids[b], err_msg=f"row {b}")
      np.testing.assert_array_equal(out.output_ids[b, n:], hparams.pad_id)
      np.testing.assert_allclose(out.logprobs[b, :n], ref_lps[b], rtol=1e-5, atol=1e-5)
      np.testing.assert_array_equal(out.logprobs[b, n:], 0.0)
    np.testing.assert_allclose(out.scores, out.logprobs.sum(-1), rtol=1e-6)
    np.testing.assert_array_equal(out.prefix_lengths, self.prefix_lengths)
    return out, ref_ids

  def test_greedy_equals_rerunning_the_full_model_without_eos(self):
    hp = sample_decode.DecoderHParams(seqlen=12, eos_id=None)
    out, _ = self.check_against_reference(hp, max_new=100)
    np.testing.assert_array_equal(out.decode_lengths, 12)  # no EOS: every row fills the buffer

  def test_eos_stops_the_row_and_pads_after_it(self):
    # Pick as EOS a token that greedy decoding emits mid-way in some row but not in all.
    hp_no_eos = sample_decode.DecoderHParams(seqlen=12, eos_id=None)
    out = run_decode(self.ids, self.prefix_lengths, self.tables, hp_no_eos)
    generated = [set(out.output_ids[b, self.prefix_lengths[b] : -1]) for b in range(4)]
    eos = next(t for t in range(VOCAB) if any(t in g for g in generated))
    hp = sample_decode.DecoderHParams(seqlen=12, eos_id=eos, pad_id=0)
    out, ref = self.check_against_reference(hp, max_new=100)
    stopped = [b for b in range(4) if ref[b][-1] == eos and len(ref[b]) < 12]
    self.assertNotEmpty(stopped)  # the test exercises an early stop
    for b in stopped:
      self.assertEqual(out.output_ids[b, out.decode_lengths[b] - 1], eos)  # EOS kept, counted

  def test_any_of_several_eos_ids_stops_a_row(self):
    free = run_decode(
      self.ids,
      self.prefix_lengths,
      self.tables,
      sample_decode.DecoderHParams(seqlen=12, eos_id=None),
    )
    # Two tokens that greedy emits: each row must stop right after the first of either.
    row = free.output_ids[1, 3:]
    eos_ids = (int(row[0]), int(row[2]))
    out = run_decode(
      self.ids,
      self.prefix_lengths,
      self.tables,
      sample_decode.DecoderHParams(seqlen=12, eos_id=eos_ids),
    )
    for b in range(4):
      gen = list(free.output_ids[b, self.prefix_lengths[b] :])
      first = next((i for i, t in enumerate(gen) if t in eos_ids), len(gen) - 1)
      self.assertEqual(out.decode_lengths[b], self.prefix_lengths[b] + first + 1, f"row {b}")
    # min_decode_steps: no EOS among the first three new tokens of any row.
    out = run_decode(
      self.ids,
      self.prefix_lengths,
      self.tables,
      sample_decode.DecoderHParams(seqlen=12, eos_id=eos_ids, min_decode_steps=3),
    )
    for b in range(4):
      new = out.output_ids[b, self.prefix_lengths[b] : self.prefix_lengths[b] + 3]
      self.assertFalse(set(new.tolist()) & set(eos_ids), f"row {b}")
      self.assertGreaterEqual(out.decode_lengths[b], self.prefix_lengths[b] + 3)

  def test_max_decode_steps_limits_new_tokens_per_row(self):
    hp = sample_decode.DecoderHParams(seqlen=12, max_decode_steps=3, eos_id=None)
    out, _ = self.check_against_reference(hp, max_new=3)
    np.testing.assert_array_equal(out.decode_lengths, self.prefix_lengths + 3)

  def test_top_k_one_and_tiny_temperature_equal_greedy(self):
    greedy = run_decode(
      self.ids,
      self.prefix_lengths,
      self.tables,
      sample_decode.DecoderHParams(seqlen=12, eos_id=None),
    )
    for hp in (
      sample_decode.DecoderHParams(seqlen=12, eos_id=None, temperature=1.0, top_k=1),
      sample_decode.DecoderHParams(seqlen=12, eos_id=None, temperature=1e-4),
    ):
      out = run_decode(self.ids, self.prefix_lengths, self.tables, hp, jax.random.key(3))
      np.testing.assert_array_equal(out.output_ids, greedy.output_ids, err_msg=str(hp))
      np.testing.assert_allclose(out.logprobs, greedy.logprobs, rtol=1e-5, atol=1e-6)

  def test_top_k_samples_only_among_the_k_largest_and_scores_are_model_logprobs(self):
    hp = sample_decode.DecoderHParams(seqlen=12, eos_id=None, temperature=3.0, top_k=3)
    out = run_decode(self.ids, self.prefix_lengths, self.tables, hp, jax.random.key(7))
    logits = full_model(out.output_ids, self.tables)  # [B, S, V] of the decoded sequences
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    outside_greedy = 0
    for b in range(4):
      np.testing.assert_array_equal(
        out.output_ids[b, : self.prefix_lengths[b]], self.ids[b, : self.prefix_lengths[b]]
      )
      for pos in range(self.prefix_lengths[b], 12):
        token = out.output_ids[b, pos]
        top3 = np.argsort(logits[b, pos - 1])[-3:]
        self.assertIn(token, top3, f"row {b} position {pos}")
        outside_greedy += token != top3[-1]
        self.assertAlmostEqual(out.logprobs[b, pos], float(log_probs[b, pos - 1, token]), 5)
    self.assertGreater(outside_greedy, 0)  # at temperature 3 it did sample, not argmax

  def test_temperature_sampling_follows_softmax_of_scaled_logits(self):
    logits = jnp.array([[2.0, 1.0, 0.0, -1.0]])
    n = 20000
    draws = sample_decode.pick_next_token(
      jnp.tile(logits, (n, 1)), jax.random.key(0), temperature=2.0, top_k=0
    )
    freq = np.bincount(np.asarray(draws), minlength=4) / n
    expected = np.exp(np.array([2.0, 1.0, 0.0, -1.0]) / 2.0)
    expected /= expected.sum()
    np.testing.assert_allclose(freq, expected, atol=0.015)  # ~4 standard errors
    draws = sample_decode.pick_next_token(
      jnp.tile(logits, (n, 1)), jax.random.key(1), temperature=2.0, top_k=2
    )
    freq = np.bincount(np.asarray(draws), minlength=4) / n
    expected = np.array([np.exp(1.0), np.exp(0.5), 0, 0]) / (np.exp(1.0) + np.exp(0.5))
    np.testing.assert_allclose(freq, expected, atol=0.015)

  def test_full_prompt_row_is_left_alone_and_bad_hparams_are_reported(self):
    prefix = np.array([12, 2, 12, 4], np.int32)
    out = run_decode(
      self.ids, prefix, self.tables, sample_decode.DecoderHParams(seqlen=12, eos_id=None)
    )
    np.testing.assert_array_equal(out.output_ids[0], self.ids[0])
    np.testing.assert_array_equal(out.decode_lengths[[0, 2]], 12)
    np.testing.assert_array_equal(out.logprobs[0], 0.0)
    with self.assertRaisesRegex(ValueError, "seqlen must be positive"):
      sample_decode.DecoderHParams()
    with self.assertRaisesRegex(ValueError, "buffer has length 12 but DecoderHParams.seqlen is 8"):
      run_decode(self.ids, self.prefix_lengths, self.tables, sample_decode.DecoderHParams(seqlen=8))
    cfg = sample_decode.DecoderHParams.HParams.config(seqlen=4)
    with self.assertRaises(AttributeError):
      cfg.max_decode_stepz = 3


if __name__ == "__main__":
  absltest.main()
