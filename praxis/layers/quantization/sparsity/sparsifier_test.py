"""SparsityBaseLayer through the quantized Linear: masks, schedules, and SR-STE gradients."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.quantization import linears
from praxis.layers.quantization.sparsity import sparsifier
from praxis.layers.quantization.sparsity import sparsity_hparams as sh
from praxis.layers.quantization.sparsity import sparsity_modes as modes

NT = base_layer.NON_TRAINABLE
MASK = "w" + base_layer.SPARSITY_NAME_POSTFIX


def _layer(mode, **weight_kwargs):
  sparsity = sh.SparsityHParams(
    sparsity_type=sh.SparsityType.STRUCTURED_NM,
    weight_params=sh.WeightSparsityParams(prune_rate=(2, 4), **weight_kwargs),
    mode=mode,
    order="R",
  )
  p = pax_fiddle.Config(
    linears.Linear, name="l", input_dims=4, output_dims=8, quantization=None, sparsity=sparsity
  )
  return base_layer.instantiate(p)


def _np_two_of_four_rows(w):
  """Reference 2:4 along rows: keep the two largest |w| of each 4 (stable on ties)."""
  keep = np.zeros(w.shape, bool)
  for r in range(w.shape[0]):
    for g in range(0, w.shape[1], 4):
      order = sorted(range(g, g + 4), key=lambda i: (-abs(w[r, i]), i))
      keep[r, order[:2]] = True
  return keep


class SparsifierTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.float32)

  def test_training_mode_masks_and_counts(self):
    layer = _layer(modes.TrainingMode(target_step=0))
    v = layer.init(jax.random.PRNGKey(0), self.x)
    self.assertTrue(np.all(v[NT][MASK]))
    self.assertEqual(int(v[NT]["num_shots"]), -1)
    out, state = layer.apply(v, self.x, mutable=[NT])
    w = np.asarray(v["params"]["w"])
    ref_mask = _np_two_of_four_rows(w)
    np.testing.assert_array_equal(state[NT][MASK], ref_mask)
    self.assertEqual(int(state[NT]["step"]), 1)
    self.assertEqual(int(state[NT]["mask_update_count"]), 1)
    np.testing.assert_allclose(out, np.asarray(self.x) @ np.where(ref_mask, w, 0), rtol=1e-5)

  def test_one_shot_waits_for_target_step(self):
    layer = _layer(modes.OneShotMode(target_step=1))
    v = layer.init(jax.random.PRNGKey(0), self.x)
    _, s1 = layer.apply(v, self.x, mutable=[NT])
    self.assertTrue(np.all(s1[NT][MASK]))  # step 0: not yet
    _, s2 = layer.apply({**v, NT: s1[NT]}, self.x, mutable=[NT])
    self.assertEqual(int(s2[NT]["mask_update_count"]), 1)
    self.assertEqual(int(np.sum(s2[NT][MASK])), 16)  # half of 4 x 8 kept

  def test_inference_mode_has_no_sparsity_state(self):
    layer = _layer(modes.InferenceMode())
    v = layer.init(jax.random.PRNGKey(0), self.x)
    self.assertNotIn(NT, v)

  def test_sr_ste_gradient_is_dense_plus_decay(self):
    w = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    mask = jnp.array([[True, False], [False, True]])
    g = jnp.array([[0.5, 0.5], [0.5, 0.5]])
    _, vjp = jax.vjp(lambda w: sparsifier.sr_ste(w, mask, 0.1)[0], w)
    (grad,) = vjp(g)
    np.testing.assert_allclose(grad, g + 0.1 * np.where(np.asarray(mask), 0.0, np.asarray(w)))
    np.testing.assert_allclose(sparsifier.sr_ste(w, mask, 0.1)[0], np.where(mask, w, 0.0))


if __name__ == "__main__":
  absltest.main()
