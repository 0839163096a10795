"""Tests for praxis.token_samplers against numpy written from the definitions."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import decoder_utils
from praxis import token_samplers

# probs 0.5, 0.3, 0.15, 0.05 in a shuffled order.
PROBS = np.array([[0.15, 0.5, 0.05, 0.3]], np.float32)
LOGITS = jnp.log(jnp.asarray(PROBS))


class _Model:
  """What a sampler needs of a model: the next "random" key."""

  def __init__(self, seed: int):
    self.key = jax.random.PRNGKey(seed)

  def next_prng_key(self):
    self.key, key = jax.random.split(self.key)
    return key


class TokenSamplersTest(absltest.TestCase):
  def test_top_p_keeps_the_smallest_set_holding_p(self):
    masked = np.asarray(token_samplers.top_p_mask_logits(LOGITS, 0.7))
    kept = masked > -1e9
    # 0.5 + 0.3 >= 0.7: ids 1 and 3 stay.
    np.testing.assert_array_equal(kept, [[False, True, False, True]])
    np.testing.assert_allclose(masked[kept], np.log([0.5, 0.3]), rtol=1e-6)
    # p per row [B, 1]; the same cut on logits sorted in descending order.
    two = jnp.concatenate([LOGITS, LOGITS])
    per_row = token_samplers.top_p_mask_logits(two, jnp.array([[0.7], [0.9]]))
    np.testing.assert_array_equal(np.asarray(per_row) > -1e9, [[0, 1, 0, 1], [1, 1, 0, 1]])
    ordered = jnp.sort(LOGITS, axis=-1)[:, ::-1]
    kept_sorted = token_samplers.top_p_mask_logits(ordered, 0.7, True) > -1e9
    np.testing.assert_array_equal(kept_sorted, [[True, True, False, False]])
    self.assertIs(token_samplers.top_p_mask_logits(LOGITS, 1.0), LOGITS)

  def test_top_k_with_per_example_k(self):
    two = jnp.concatenate([LOGITS, LOGITS])
    values, ids = token_samplers.get_top_k(two, 3, jnp.array([3, 1]))
    np.testing.assert_array_equal(ids, [[1, 3, 0], [1, 3, 0]])
    np.testing.assert_array_equal(np.asarray(values[1, 1:]) < -1e30, [True, True])
    all_values, all_ids = token_samplers.get_top_k(two, 0, None)
    np.testing.assert_array_equal(all_ids, [[0, 1, 2, 3]] * 2)
    self.assertIs(all_values, two)

  def test_greedy_and_top_k_sampling(self):
    logits = jnp.tile(LOGITS, (64, 1))
    greedy = token_samplers.DefaultNextTokenSampler(top_k=1)
    out = greedy(_Model(0), logits, 1.0, None)
    np.testing.assert_array_equal(out.new_ids, np.full(64, 1))
    self.assertIs(out.logits, logits)
    # top_k=2, top_p=0.7: only ids 1 and 3 can be drawn, in about a 5:3 ratio.
    sampler = token_samplers.DefaultNextTokenSampler(top_k=2, top_p=0.7)
    ids = np.concatenate([sampler(_Model(s), logits, 1.0, None).new_ids for s in range(20)])
    self.assertEqual(set(ids.tolist()), {1, 3})
    self.assertAlmostEqual(np.mean(ids == 1), 0.5 / 0.8, delta=0.06)
    # Temperature 0: the argmax of the top-k.
    cold = sampler(_Model(1), logits, 0.0, None)
    np.testing.assert_array_equal(cold.new_ids, np.full(64, 1))

  def test_per_row_gumbel_keys_decide_the_draws(self):
    logits = jnp.zeros((3, 50))
    sampler = token_samplers.DefaultNextTokenSampler(top_k=0)
    keys = jax.random.key_data(jax.random.split(jax.random.PRNGKey(7), 3))
    a = sampler(_Model(1), logits, 1.0, None, gumbel_prng_key=keys).new_ids
    b = sampler(_Model(2), logits, 1.0, None, gumbel_prng_key=keys).new_ids
    np.testing.assert_array_equal(a, b)
    dummy = jnp.full((3, 2), decoder_utils.DUMMY_PRNG_KEY, jnp.uint32)
    c = sampler(_Model(1), logits, 1.0, None, gumbel_prng_key=dummy).new_ids
    d = sampler(_Model(2), logits, 1.0, None, gumbel_prng_key=dummy).new_ids
    self.assertFalse(np.array_equal(c, d))  # dummies: the model's keys, which differ

  def test_sample_from_top_k_reports_the_top_k_logprob(self):
    ids, logprobs = token_samplers.sample_from_top_k_and_top_p(
      LOGITS, jax.random.PRNGKey(0), 0.0, top_k=2
    )
    self.assertEqual(int(ids[0]), 1)
    self.assertAlmostEqual(float(logprobs[0]), np.log(0.5 / 0.8), places=5)


if __name__ == "__main__":
  absltest.main()
