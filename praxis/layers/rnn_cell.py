"""Pax's RNN cells: one step of an LSTM, `(state0, inputs) -> state1`, all NestedMaps.

State: `m` [B, output_size] (the output) and `c` [B, hidden_size] (the cell). Inputs: `act`, a
list of `inputs_arity` tensors [B, D_i] (or one tensor), `padding` [B, 1] (a padded step keeps
state0), and `reset_mask` [B, 1] with `reset_cell_state` (0 zeroes state0 first: packed inputs).

Weights: `wm` [num_input_nodes + output_size, num_gates * hidden_size] (inputs then m, the gates
side by side), `b` [num_gates * hidden_size], `w_proj` [hidden_size, output_size] with
`num_hidden_nodes`. Gate order along the last dim, as lingvo: LSTM (i_i, i_g, f_g, o_g) - the
input's tanh candidate, input gate, forget gate, output gate; CIFG (i_i, f_g, o_g) with input gate
1 - forget gate. LayerNormalizedLstmCellSimple layer-normalises each gate block (`ln_scale`).

`project_input` computes the input half of the gate matmul for a whole [T, B, D] sequence at once,
and `fprop_with_projected_inputs` takes it back step by step (`inputs.proj_inputs` [B, G * H]).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import py_utils

NestedMap = py_utils.NestedMap
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
JTensor = jax.Array


def _zoneout_helper(
  prev_v: JTensor,
  cur_v: JTensor,
  padding_v: JTensor,
  zo_prob: float,
  is_eval: bool,
  random_uniform: JTensor | None,
) -> JTensor:
  """ZoneOut (arXiv:1606.01305): keep prev_v where padded, or at random with prob zo_prob.

  In eval the two are mixed by their expectations; padded steps always keep prev_v.
  """
  prev_v, cur_v, padding_v = jnp.asarray(prev_v), jnp.asarray(cur_v), jnp.asarray(padding_v)
  if zo_prob == 0.0:
    return jnp.where(padding_v, prev_v, cur_v)
  if is_eval:
    mix = (zo_prob * prev_v + (1.0 - zo_prob) * cur_v).astype(cur_v.dtype)
    return jnp.where(padding_v, prev_v, mix)
  if random_uniform is None:
    raise ValueError("_zoneout_helper needs random_uniform in training when zo_prob > 0.")
  keep_prev = jnp.logical_or(random_uniform < zo_prob, padding_v > 0)
  return jnp.where(jax.lax.stop_gradient(keep_prev), prev_v, cur_v)


class BaseRnnCell(base_layer.BaseLayer):
  """The interface of an RNN cell: init_states, get_output, and one step `__call__`."""

  def init_states(self, batch_size: int) -> NestedMap:
    """The state before the first step."""
    raise NotImplementedError(f"{type(self).__name__} must implement init_states.")

  def get_output(self, state: NestedMap) -> JTensor:
    """The step's output read from a state."""
    raise NotImplementedError(f"{type(self).__name__} must implement get_output.")

  def __call__(self, state0: NestedMap, inputs: NestedMap) -> NestedMap:
    """state0, inputs (act [B, D], padding [B, 1]) -> state1."""
    raise NotImplementedError(f"{type(self).__name__} must implement __call__.")


