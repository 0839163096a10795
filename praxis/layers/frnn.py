"""Pax's functional RNN layers: an RNN cell scanned over time (`nn.scan`), stacked, bidirectional.

Inputs are batch-major NestedMaps: `act` [B, T, D] (or a list of such), `padding` [B, T, 1], and
optionally `segment_ids` [B, T, 1] for packed sequences (the cell state is reset where a new
segment starts: `reset_mask`). Outputs: (act [B, T, H], final state).

FRnn scans any `rnn_cell` cell; LstmFrnn projects the inputs of all steps in one matmul first
(`cell.project_input`) and scans `cell.fprop_with_projected_inputs`. StackFrnn chains
`num_layers` of them; StackBiFrnn runs a forward and a reversed one per layer (each with half
of num_output_nodes) and concatenates their outputs. Weights are the cell's, shared across time:
FRnn's tree is {cell: {wm, b, ...}}; StackFrnn's {frnn_0: {cell: ...}, ...}; StackBiFrnn's
{fwd_frnn_i, bwd_frnn_i}.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import py_utils
from praxis.layers import rnn_cell
from praxis import pax_fiddle

NestedMap = py_utils.NestedMap
JTensor = jax.Array

PARAMS = base_layer.PARAMS
AUX_LOSS = base_layer.AUX_LOSS
HYPER_PARAMS = base_layer.HYPER_PARAMS
SUMMARIES = base_layer.SUMMARIES
NON_TRAINABLE = base_layer.NON_TRAINABLE
RANDOM = base_layer.RANDOM

# Each step draws its own random numbers (zoneout); the weights are the same at every step.
SCAN_SPLIT_RNGS = {PARAMS: False, RANDOM: True}


def reset_mask(
  segment_ids: JTensor, paddings: JTensor | None = None, dtype: jnp.dtype = jnp.float32
) -> JTensor:
  """0 where a step starts a new segment (the cell state is reset there), else 1.

  segment_ids [B, S] or [B, S, 1]; the first step always starts one. With `paddings` (same
  shape, 1 = padded) padded steps are 1 (no reset).
  """
  first = jnp.full((segment_ids.shape[0],) + (1,) * (segment_ids.ndim - 1), -1, segment_ids.dtype)
  previous = jnp.concatenate([first, segment_ids[:, :-1]], axis=1)  # segment of step t - 1
  same = jnp.equal(previous, segment_ids)
  if paddings is not None:
    same = jnp.logical_or(same, paddings.astype(bool))
  return same.astype(dtype)


def _copy_inputs(inputs) -> NestedMap:
  """A NestedMap copy whose fields can be set without touching the caller's map."""
  return NestedMap({k: v for k, v in inputs.items()})


def _step(cell, state0, inputs):
  state1 = cell(state0, inputs)
  return state1, cell.get_output(state1)


def _projected_step(cell, state0, inputs):
  state1 = cell.fprop_with_projected_inputs(state0, inputs)
  return state1, cell.get_output(state1)


