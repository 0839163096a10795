"""Chain's argument stack and the chain helpers, checked against plain numpy arithmetic."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import chain
from praxis.layers import linears


class _Affine(base_layer.BaseLayer):
  """inputs * scale + shift; returns only the inputs, so paddings stay on the stack."""

  scale: float = 1.0
  shift: float = 0.0

  def __call__(self, inputs):
    return inputs * self.scale + self.shift


def _run(cfg, *args, **kwargs):
  layer = base_layer.instantiate(cfg.set(name="c"))
  variables = layer.init(jax.random.PRNGKey(0), *args, **kwargs)
  return layer.apply(variables, *args, **kwargs), variables


class ChainTest(absltest.TestCase):
  def test_stack_passes_untouched_args_on(self):
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    pad = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 1.0]], np.float32)
    cfg = chain.chain(
      pax_fiddle.Config(_Affine, scale=2.0, shift=1.0),
      chain.apply_padding(),
      pax_fiddle.Config(_Affine, scale=3.0),
    )
    (out, out_pad), _ = _run(cfg, x, pad)
    np.testing.assert_array_equal(out, np.where(pad > 0, 0.0, 2 * x + 1) * 3)
    np.testing.assert_array_equal(out_pad, pad)

  def test_names_are_made_unique_and_copies_have_own_weights(self):
    cfg = chain.copy_n_times(2, chain.feed_forward(3, 3))
    self.assertEqual([l.name for l in cfg.layers], ["feedforward0", "feedforward1"])
    x = np.ones((2, 3), np.float32)
    out, variables = _run(cfg, x)
    params = variables["params"]
    self.assertEqual(set(params), {"feedforward0", "feedforward1"})
    h = x
    for name in ("feedforward0", "feedforward1"):
      h = h @ params[name]["linear"]["w"] + params[name]["bias"]["b"]
    np.testing.assert_allclose(out, h, rtol=1e-5)

  def test_residual_dict_args_and_errors(self):
    x = np.full((2, 2), 2.0, np.float32)
    out, _ = _run(chain.add_residual(pax_fiddle.Config(_Affine, scale=5.0)), x)
    np.testing.assert_array_equal(out, x * 5 + x)
    (a, b), _ = _run(chain.chain(chain.dict_to_args("a", "b")), {"a": x, "b": x + 1})
    np.testing.assert_array_equal(b, x + 1)
    with self.assertRaisesRegex(ValueError, "needs 2 positional args"):
      _run(chain.chain(chain.apply_padding()), x)

  def test_kwargs_reach_only_layers_that_name_them(self):
    calls = []

    class Needs(base_layer.BaseLayer):
      def __call__(self, inputs, extra=None):
        calls.append(extra)
        return inputs + extra

    x = jnp.ones((2,))
    out, _ = _run(chain.chain(pax_fiddle.Config(Needs), chain.full_like(7.0)), x, extra=1.0)
    np.testing.assert_array_equal(out, np.full((2,), 7.0))
    self.assertEqual(calls[-1], 1.0)
    self.assertIsInstance(
      base_layer.instantiate(chain.feed_forward(2, 2).set(name="f")), linears.FeedForward
    )


if __name__ == "__main__":
  absltest.main()