class LstmCellSimple(BaseRnnCell):
  """lingvo's LSTMCellSimple: all gates from one matmul of [inputs, m].

  Attributes:
    inputs_arity: how many tensors `inputs.act` holds (concatenated in order).
    num_input_nodes: total input dim.
    num_output_nodes: the output dim (and the cell dim when num_hidden_nodes is 0).
    num_hidden_nodes: the cell dim of a projected LSTM (arXiv:1603.08042); 0: no projection.
    reset_cell_state: zero state0 where `inputs.reset_mask` is 0 (packed inputs).
    cell_value_cap: clip c to [-cap, cap]; None: no clipping.
    forget_gate_bias: a constant added to the forget gate's bias.
    output_nonlinearity: m = sigmoid(o) * tanh(c) (else sigmoid(o) * c).
    zo_prob: ZoneOut probability (0: none).
    bias_init: initialiser of `b`.
  """

  inputs_arity: int = 1
  num_input_nodes: int = 0
  num_output_nodes: int = 0
  num_hidden_nodes: int = 0
  reset_cell_state: bool = False
  cell_value_cap: float | None = 10.0
  forget_gate_bias: float = 0.0
  output_nonlinearity: bool = True
  zo_prob: float = 0.0
  bias_init: WeightInit = base_layer.instance_field(lambda: WeightInit.Constant(0.0))

  @property
  def num_gates(self) -> int:
    return 4

  @property
  def output_size(self) -> int:
    return self.num_output_nodes

  @property
  def hidden_size(self) -> int:
    return self.num_hidden_nodes or self.num_output_nodes

  def setup(self):
    if self.cell_value_cap is not None and not isinstance(self.cell_value_cap, (int, float)):
      raise TypeError(f"cell_value_cap must be a number or None, got {self.cell_value_cap!r}.")
    gates = self.num_gates * self.hidden_size
    self.create_variable(
      "wm", WeightHParams(shape=[self.num_input_nodes + self.output_size, gates])
    )
    if self.num_hidden_nodes:
      self.create_variable("w_proj", WeightHParams(shape=[self.hidden_size, self.output_size]))
    self.create_variable("b", WeightHParams(shape=[gates], init=self.bias_init))

  def init_states(self, batch_size: int) -> NestedMap:
    return NestedMap(
      m=jnp.zeros((batch_size, self.output_size), self.fprop_dtype),
      c=jnp.zeros((batch_size, self.hidden_size), self.fprop_dtype),
    )

  def get_output(self, state: NestedMap) -> JTensor:
    return state.m

  def _reset_state(self, state: NestedMap, inputs: NestedMap) -> NestedMap:
    mask = inputs.reset_mask
    return NestedMap(
      m=(mask * state.m).astype(state.m.dtype), c=(mask * state.c).astype(state.c.dtype)
    )

  def __call__(self, state0: NestedMap, inputs: NestedMap) -> NestedMap:
    """One step: state0 (m, c), inputs (act, padding[, reset_mask]) -> state1 (m, c)."""
    act = inputs.act if isinstance(inputs.act, (list, tuple)) else [inputs.act]
    if len(act) != self.inputs_arity:
      raise ValueError(f"inputs.act holds {len(act)} tensors; inputs_arity is {self.inputs_arity}.")
    if self.reset_cell_state:
      state0 = self._reset_state(state0, inputs)
    concat = jnp.concatenate(list(act) + [state0.m], axis=1)  # [B, D + M]
    xmw = jnp.einsum("bd,dc->bc", concat, self.theta.wm)  # [B, G * H]
    state1 = self._gates_internal(state0, *self._gates_preprocess(xmw))
    return self._apply_zoneout(state0, inputs, state1)

  def _gates_unpack(self, x: JTensor, axis: int = -1) -> Sequence[JTensor]:
    """Splits the gate dim (num_gates * hidden_size) into num_gates blocks."""
    if x.shape[axis] != self.num_gates * self.hidden_size:
      raise ValueError(
        f"Gate tensor {x.shape} has {x.shape[axis]} at axis {axis}; expected num_gates * "
        f"hidden_size = {self.num_gates * self.hidden_size}."
      )
    return jnp.split(x, self.num_gates, axis=axis)

  def _bias_unpack(self) -> Sequence[JTensor]:
    i_i, i_g, f_g, o_g = self._gates_unpack(self.theta.b)
    return i_i, i_g, f_g + self.forget_gate_bias, o_g

  def _gates_preprocess(self, x: JTensor) -> Sequence[JTensor]:
    """[B, G * H] pre-activations -> the gate blocks with their biases."""
    if self.forget_gate_bias == 0.0:
      return self._gates_unpack(x + self.theta.b, axis=1)
    return [g + b for g, b in zip(self._gates_unpack(x, axis=1), self._bias_unpack())]

  def _cell_to_output(self, o_g: JTensor, new_c: JTensor) -> NestedMap:
    if self.cell_value_cap is not None:
      new_c = jnp.clip(new_c, -self.cell_value_cap, self.cell_value_cap)
    squashed = jnp.tanh(new_c) if self.output_nonlinearity else new_c
    new_m = jax.nn.sigmoid(o_g) * squashed
    if self.num_hidden_nodes:
      new_m = jnp.einsum("bd,dc->bc", new_m, self.theta.w_proj)  # [B, output_size]
    return NestedMap(c=new_c, m=new_m)

  def _gates_internal(self, state0, i_i, i_g, f_g, o_g) -> NestedMap:
    new_c = jax.nn.sigmoid(f_g) * state0.c + jax.nn.sigmoid(i_g) * jnp.tanh(i_i)
    return self._cell_to_output(o_g, new_c)

  def _apply_zoneout(self, state0: NestedMap, inputs: NestedMap, state1: NestedMap) -> NestedMap:
    c_rand = m_rand = None
    if self.zo_prob > 0.0 and not self.do_eval:
      c_rand = jax.random.uniform(self.next_prng_key(), state0.c.shape)
      m_rand = jax.random.uniform(self.next_prng_key(), state0.m.shape)
    zoneout = lambda prev, cur, rand: _zoneout_helper(
      prev, cur, inputs.padding, self.zo_prob, self.do_eval, rand
    )
    return NestedMap(m=zoneout(state0.m, state1.m, m_rand), c=zoneout(state0.c, state1.c, c_rand))

  def project_input(self, inputs: NestedMap) -> JTensor:
    """inputs.act [T, B, D] (or a list, concatenated) -> [T, B, G * H]: the input half of wm."""
    act = inputs.act if isinstance(inputs.act, (list, tuple)) else [inputs.act]
    x = jnp.concatenate(list(act), axis=-1) if len(act) > 1 else act[0]
    if x.shape[-1] != self.num_input_nodes:
      raise ValueError(f"project_input: inputs have dim {x.shape[-1]}, not {self.num_input_nodes}.")
    return jnp.einsum("TBD,DH->TBH", x, self.theta.wm[: self.num_input_nodes])

  def fprop_with_projected_inputs(self, state0: NestedMap, inputs: NestedMap) -> NestedMap:
    """One step from `inputs.proj_inputs` [B, G * H] (project_input's slice), padding[, reset]."""
    if self.reset_cell_state:
      state0 = self._reset_state(state0, inputs)
    proj_m = jnp.einsum("bd,dc->bc", state0.m, self.theta.wm[self.num_input_nodes :])
    xmw = inputs.proj_inputs + proj_m  # [B, G * H]
    state1 = self._gates_internal(state0, *self._gates_preprocess(xmw))
    return self._apply_zoneout(state0, inputs, state1)


