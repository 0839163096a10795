"""Tests for praxis.layers.checkpoint_policy: every policy, applied by a repeated stack.

Each policy must give the gradients of the unrolled stack (remat changes what is stored, never
the result), and the named policies must really store the named activations (seen with
jax.ad_checkpoint.print_saved_residuals).
"""

import contextlib
import io
import re

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis.layers import checkpoint_policy as cp
from praxis.layers.repeats_test import B, BLOCK_LAYERS, D, F, H, N, T, X_TIMES
from praxis.layers.repeats_test import inputs, randomized_params, repeated, to_unrolled, unrolled


def saved_scan_residual_shapes(layer, params, x, pad):
  """Shapes of the residuals the scan keeps for the backward pass (per-iteration stacked)."""
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    jax.ad_checkpoint.print_saved_residuals(
      lambda p, x: jnp.sum(layer.apply({"params": p}, x, pad)), params, x
    )
  shapes = []
  for line in buf.getvalue().splitlines():
    if "output of scan" in line:
      shapes.append(tuple(int(d) for d in re.match(r"\w+\[([\d,]*)\]", line).group(1).split(",")))
  return shapes


class CheckpointPolicyTest(absltest.TestCase):
  def test_every_checkpoint_policy_gives_the_unrolled_gradients(self):
    # One layer per block keeps the 11 compilations of this test short.
    x, pad, ct = inputs()
    unr = unrolled(block_layers=1)
    params = randomized_params(repeated(block_layers=1), x, pad)
    want = jax.grad(lambda p: jnp.sum(unr.apply({"params": p}, x, pad) * ct))(
      to_unrolled(params, 1)
    )
    for policy in cp.AutodiffCheckpointType:
      rep = repeated(policy, block_layers=1)
      got = jax.jit(jax.grad(lambda p: jnp.sum(rep.apply({"params": p}, x, pad) * ct)))(params)  # pylint: disable=cell-var-from-loop
      jax.tree.map(
        lambda a, b: np.testing.assert_allclose(  # pylint: disable=cell-var-from-loop
          a, b, rtol=1e-4, atol=1e-5, err_msg=policy.name
        ),
        to_unrolled(got, 1),
        want,
      )

  def test_named_policies_save_the_named_activations(self):
    x, pad, _ = inputs()
    params = randomized_params(repeated(), x, pad)
    nothing = saved_scan_residual_shapes(repeated(), params, x, pad)
    self.assertEqual(nothing, [(X_TIMES, B, T, D)])  # the scan keeps only each iteration's carry
    expected = [  # policy, a shape it must add, how many of them (per block of BLOCK_LAYERS)
      (cp.AutodiffCheckpointType.SAVE_OUT_PROJ, (X_TIMES, B, T, D), 1 + BLOCK_LAYERS),
      (cp.AutodiffCheckpointType.SAVE_CONTEXT, (X_TIMES, B, T, N, H), BLOCK_LAYERS),
      (cp.AutodiffCheckpointType.SAVE_QKV_OUT_PROJ, (X_TIMES, B, T, N, H), 3 * BLOCK_LAYERS),
      (cp.AutodiffCheckpointType.SAVE_FFN1, (X_TIMES, B, T, F), BLOCK_LAYERS),
    ]
    for policy, shape, count in expected:
      saved = saved_scan_residual_shapes(repeated(policy), params, x, pad)
      self.assertEqual(saved.count(shape), count, f"{policy.name}: {saved}")
    everything = saved_scan_residual_shapes(
      repeated(cp.AutodiffCheckpointType.SAVE_EVERYTHING), params, x, pad
    )
    self.assertGreater(len(everything), 3 * BLOCK_LAYERS + 1)

  def test_unknown_policy_lists_the_valid_ones(self):
    with self.assertRaisesRegex(ValueError, "SAVE_NOTHING, SAVE_EVERYTHING"):
      cp.custom_policy("save_somethings")
    self.assertIs(cp.custom_policy("save_nothing"), jax.checkpoint_policies.nothing_saveable)


if __name__ == "__main__":
  absltest.main()
