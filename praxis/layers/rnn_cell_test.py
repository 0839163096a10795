"""Tests for the LSTM cells and the FRnn layers against a numpy LSTM."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import frnn
from praxis.layers import rnn_cell

NestedMap = py_utils.NestedMap


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _np_lstm_step(wm, b, x, m, c, cifg=False, cap=10.0, ln_scale=None):
  """One lingvo LSTMCellSimple step in numpy (gates i_i, i_g, f_g, o_g; CIFG: i_i, f_g, o_g)."""
  z = np.concatenate([x, m], axis=1) @ wm  # [B, G * H]
  gates = np.split(z, 3 if cifg else 4, axis=1)
  biases = np.split(b, 3 if cifg else 4)
  if ln_scale is not None:
    scales = np.split(ln_scale, 4)
    gates = [
      (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-8) * s
      for g, s in zip(gates, scales)
    ]
  gates = [g + bb for g, bb in zip(gates, biases)]
  if cifg:
    i_i, f_g, o_g = gates
    new_c = _sigmoid(f_g) * c + (1 - _sigmoid(f_g)) * np.tanh(i_i)
  else:
    i_i, i_g, f_g, o_g = gates
    new_c = _sigmoid(f_g) * c + _sigmoid(i_g) * np.tanh(i_i)
  new_c = np.clip(new_c, -cap, cap)
  return _sigmoid(o_g) * np.tanh(new_c), new_c


class LstmCellTest(absltest.TestCase):
  def _check(self, cls, cifg=False, layer_norm=False):
    cell = pax_fiddle.Config(cls, name="lstm", num_input_nodes=3, num_output_nodes=2).Instantiate()
    rng = np.random.default_rng(0)
    x, m, c = (rng.normal(size=(4, d)).astype(np.float32) for d in (3, 2, 2))
    padding = np.array([[0.0], [0.0], [1.0], [0.0]], np.float32)
    state0 = NestedMap(m=jnp.asarray(m), c=jnp.asarray(c))
    inputs = NestedMap(act=[jnp.asarray(x)], padding=jnp.asarray(padding))
    v = cell.init(jax.random.key(0), state0, inputs)
    gates = 3 if cifg else 4
    self.assertEqual(v["params"]["wm"].shape, (5, gates * 2))
    params = {k: rng.normal(size=a.shape).astype(np.float32) for k, a in v["params"].items()}
    out = cell.apply({"params": params}, state0, inputs)
    want_m, want_c = _np_lstm_step(
      params["wm"], params["b"], x, m, c, cifg, ln_scale=params.get("ln_scale")
    )
    # A padded row keeps its previous state.
    want_m[2], want_c[2] = m[2], c[2]
    np.testing.assert_allclose(out.m, want_m, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.c, want_c, rtol=1e-5, atol=1e-5)

  def test_lstm(self):
    self._check(rnn_cell.LstmCellSimple)

  def test_cifg(self):
    self._check(rnn_cell.CifgLstmCellSimple, cifg=True)

  def test_layer_normalized(self):
    self._check(rnn_cell.LayerNormalizedLstmCellSimple, layer_norm=True)

  def test_init_states_and_reset(self):
    cell = pax_fiddle.Config(
      rnn_cell.LstmCellSimple,
      name="lstm",
      num_input_nodes=1,
      num_output_nodes=2,
      reset_cell_state=True,
      fprop_dtype=jnp.bfloat16,
    ).Instantiate()
    state = cell.init_states(3)
    self.assertEqual(state.m.shape, (3, 2))
    self.assertEqual(state.c.dtype, jnp.bfloat16)


class FrnnTest(absltest.TestCase):
  def test_frnn_and_lstm_frnn_match_a_numpy_loop(self):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    padding = np.zeros((2, 5, 1), np.float32)
    padding[1, 3:] = 1.0
    cell_p = pax_fiddle.Config(
      rnn_cell.LstmCellSimple, name="cell", num_input_nodes=3, num_output_nodes=4
    )
    inputs = NestedMap(act=jnp.asarray(x), padding=jnp.asarray(padding))
    for cls, reverse in ((frnn.FRnn, False), (frnn.LstmFrnn, False), (frnn.FRnn, True)):
      layer = pax_fiddle.Config(cls, name="rnn", cell_tpl=cell_p, reverse=reverse).Instantiate()
      v = layer.init(jax.random.key(0), inputs)
      act, state = layer.apply(v, inputs)
      wm, b = (np.asarray(v["params"]["cell"][k]) for k in ("wm", "b"))
      m, c = np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)
      want = np.zeros((2, 5, 4), np.float32)
      steps = range(4, -1, -1) if reverse else range(5)
      for t in steps:
        new_m, new_c = _np_lstm_step(wm, b, x[:, t], m, c)
        keep = padding[:, t] > 0
        m, c = np.where(keep, m, new_m), np.where(keep, c, new_c)
        want[:, t] = m
      np.testing.assert_allclose(act, want, rtol=1e-4, atol=1e-5)
      np.testing.assert_allclose(state.m, m, rtol=1e-4, atol=1e-5)

  def test_reset_mask(self):
    segment_ids = jnp.array([[1, 1, 2, 2, 0]])
    np.testing.assert_array_equal(frnn.reset_mask(segment_ids), [[0, 1, 0, 1, 0]])
    paddings = jnp.array([[0, 0, 0, 0, 1]])
    np.testing.assert_array_equal(frnn.reset_mask(segment_ids, paddings), [[0, 1, 0, 1, 1]])

  def test_stacked_and_bidirectional_shapes(self):
    cell_p = pax_fiddle.Config(rnn_cell.LstmCellSimple)
    frnn_p = pax_fiddle.Config(frnn.LstmFrnn, cell_tpl=cell_p)
    inputs = NestedMap(act=jnp.ones((2, 3, 5)), padding=jnp.zeros((2, 3, 1)))
    for cls in (frnn.StackFrnn, frnn.StackBiFrnn):
      layer = pax_fiddle.Config(
        cls, name="s", frnn_tpl=frnn_p, num_layers=2, num_input_nodes=5, num_output_nodes=6
      ).Instantiate()
      v = layer.init(jax.random.key(0), inputs)
      act, states = layer.apply(v, inputs)
      self.assertEqual(act.shape, (2, 3, 6))
      self.assertLen(states, 2)


if __name__ == "__main__":
  absltest.main()
