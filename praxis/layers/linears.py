"""Dense layers: Linear, Bias, FeedForward (linear + bias + activation) and MLPBlock.

Shape letters: `...` any leading dims (usually [B, T]), I input dims, O output dims.

    ff = FeedForward.HParams.config(input_dims=8, output_dims=16,
                                    activation_tpl=activations.GELU.HParams())
    layer = ff.Instantiate()
    variables = layer.init(jax.random.key(0), x)   # params: linear.w [8, 16], bias.b [16]
"""

from __future__ import annotations

from typing import Any

import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import base_ops
from praxis.layers.stacking import StackingOverTime  # pylint: disable=unused-import
from praxis import py_utils
from praxis import pytypes

template_field = base_hyperparams.template_field


class Linear(base_layer.BaseLayer):
  """y = x @ w with the weight `w[input_dims, output_dims]` (no bias; see Bias, FeedForward).

  Attributes:
    input_dims: size of the last input dim.
    output_dims: size of the last output dim.
    weight_init: initialiser of `w`; None takes the layer's params_init (Pax).
    einsum_tpl: the einsum op (Pax's base_ops.EinsumOp; swap it for a custom einsum).
    weight_axes: ours: logical axis names of `w`, one per dim, for the trainer's rules table.
      The default suits an up-projection (model dims in, hidden dims out); a down-projection
      says ("mlp", "embed"). Pax's `weight_split_dims_mapping.wt` (mesh axes) takes precedence
      when the layer has mesh_axis_names.
  """

  input_dims: int = 0
  output_dims: int = 0
  weight_init: base_layer.WeightInit | None = None
  einsum_tpl: base_hyperparams.Config = template_field(base_ops.EinsumOp)
  weight_axes: tuple[str | None, str | None] = ("embed", "mlp")

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Pax's: `out` for [B, T, O] outputs, `extend_step_out` for [B, O] ones."""

    extend_step_out: Any = None

  def setup(self):
    if self.input_dims <= 0 or self.output_dims <= 0:
      raise ValueError(
        f"Linear needs positive input_dims and output_dims, got "
        f"{self.input_dims} and {self.output_dims}; set them on the config."
      )
    self.create_variable(
      "w",
      base_layer.WeightHParams(
        shape=[self.input_dims, self.output_dims],
        init=self.weight_init,
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        logical_axes=tuple(self.weight_axes),
      ),
    )
    self.create_child("einsum", self.einsum_tpl.clone())

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[-1] != self.input_dims:
      raise ValueError(f"Linear expects inputs [..., {self.input_dims}], got {inputs.shape}.")
    # Ours: the inputs are cast to fprop_dtype as well as the weight (Pax casts only the
    # weight, so float32 inputs promote a bfloat16 layer's output to float32).
    out = self.einsum("...y,yz->...z", inputs.astype(self.fprop_dtype), self.theta.w)
    ap = self.activation_split_dims_mapping
    ap_out = ap.out
    if out.ndim == 2:
      if getattr(ap, "extend_step_out", None) is not None and len(ap.extend_step_out) == 2:
        ap_out = ap.extend_step_out
      elif ap_out is not None and len(ap_out) == 3:
        ap_out = [ap_out[0], ap_out[2]]
    return base_layer.maybe_shard(out, ap_out, self.mesh_axis_names)  # [..., O]


class Bias(base_layer.BaseLayer):
  """y = x + b with the weight `b[dims]`, broadcast over the leading dims.

  Attributes:
    dims: size of the last input dim.
    bias_init: initial value of every entry of `b`.
    weight_axes: ours: logical axis name of `b`.
  """

  dims: int = 0
  bias_init: float | None = 0.0
  weight_axes: tuple[str | None] = ("mlp",)

  def setup(self):
    if self.dims <= 0:
      raise ValueError(f"Bias needs positive dims, got {self.dims}; set it on the config.")
    self.create_variable(
      "b",
      base_layer.WeightHParams(
        shape=[self.dims],
        init=base_layer.WeightInit.Constant(self.bias_init),
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        logical_axes=tuple(self.weight_axes),
      ),
    )

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[-1] != self.dims:
      raise ValueError(f"Bias expects inputs [..., {self.dims}], got {inputs.shape}.")
    return inputs.astype(self.fprop_dtype) + self.theta.b


