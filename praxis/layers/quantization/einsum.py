"""Pax's quantized Einsum layer: einsum(eqn, inputs, w) (+ b), w quantized per output channel.

`eqn` is 'inputs,w->out' (e.g. '...d,df->...f'); w's fan-in dims are those the
output drops, its fan-out dims those only w has. The quantized weight's scale
(and the optional bias `b`) has the fan-out dims' sizes in output order; with a
bias those dims must end the output.
"""

from __future__ import annotations

from typing import Sequence

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers.quantization import quantizer

JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field


class Einsum(quantizer.QuantizationLayer):
  """Quantized einsum with a weight, optionally plus a bias.

  Attributes:
    eqn: 'inputs,w->out' einsum equation; w's part may not use '...'.
    w_shape: shape of w.
    use_bias: add a bias over the fan-out dims.
  """

  eqn: str = ""
  w_shape: Sequence[int] = ()
  use_bias: bool = False
  _PACK_4BIT_DIM = 0

  def setup(self) -> None:
    operands, out = self.eqn.split("->")
    x, w = operands.split(",")
    if "." in w:
      raise ValueError(f'Einsum eqn {self.eqn!r}: the weight operand cannot use "...".')
    fan_in = sorted(w.index(c) for c in set(x) - set(out))
    fan_out = sorted(w.index(c) for c in set(out) - set(x))
    wt = self.weight_split_dims_mapping.wt
    weight = base_layer.WeightHParams(
      shape=list(self.w_shape),
      fan_in_axes=fan_in,
      fan_out_axes=fan_out,
      mesh_shape=self.mesh_shape,
      tensor_split_dims_mapping=wt,
    )
    out_dims = sorted(out.index(c) for c in set(out) - set(x))  # fan-out dims in out
    bias_shape = [self.w_shape[w.index(out[d])] for d in out_dims]
    self.set_up_weights(weight_name="w", weight_params=weight, scale_shape=bias_shape)
    if self.use_bias:
      if any(d < len(out) - len(out_dims) for d in out_dims):
        raise ValueError(
          f"Einsum eqn {self.eqn!r}: with use_bias the weight-only output dims "
          "must come last in the output."
        )
      b_sharding = None if wt is None else [wt[w.index(out[d])] for d in out_dims]
      self.create_variable(
        "b",
        base_layer.WeightHParams(
          shape=bias_shape,
          init=base_layer.WeightInit.Constant(0.0),
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=b_sharding,
        ),
      )

  def __call__(self, inputs: JTensor) -> JTensor:
    out = self.quantized_einsum(eqn=self.eqn, x=inputs, w=self.theta.w, reshape=[])
    if self.use_bias:
      out = out + self.theta.b
    return base_layer.maybe_shard(out, self.activation_split_dims_mapping.out, self.mesh_axis_names)
