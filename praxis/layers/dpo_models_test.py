"""The DPO models: Pax's loss on a hand-computed case, LanguageModelDPO end to end."""

import math

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pytypes
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = pytypes.NestedMap
D, V = 8, 7


class _Recorder:
  """Stands in for the model the DPO helper reads beta from and writes summaries to."""

  beta = 0.5

  def add_summary(self, *args, **kwargs):
    del args, kwargs


def softmax_out(per_token_xent, weights):
  return NestedMap(
    per_example_xent=jnp.asarray(per_token_xent, jnp.float32),
    class_weights=jnp.asarray(weights, jnp.float32),
  )


class DpoTest(absltest.TestCase):
  def test_dpo_loss_hand_computed(self):
    w = [[1.0, 1.0], [1.0, 0.0]]  # row 1's second token does not count
    # Per-sequence log p: pi(y_w) = [-1, -2], ref(y_w) = [-1.5, -2], pi(y_l) = [-3, -1],
    # ref(y_l) = [-2, -1]; beta 0.5: r_w = [0.25, 0], r_l = [-0.5, 0]; margins [0.75, 0].
    predictions = NestedMap(
      y_w_pi=softmax_out([[0.5, 0.5], [2.0, 9.0]], w),
      y_w_ref=softmax_out([[1.0, 0.5], [2.0, 9.0]], w),
      y_l_pi=softmax_out([[1.0, 2.0], [1.0, 9.0]], w),
      y_l_ref=softmax_out([[1.5, 0.5], [1.0, 9.0]], w),
    )
    metrics, _ = models.compute_dpo_loss_helper(_Recorder(), predictions)
    expected = (math.log1p(math.exp(-0.75)) + math.log(2.0)) / 2
    self.assertAlmostEqual(float(metrics.total_loss[0]), expected, places=6)
    self.assertEqual(float(metrics.total_loss[1]), 2.0)

    # No gradient reaches the reference model.
    def loss(ref_xent):
      p = NestedMap(predictions)
      p.y_w_ref = softmax_out(ref_xent, w)
      return models.compute_dpo_loss_helper(_Recorder(), p)[0].total_loss[0]

    np.testing.assert_array_equal(jax.grad(loss)(predictions.y_w_ref.per_example_xent), 0.0)

  def test_language_model_dpo(self):
    lm = transformer_models.TransformerLm.config(
      model_dims=D,
      vocab_size=V,
      stacked_transformer_tpl=transformers.StackedTransformer.config(
        model_dims=D, hidden_dims=2 * D, num_heads=2, num_layers=1
      ),
    )
    model = base_layer.instantiate(models.LanguageModelDPO.config(ref_mdl=lm, mdl=lm.clone()))
    rng = np.random.default_rng(0)
    batch = {}
    for half in ("y_w", "y_l"):
      ids = jnp.asarray(rng.integers(0, V, (2, 6)), jnp.int32)
      batch.update(
        {
          f"{half}/inputs": ids,
          f"{half}/paddings": jnp.zeros((2, 6)),
          f"{half}/labels/ids": jnp.roll(ids, -1, axis=1),
          f"{half}/labels/weights": jnp.ones((2, 6)),
          f"{half}/segment_ids": jnp.ones((2, 6), jnp.int32),
          f"{half}/segment_pos": jnp.tile(jnp.arange(6), (2, 1)),
          f"{half}/inputs_indicator": jnp.ones((2, 6)),
        }
      )
    variables = model.init(jax.random.key(0), batch)
    params = variables["params"]
    self.assertSameElements(params.keys(), ["ref_mdl", "mdl"])
    # The policy starts as the reference: every reward is 0 and the loss is log 2.
    same = {**variables, "params": {"ref_mdl": params["ref_mdl"], "mdl": params["ref_mdl"]}}
    metrics, _ = model.apply(same, batch)
    self.assertAlmostEqual(float(metrics.total_loss[0]), math.log(2.0), places=6)
    # Otherwise the loss is the helper's formula on the LMs' own log-probs.
    preds = model.apply(variables, batch, method="compute_predictions")
    metrics, _ = model.apply(variables, batch)
    log_p = {k: -jnp.sum(v.per_example_xent, -1) for k, v in preds.items()}
    margin = 0.1 * ((log_p["y_w_pi"] - log_p["y_w_ref"]) - (log_p["y_l_pi"] - log_p["y_l_ref"]))
    expected = -jnp.mean(jax.nn.log_sigmoid(margin))
    np.testing.assert_allclose(metrics.total_loss[0], expected, rtol=1e-5)
    self.assertNotAlmostEqual(float(metrics.total_loss[0]), math.log(2.0), places=4)
    # Both halves' tokens are counted.
    counted = variables["non_trainable"]["token_counter"]["approx_total_tokens_mm"]
    _, updated = model.apply(variables, batch, mutable=["non_trainable"])
    counted = updated["non_trainable"]["token_counter"]["approx_total_tokens_mm"] - counted
    self.assertAlmostEqual(float(counted) * 1e6, 24.0, places=3)


if __name__ == "__main__":
  absltest.main()