class FRnn(base_layer.BaseLayer):
  """An RNN cell scanned over time.

  Attributes:
    cell_tpl: the cell (an rnn_cell.BaseRnnCell config); child `cell`.
    reverse: run from the last step to the first (outputs stay in input order).
    unroll: steps unrolled per scan iteration.
  """

  cell_tpl: base_hyperparams.Config | None = base_hyperparams.template_field(None)
  reverse: bool = False
  unroll: int = 1

  def setup(self):
    if self.unroll <= 0:
      raise ValueError(f"FRnn.unroll must be positive, got {self.unroll}.")
    if self.cell_tpl is None:
      raise ValueError("FRnn needs cell_tpl (e.g. a pax_fiddle.Config(rnn_cell.LstmCellSimple)).")
    self.create_child("cell", self.cell_tpl)

  def init_states(self, batch_size: int) -> NestedMap:
    return self.cell.init_states(batch_size)

  def get_output(self, state: NestedMap) -> JTensor:
    return self.cell.get_output(state)

  def extend_step(self, inputs: NestedMap, state0: NestedMap) -> tuple[NestedMap, JTensor]:
    """One step: inputs act [B, D] (or a list), padding [B, 1] -> (state1, output [B, H])."""
    inputs = _copy_inputs(inputs)
    inputs.reset_mask = jnp.ones_like(inputs.padding)
    state1 = self.cell(state0, inputs)
    return state1, self.get_output(state1)

  def _prepare(self, inputs: NestedMap, state0: NestedMap | None):
    """Copies inputs, adds reset_mask, reverses time if asked, fills in state0."""
    if "act" not in inputs or "padding" not in inputs:
      raise ValueError(f"{type(self).__name__} needs inputs.act and inputs.padding.")
    if not isinstance(self.cell, rnn_cell.BaseRnnCell):
      raise TypeError(f"cell_tpl must build an rnn_cell.BaseRnnCell, got {type(self.cell)}.")
    inputs = _copy_inputs(inputs)
    if not isinstance(inputs.act, (list, tuple)):
      inputs.act = [inputs.act]
    if "segment_ids" in inputs:
      inputs.reset_mask = reset_mask(inputs.segment_ids, inputs.padding, dtype=self.fprop_dtype)
    else:
      inputs.reset_mask = jnp.ones_like(inputs.padding, dtype=self.fprop_dtype)
    if self.reverse:
      inputs = jax.tree.map(lambda x: jnp.flip(x, axis=1), inputs)
    if not state0:
      state0 = self.init_states(inputs.padding.shape[0])
    return inputs, state0

  def _scan(self, step_fn, inputs: NestedMap, state0: NestedMap):
    """Runs step_fn(cell, state, inputs_t) over the time dim (1) of `inputs`."""
    if self.is_initializing():
      # Create the cell's weights outside the scan, where they are broadcast.
      step_fn(self.cell, state0, jax.tree.map(lambda x: x[:, 0], inputs))
    scan = nn.scan(
      step_fn,
      variable_axes={AUX_LOSS: 0, SUMMARIES: 0, HYPER_PARAMS: 0},
      variable_broadcast=[PARAMS],
      variable_carry=[NON_TRAINABLE],
      split_rngs=SCAN_SPLIT_RNGS,
      in_axes=1,
      out_axes=1,
      unroll=self.unroll,
    )
    final_state, act = scan(self.cell, state0, inputs)  # act [B, T, H]
    if self.reverse:
      act = jnp.flip(act, axis=1)
    return act, final_state

  def __call__(
    self, inputs: NestedMap, state0: NestedMap | None = None
  ) -> tuple[JTensor, NestedMap]:
    """inputs act [B, T, D], padding [B, T, 1][, segment_ids] -> (act [B, T, H], final state)."""
    inputs, state0 = self._prepare(inputs, state0)
    return self._scan(_step, inputs, state0)


class LstmFrnn(FRnn):
  """FRnn for the LSTM cells: the input projection of every step is one matmul up front."""

  @property
  def num_input_nodes(self) -> int:
    return self.cell.num_input_nodes

  @property
  def num_output_nodes(self) -> int:
    return self.cell.num_output_nodes

  def __call__(
    self, inputs: NestedMap, state0: NestedMap | None = None
  ) -> tuple[JTensor, NestedMap]:
    inputs, state0 = self._prepare(inputs, state0)
    inputs.proj_inputs = self.cell.project_input(inputs)  # [B, T, G * H]
    return self._scan(_projected_step, inputs, state0)


def _frnn_config(tpl, input_nodes: int, output_nodes: int, reverse: bool | None = None):
  p = tpl.clone()
  p.cell_tpl.set(num_input_nodes=input_nodes, num_output_nodes=output_nodes)
  if reverse is not None:
    p.reverse = reverse
  return p


