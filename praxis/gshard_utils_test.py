"""Tests for praxis.gshard_utils: top-2 routing with capacity and the load-balancing loss on a
case worked by hand, and expert choice."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from praxis import gshard_utils

# One group of 4 tokens, 2 experts; gates are the softmax of these logits, i.e. the rows below.
GATES = np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]], np.float32)
LOGITS = jnp.asarray(np.log(GATES))[None]  # [G=1, S=4, E=2]


class Top2GatingTest(absltest.TestCase):
  def test_capacity_two_by_hand(self):
    """Capacity 2: expert 0 takes tokens 0, 1 as first choices and drops token 2; expert 1 takes
    token 3 first, then token 0 as a second choice, and is full for tokens 1 and 2; token 3's
    second choice (expert 0, slot 2) is dropped."""
    aux, combine, dispatch, summary = gshard_utils.top2_gating_on_logits(
      paddings=None, logits=LOGITS, experts_dim=2, expert_capacity_dim=2, fprop_dtype=jnp.float32
    )
    expected = np.zeros((1, 4, 2, 2), np.float32)  # [G, S, E, C]
    expected[0, 0, 0, 0] = 0.9
    expected[0, 0, 1, 1] = 0.1
    expected[0, 1, 0, 1] = 0.8
    expected[0, 3, 1, 0] = 0.7
    np.testing.assert_allclose(combine, expected, atol=1e-6)
    np.testing.assert_array_equal(dispatch, (expected > 0).astype(np.float32))
    # aux = E^2 * mean_e(mean gate of e * fraction of first choices on e)
    #     = 4 * ((0.65 * 3/4) + (0.35 * 1/4)) / 2 = 1.15.
    np.testing.assert_allclose(aux, 1.15, rtol=1e-6)
    over_1, over_2, d0, d1, d2 = (float(x) for x in summary)
    self.assertEqual((over_1, over_2), (0.25, 0.75))
    self.assertEqual((d0, d1, d2), (1, 2, 1))  # token 2 got no expert, token 0 got two

  def test_every_expert_within_capacity(self):
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(3, 16, 4)), jnp.float32)
    _, _, dispatch, _ = gshard_utils.top2_gating_on_logits(None, logits, 4, 3, jnp.float32)
    per_slot = np.asarray(dispatch).sum(axis=1)  # [G, E, C]: tokens in each slot
    self.assertLessEqual(per_slot.max(), 1.0)
    self.assertLessEqual(np.asarray(dispatch).sum(axis=(2, 3)).max(), 2.0)  # <= 2 experts each

  def test_paddings_are_not_routed_nor_counted(self):
    paddings = jnp.asarray([[1.0, 0.0, 0.0, 0.0]])
    aux, combine, _, summary = gshard_utils.top2_gating_on_logits(
      paddings, LOGITS, 2, 4, jnp.float32
    )
    np.testing.assert_array_equal(combine[0, 0], np.zeros((2, 4)))
    self.assertEqual(int(summary[2]), 0)  # a padded token is not a dropped one
    # Densities still average over all S = 4 tokens (legacy MTF behaviour):
    # proxy = [(0.8+0.6+0.3)/4, (0.2+0.4+0.7)/4], first choices = [2/4, 1/4].
    expected = 4 * (0.425 * 0.5 + 0.325 * 0.25) / 2
    np.testing.assert_allclose(aux, expected, rtol=1e-6)

  def test_capacity_factor_rounds_up_to_four(self):
    _, combine, _, _ = gshard_utils.top2_gating_on_logits(
      None, LOGITS, 2, None, jnp.float32, capacity_factor=2.5
    )
    self.assertEqual(combine.shape[-1], 8)  # int(4 * 2.5 / 2) = 5 -> 8


class ExpertChoiceTest(absltest.TestCase):
  def test_each_expert_takes_its_best_tokens(self):
    aux, gates, perm = gshard_utils.expert_choice_gating_on_logits(
      LOGITS, 2, 0, jnp.float32, capacity_factor=1.0
    )
    self.assertEqual(float(aux), 0.0)
    self.assertEqual(perm.shape, (1, 2, 2, 4))  # [G, E, C = 4 // 2 * 1, S]
    chosen = np.asarray(perm).argmax(-1)[0]  # [E, C] token ids, best last
    np.testing.assert_array_equal(chosen, [[1, 0], [2, 3]])
    np.testing.assert_allclose(gates[0], [[0.8, 0.9], [0.4, 0.7]], rtol=1e-6)

  def test_unknown_gating_func_lists_the_choices(self):
    with self.assertRaisesRegex(ValueError, "'top2', 'expert_choice'"):
      gshard_utils.compute_gating(None, LOGITS, 2, 2, jnp.float32, gating_func="top3")


if __name__ == "__main__":
  absltest.main()
