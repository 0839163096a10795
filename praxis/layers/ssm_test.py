"""Tests for the S4D / S5 layers: the parallel forms against a numpy recurrence, and decoding."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import ssm


class SsmTest(absltest.TestCase):
  def test_hippo_legs(self):
    a = np.asarray(ssm.make_hippo(3, "LegS"))
    # -A[n, k] = sqrt(2n+1) sqrt(2k+1) below the diagonal, n + 1 on it, 0 above.
    want = np.array([[1, 0, 0], [np.sqrt(3), 2, 0], [np.sqrt(5), np.sqrt(15), 3]])
    np.testing.assert_allclose(-a, want, rtol=1e-6)

  def test_s4d_matches_numpy_recurrence_and_decoding(self):
    for hippo in ("ss4d-1d", "ss4d-1d-legs"):
      layer = pax_fiddle.Config(
        ssm.SSM,
        name="s4d",
        nheads=3,
        dim=2,
        l_max=6,
        decode_num_samples=1,
        step_size=0.5,
        hippo_type=hippo,
      ).Instantiate()
      x = np.asarray(jax.random.normal(jax.random.key(0), (2, 6, 2)))
      v = layer.init(jax.random.key(1), x)
      self.assertEqual(sorted(v["params"]), ["C_im", "C_re", "D"])
      y, cache = layer.apply(v, x, mutable=[base_layer.DECODE_CACHE])
      # Numpy: per channel, zero-order hold of the diagonal A with B = 1.
      c = np.asarray(v["params"]["C_re"]) + 1j * np.asarray(v["params"]["C_im"])  # [nh, d]
      a = layer.apply(v, method=lambda m: m.amat)
      abar = np.exp(0.5 * np.asarray(a))
      bbar = (abar - 1) / np.asarray(a)
      state = np.zeros((2, 3, 2), complex)
      want = []
      for t in range(6):
        state = abar[None] * state + bbar[None] * x[:, t][:, None, :]
        want.append((c[None] * state).sum(1).real + x[:, t])
      np.testing.assert_allclose(y, np.stack(want, 1), rtol=1e-4, atol=1e-4)
      steps = []
      variables = {**v, **cache}
      for t in range(6):
        out, cache = layer.apply(
          variables, x[:, t], method=layer.extend_step, mutable=[base_layer.DECODE_CACHE]
        )
        variables = {**v, **cache}
        steps.append(out)
      np.testing.assert_allclose(np.stack(steps, 1), y, rtol=1e-4, atol=1e-4)

  def test_s5_scan_matches_decoding(self):
    layer = pax_fiddle.Config(
      ssm.S5, name="s5", nheads=4, dim=3, l_max=5, decode_num_samples=1, step_size=0.3
    ).Instantiate()
    x = jax.random.normal(jax.random.key(0), (2, 5, 3))
    v = layer.init(jax.random.key(1), x)
    self.assertEqual(v["params"]["C_re"].shape, (3, 4))
    y, cache = layer.apply(v, x, mutable=[base_layer.DECODE_CACHE])
    variables, steps = {**v, **cache}, []
    for t in range(5):
      out, cache = layer.apply(
        variables, x[:, t], method=layer.extend_step, mutable=[base_layer.DECODE_CACHE]
      )
      variables = {**v, **cache}
      steps.append(out)
    np.testing.assert_allclose(np.stack(steps, 1), y, rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
  absltest.main()
