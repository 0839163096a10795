"""Einsum: a layer holding one weight `w` contracted with its input by an einsum equation."""

from __future__ import annotations

from collections.abc import Sequence

import jax

from praxis import base_layer
from praxis.layers import base_ops
from praxis import pax_fiddle
from praxis import pytypes

template_field = base_layer.template_field


class Einsum(base_layer.BaseLayer):
  """jnp.einsum(eqn, inputs, w) (+ b): fan-in / fan-out / bias dims read off the equation.

  Letters of `w` found in the input but not the output are its fan-in dims; letters in the
  output but not the input are its fan-out dims (these set the scale of fan-based inits). With
  use_bias, the bias `b` has the fan-out dims, which must be the last dims of the output.

  Attributes:
    eqn: 'input,w->output', e.g. '...d,df->...f' (no ellipsis in w).
    w_shape: shape of the weight `w`.
    use_bias: add a zero-initialised bias `b`.
    einsum_op_tpl: the op child `einsum` that computes the einsum (an injection point).
  """

  eqn: str = ""
  w_shape: Sequence[int] = ()
  use_bias: bool = False
  einsum_op_tpl: base_layer.LayerTpl = template_field(base_ops.EinsumOp)

  def _letters(self) -> tuple[str, str, str]:
    try:
      operands, out = self.eqn.split("->")
      x, w = operands.split(",")
    except ValueError:
      raise ValueError(
        f"Einsum eqn must read 'input,w->output' (e.g. '...d,df->...f'), got {self.eqn!r}."
      ) from None
    if "." in w:
      raise ValueError(f"Einsum eqn {self.eqn!r}: the weight's operand can't have an ellipsis.")
    if len(w) != len(self.w_shape):
      raise ValueError(
        f"Einsum eqn {self.eqn!r} names {len(w)} weight dims, w_shape is {self.w_shape}."
      )
    return x, w, out

  def setup(self) -> None:
    x, w, out = self._letters()
    fan_in = sorted(w.index(d) for d in set(w) & (set(x) - set(out)))
    fan_out = sorted(w.index(d) for d in set(w) & (set(out) - set(x)))
    wt = self.weight_split_dims_mapping.wt
    self.create_variable(
      "w",
      base_layer.WeightHParams(
        shape=self.w_shape,
        fan_in_axes=fan_in,
        fan_out_axes=fan_out,
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=wt,
      ),
    )
    if self.use_bias:
      # Output positions that come from w alone, in output order.
      bias_dims = sorted(out.index(d) for d in set(out) - set(x))
      if any(d < len(out) - len(bias_dims) for d in bias_dims):
        raise ValueError(
          f"Einsum eqn {self.eqn!r}: with use_bias the weight-only output dims must come last."
        )
      self.create_variable(
        "b",
        base_layer.WeightHParams(
          shape=[self.w_shape[w.index(out[d])] for d in bias_dims],
          init=base_layer.WeightInit.Constant(0.0),
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=(
            None if wt is None else [wt[w.index(out[d])] for d in bias_dims]
          ),
        ),
      )
    self.create_child("einsum", self.einsum_op_tpl.clone())

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs as the equation's first operand -> the equation's output."""
    out = self.einsum(self.eqn, inputs, self.theta.w)
    if self.use_bias:
      out = out + self.theta.b
    return base_layer.maybe_shard(out, self.activation_split_dims_mapping.out, self.mesh_axis_names)


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