class StackFrnn(base_layer.BaseLayer):
  """`num_layers` FRnns in a chain (children frnn_0, frnn_1, ...).

  Attributes:
    frnn_tpl: the FRnn config; its cell's num_input_nodes / num_output_nodes are set here.
    num_layers: how many.
    num_input_nodes: input dim of the first layer.
    num_output_nodes: output dim of every layer.
  """

  frnn_tpl: base_hyperparams.Config | None = base_hyperparams.template_field(None)
  num_layers: int = 1
  num_input_nodes: int = 0
  num_output_nodes: int = 0

  def setup(self):
    if self.num_layers <= 0 or self.frnn_tpl is None:
      raise ValueError("StackFrnn needs frnn_tpl and num_layers > 0.")
    dims = [self.num_input_nodes] + [self.num_output_nodes] * (self.num_layers - 1)
    self.create_children(
      "frnn", [_frnn_config(self.frnn_tpl, d, self.num_output_nodes) for d in dims]
    )

  def init_states(self, batch_size: int) -> list[NestedMap]:
    return [self.frnn[i].init_states(batch_size) for i in range(self.num_layers)]

  def get_output(self, state: list[NestedMap]) -> JTensor:
    return self.frnn[-1].get_output(state[-1])

  def extend_step(
    self, inputs: NestedMap, state: list[NestedMap]
  ) -> tuple[list[NestedMap], JTensor]:
    """One step through every layer: (new states, the last layer's output [B, H])."""
    inputs = _copy_inputs(inputs)
    new_states = []
    for i in range(self.num_layers):
      new_state, inputs.act = self.frnn[i].extend_step(inputs, state[i])
      new_states.append(new_state)
    return new_states, inputs.act

  def __call__(
    self, inputs: NestedMap, state0: list[NestedMap] | None = None
  ) -> tuple[JTensor, list[NestedMap]]:
    """inputs act [B, T, D], padding [B, T, 1] -> (act [B, T, H], a final state per layer)."""
    inputs = _copy_inputs(inputs)
    if not state0:
      state0 = self.init_states(inputs.padding.shape[0])
    final_states = []
    for i in range(self.num_layers):
      inputs.act, state = self.frnn[i](inputs=inputs, state0=state0[i])
      final_states.append(state)
    return inputs.act, final_states


class StackBiFrnn(base_layer.BaseLayer):
  """Bidirectional layers: per layer a forward and a reversed FRnn, outputs concatenated.

  Attributes:
    frnn_tpl: the FRnn config (each direction gets num_output_nodes // 2).
    num_layers: how many layers.
    num_input_nodes: input dim of the first layer.
    num_output_nodes: output dim of every layer (both directions together).
  """

  frnn_tpl: base_hyperparams.Config | None = base_hyperparams.template_field(None)
  num_layers: int = 1
  num_input_nodes: int = 0
  num_output_nodes: int = 0

  def setup(self):
    if self.num_layers <= 0 or self.frnn_tpl is None:
      raise ValueError("StackBiFrnn needs frnn_tpl and num_layers > 0.")
    half = self.num_output_nodes // 2
    dims = [self.num_input_nodes] + [self.num_output_nodes] * (self.num_layers - 1)
    self.create_children("fwd_frnn", [_frnn_config(self.frnn_tpl, d, half, False) for d in dims])
    self.create_children("bwd_frnn", [_frnn_config(self.frnn_tpl, d, half, True) for d in dims])

  def fwd_init_states(self, batch_size: int) -> list[NestedMap]:
    return [self.fwd_frnn[i].init_states(batch_size) for i in range(self.num_layers)]

  def bwd_init_states(self, batch_size: int) -> list[NestedMap]:
    return [self.bwd_frnn[i].init_states(batch_size) for i in range(self.num_layers)]

  def init_states(self, batch_size: int) -> NestedMap:
    return NestedMap(fwd=self.fwd_init_states(batch_size), bwd=self.bwd_init_states(batch_size))

  def __call__(
    self, inputs: NestedMap, state0: NestedMap | None = None
  ) -> tuple[JTensor, list[NestedMap]]:
    """-> (act [B, T, num_output_nodes], per layer NestedMap(fwd=..., bwd=...))."""
    inputs = _copy_inputs(inputs)
    if not state0:
      state0 = self.init_states(inputs.padding.shape[0])
    final_states = []
    for i in range(self.num_layers):
      fwd_act, fwd_state = self.fwd_frnn[i](inputs=inputs, state0=state0.fwd[i])
      bwd_act, bwd_state = self.bwd_frnn[i](inputs=inputs, state0=state0.bwd[i])
      inputs.act = jnp.concatenate([fwd_act, bwd_act], axis=-1)
      final_states.append(NestedMap(fwd=fwd_state, bwd=bwd_state))
    return inputs.act, final_states


# Pax's module-level names for the types and variable collections this module's API uses.
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