class FeedForward(base_layer.BaseLayer):
  """y = activation(x @ w + b): a Linear, an optional Bias and an activation.

  The children are named `linear`, `bias` and `activation` (so the weights are
  `linear.w` and `bias.b`). The parent sets the children's sizes from `input_dims` and
  `output_dims`, and its weight_init and bias_init; anything else on the templates is kept.

  Attributes:
    input_dims: size of the last input dim.
    output_dims: size of the last output dim.
    has_bias: whether to add a bias before the activation.
    linear_tpl: template of the projection.
    bias_tpl: template of the bias (used when has_bias).
    activation_tpl: template of the activation; ReLU by default, as in Pax.
    weight_init: initialiser of `linear.w` (None: params_init).
    bias_init: initial value of `bias.b`.
    checkpoint_str: name the projection for remat policies (jax.ad_checkpoint.checkpoint_name).
    weight_axes: ours: logical axes of `linear.w`; the bias uses the last of them.
  """

  input_dims: int = 0
  output_dims: int = 0
  has_bias: bool = True
  linear_tpl: base_hyperparams.Config = template_field(Linear)
  bias_tpl: base_hyperparams.Config = template_field(Bias)
  activation_tpl: base_hyperparams.Config = template_field(activations.ReLU)
  weight_init: base_layer.WeightInit | None = None
  bias_init: float | None = 0.0
  checkpoint_str: str | None = None
  weight_axes: tuple[str | None, str | None] = ("embed", "mlp")

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Pax's: `out` for [B, T, O] outputs, `extend_step_out` for [B, O] ones."""

    extend_step_out: Any = None

  def setup(self):
    wp, ap = self.weight_split_dims_mapping, self.activation_split_dims_mapping
    linear_p = self.linear_tpl.clone().set(
      input_dims=self.input_dims,
      output_dims=self.output_dims,
      weight_init=self.weight_init,
      weight_axes=self.weight_axes,
    )
    if isinstance(wp, base_hyperparams.Config):
      linear_p.weight_split_dims_mapping.wt = wp.wt
    if isinstance(ap, base_hyperparams.Config):
      linear_p.activation_split_dims_mapping.out = ap.out
    self.create_child("linear", linear_p)
    if self.has_bias:
      bias_p = self.bias_tpl.clone().set(
        dims=self.output_dims, bias_init=self.bias_init, weight_axes=(self.weight_axes[-1],)
      )
      if self.mesh_shape is not None and ap.out is not None:
        bias_p.weight_split_dims_mapping.wt = [ap.out[-1]]
      self.create_child("bias", bias_p)
    self.create_child("activation", self.activation_tpl.clone())

  def __call__(self, inputs: jax.Array) -> jax.Array:
    projected = self.linear(inputs)  # [..., O]
    if self.checkpoint_str is not None:
      projected = checkpoint_name(projected, self.checkpoint_str)
    if self.has_bias:
      projected = self.bias(projected)
    return self.activation(projected)


def project_last_dim(inputs: jax.Array, weight: jax.Array) -> jax.Array:
  """inputs [..., I] @ weight [I, O] -> [..., O] (Pax's helper)."""
  if inputs.shape[-1] != weight.shape[0]:
    raise ValueError(
      f"project_last_dim: inputs {inputs.shape} and weight {weight.shape} "
      "disagree on the contracted dim."
    )
  return jnp.einsum("...y,yz->...z", inputs, weight)


class MLPBlock(base_layer.BaseLayer):
  """Pax's MLPBlock: `num_layers` FeedForward layers, ff_tpl.input_dims -> hidden_dims -> ... ->
  ff_tpl.output_dims.

  As in Pax, every layer applies ff_tpl's activation, the last one too unless
  `activate_final=False` (then the last layer's activation is Identity).

  Weight axes: the first layer keeps the template's `weight_axes` (default ("embed", "mlp"));
  hidden-to-hidden layers use (None, "mlp") and the last of several layers ("mlp", None), so no
  weight names one logical axis twice (which a sharding rule could not place).

  Attributes:
    num_layers: number of FeedForward layers (>= 1); children `mlp_layers_0`, `mlp_layers_1`, ...
    hidden_dims: output size of every layer but the last.
    activate_final: whether the last layer applies the activation.
    ff_tpl: template of each layer (activation, bias, ...); its input_dims / output_dims size the
      first layer's input and the last layer's output.
  """

  num_layers: int = 3
  hidden_dims: int = 128
  activate_final: bool = True
  ff_tpl: base_hyperparams.Config = template_field(FeedForward)

  def setup(self):
    if self.num_layers < 1:
      raise ValueError(f"MLPBlock needs num_layers >= 1, got {self.num_layers}.")
    last = self.num_layers - 1
    dims = [self.ff_tpl.input_dims] + [self.hidden_dims] * last + [self.ff_tpl.output_dims]
    templates = []
    for i in range(self.num_layers):
      cfg = self.ff_tpl.clone()
      cfg.input_dims, cfg.output_dims = dims[i], dims[i + 1]
      if i > 0:
        cfg.weight_axes = ("mlp", None) if i == last else (None, "mlp")
      if i == last and not self.activate_final:
        cfg.activation_tpl = pax_fiddle.Config(activations.Identity)
      templates.append(cfg)
    self.create_children("mlp_layers", templates)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    outputs = inputs
    for layer in self.mlp_layers:
      outputs = layer(outputs)  # [..., hidden_dims], the last [..., ff_tpl.output_dims]
    return outputs


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NestedMap = py_utils.NestedMap
SplitDimsMapping = pytypes.SplitDimsMapping
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
