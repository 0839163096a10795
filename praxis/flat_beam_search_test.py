"""Tests for praxis.flat_beam_search: a run worked out by hand, and the mask helpers."""

from typing import Any

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import flat_beam_search
from praxis import pytypes

DECODE_CACHE = base_layer.DECODE_CACHE
EOS = 3


class StepTable(base_layer.BaseLayer):
  """Returns scores table[t] [K, V] at its t-th extend_step, whatever the ids."""

  table: Any = None

  def __call__(self):
    self.put_variable(DECODE_CACHE, "t", jnp.zeros((), jnp.int32))

  def extend_step(self, ids, segment_pos):
    del ids, segment_pos
    t = self.get_variable(DECODE_CACHE, "t")
    self.put_variable(DECODE_CACHE, "t", t + 1)
    return pytypes.NestedMap(logits=jnp.asarray(self.table, jnp.float32)[t])


class FlatBeamSearchTest(absltest.TestCase):
  def test_two_beams_worked_out_by_hand(self):
    table = [
      [[0, 4, 1, 3], [0, 4, 1, 3]],  # step 0: both slots see the prefix's last token 8
      [[0, 0, 5, 1], [2, 0, 0, 6]],
    ]

    def run(mdl):
      mdl()
      return flat_beam_search.flat_beam_search(
        mdl,
        lambda m, ids, pos: m.extend_step(ids, pos).logits,
        jnp.array([[9, 8]]),
        jnp.zeros((1, 2)),
        seq_len=3,
        beam_size=2,
        fprop_dtype=jnp.float32,
        eos_id=EOS,
        length_norm_alpha=0.0,  # length_norm = 1: the scores are plain sums
      )

    out, _ = StepTable(table=table).apply({}, method=run, mutable=[DECODE_CACHE])
    # Step 0: "8 EOS" finishes with 3; the live hypothesis "8 1" has 4 (the other slot is a
    # placeholder at about -1e9). Step 1: "8 1 EOS" finishes with 4 + 1 = 5.
    np.testing.assert_array_equal(out.output_ids, [[[8, 1, EOS], [8, EOS, 0]]])
    np.testing.assert_array_equal(out.decode_lengths, [[3, 2]])
    np.testing.assert_allclose(out.scores, [[5.0, 3.0]])

  def test_masks_pick_each_hypothesis_history(self):
    # K = 2, S = 2: slots 0, 1 at step 0 and 2, 3 at step 1.
    mask = flat_beam_search.update_beam_mask(
      jnp.asarray(np.eye(2, 4)[None], jnp.float32), jnp.array([[1, 1]]), time_step=1
    )
    np.testing.assert_array_equal(mask, [[[0, 1, 1, 0], [0, 1, 0, 1]]])
    output_ids = jnp.array([[[5, 6], [7, 8]]])  # [B, K(slot), S]
    np.testing.assert_array_equal(
      flat_beam_search.get_final_output_ids(mask, output_ids), [[[7, 6], [7, 8]]]
    )


if __name__ == "__main__":
  absltest.main()