class LayerNormalizedLstmCellSimple(LstmCellSimple):
  """LstmCellSimple with each gate block layer-normalised (arXiv:1607.06450), then scaled by
  its slice of `ln_scale` (init 1) and biased.

  Attributes:
    layer_norm_epsilon: added to the variance.
  """

  layer_norm_epsilon: float = 1e-8

  def setup(self):
    super().setup()
    self.create_variable(
      "ln_scale",
      WeightHParams(shape=[self.num_gates * self.hidden_size], init=WeightInit.Constant(1.0)),
    )

  def _apply_layer_norm(self, x: JTensor) -> JTensor:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(variance + self.layer_norm_epsilon)

  def _gates_preprocess(self, x: JTensor) -> Sequence[JTensor]:
    gates = self._gates_unpack(x, axis=1)
    scales = self._gates_unpack(self.theta.ln_scale)
    return [
      self._apply_layer_norm(g) * s + b for g, s, b in zip(gates, scales, self._bias_unpack())
    ]


class CifgLstmCellSimple(LstmCellSimple):
  """The coupled input-forget gate LSTM: three gates (i_i, f_g, o_g), input gate = 1 - forget."""

  @property
  def num_gates(self) -> int:
    return 3

  def _bias_unpack(self) -> Sequence[JTensor]:
    if self.forget_gate_bias != 0.0:
      raise ValueError("CifgLstmCellSimple does not support forget_gate_bias.")
    return self._gates_unpack(self.theta.b)

  def _gates_internal(self, state0, i_i, f_g, o_g) -> NestedMap:
    forget = jax.nn.sigmoid(f_g)
    new_c = forget * state0.c + (1.0 - forget) * jnp.tanh(i_i)
    return self._cell_to_output(o_g, new_c)
