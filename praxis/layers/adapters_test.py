"""MultitaskResidualAdapter against a numpy bottleneck MLP per task; the adapted FFN's modes."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import adapters


def _numpy_adapter(x, tasks, p):
  """Per position: x + relu(x @ down_w[t] + down_b[t]) @ up_w[t] + up_b[t] (no norm)."""
  out = np.empty_like(x)
  for b in range(x.shape[0]):
    for t in range(x.shape[1]):
      k = tasks[b] if tasks.ndim == 1 else tasks[b, t]
      hidden = np.maximum(x[b, t] @ p["down_w"][k] + p["down_b"][k], 0.0)
      out[b, t] = x[b, t] + hidden @ p["up_w"][k] + p["up_b"][k]
  return out


class AdapterTest(absltest.TestCase):
  def _adapter(self):
    cfg = pax_fiddle.Config(
      adapters.MultitaskResidualAdapter,
      name="a",
      input_dims=4,
      bottleneck_dims=3,
      num_tasks=3,
      norm_tpl=None,
    )
    return base_layer.instantiate(cfg)

  def test_per_sequence_and_per_frame_tasks_match_numpy(self):
    layer = self._adapter()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 4)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x, tasks=np.array([0, 2]))
    np.testing.assert_array_equal(variables["params"]["up_w"], 0.0)  # a fresh adapter adds b only
    params = {
      k: rng.normal(size=v.shape).astype(np.float32) for k, v in variables["params"].items()
    }
    for tasks in (np.array([0, 2]), rng.integers(0, 3, size=(2, 5))):
      out = layer.apply({"params": params}, x, tasks=tasks)
      np.testing.assert_allclose(out, _numpy_adapter(x, tasks, params), rtol=1e-4, atol=1e-5)

  def test_tasks_needed_with_several(self):
    layer = self._adapter()
    with self.assertRaises(ValueError):
      layer.init(jax.random.PRNGKey(0), np.zeros((2, 5, 4), np.float32))

  def test_zero_adapter_leaves_the_feed_forward_unchanged(self):
    for mode in ("sequential", "parallel"):
      adapter = pax_fiddle.Config(
        adapters.MultitaskResidualAdapter, input_dims=4, bottleneck_dims=2, norm_tpl=None
      )
      cfg = pax_fiddle.Config(
        adapters.AdaptedTransformerFeedForward,
        name="f",
        input_dims=4,
        hidden_dims=8,
        residual_weight=0.5,
        mode=mode,
        adapter_tpl=adapter,
      )
      layer = base_layer.instantiate(cfg)
      x = np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32)
      variables = layer.init(jax.random.PRNGKey(0), x)
      variables["params"]["adapters"]["up_b"] = np.zeros((1, 4), np.float32)
      plain = layer.apply(variables, x)
      variables["params"]["adapters"]["up_b"] = np.ones((1, 4), np.float32)
      # The adapter adds up_b = 1 to the branch, which the residual scales by 0.5.
      np.testing.assert_allclose(layer.apply(variables, x), plain + 0.5, rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
