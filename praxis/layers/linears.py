"""Dense layers: Linear, Bias, FeedForward (linear + bias + activation) and MLPBlock.

Shape letters: `...` any leading dims (usually [B, T]), I input dims, O output dims.

    ff = FeedForward.HParams.config(input_dims=8, output_dims=16,
                                    activation_tpl=activations.GELU.HParams())
    layer = ff.Instantiate()
    variables = layer.init(jax.random.key(0), x)   # params: linear.w [8, 16], bias.b [16]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import activations

template_field = base_hyperparams.template_field


class Linear(base_layer.BaseLayer):
  """y = x @ w with the weight `w[input_dims, output_dims]` (no bias; see Bias, FeedForward).

  Attributes:
    input_dims: size of the last input dim.
    output_dims: size of the last output dim.
    weight_axes: logical axis names of `w`, one per dim. The default suits an up-projection
      (model dims in, hidden dims out); a down-projection says ("mlp", "embed").
  """

  input_dims: int = 0
  output_dims: int = 0
  weight_axes: tuple[str | None, str | None] = ("embed", "mlp")

  def setup(self):
    if self.input_dims <= 0 or self.output_dims <= 0:
      raise ValueError(f"Linear needs positive input_dims and output_dims, got "
                       f"{self.input_dims} and {self.output_dims}; set them on the config.")
    self.w = self.create_variable("w", (self.input_dims, self.output_dims), self.weight_axes)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[-1] != self.input_dims:
      raise ValueError(f"Linear expects inputs [..., {self.input_dims}], got {inputs.shape}.")
    w = self.w.astype(self.compute_dtype)
    return jnp.einsum("...i,io->...o", inputs.astype(self.compute_dtype), w)  # [..., O]


class Bias(base_layer.BaseLayer):
  """y = x + b with the weight `b[dims]`, broadcast over the leading dims.

  Attributes:
    dims: size of the last input dim.
    bias_init: initial value of every entry of `b`.
    weight_axes: logical axis name of `b`.
  """

  dims: int = 0
  bias_init: float = 0.0
  weight_axes: tuple[str | None] = ("mlp",)

  def setup(self):
    if self.dims <= 0:
      raise ValueError(f"Bias needs positive dims, got {self.dims}; set it on the config.")
    self.b = self.create_variable("b", (self.dims,), self.weight_axes,
                                  init=base_layer.WeightInit.Constant(self.bias_init))

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[-1] != self.dims:
      raise ValueError(f"Bias expects inputs [..., {self.dims}], got {inputs.shape}.")
    return inputs.astype(self.compute_dtype) + self.b.astype(self.compute_dtype)


class FeedForward(base_layer.BaseLayer):
  """y = activation(x @ w + b): a Linear, an optional Bias and an activation.

  The children are named `linear`, `bias` and `activation` (so the weights are
  `linear.w` and `bias.b`). The parent sets the children's sizes from `input_dims` and
  `output_dims`; anything else on the templates (the activation's `approximate`, a bias init)
  is kept.

  Attributes:
    input_dims: size of the last input dim.
    output_dims: size of the last output dim.
    has_bias: whether to add a bias before the activation.
    weight_axes: logical axes of `linear.w`; the bias uses the last of them.
    linear_tpl: template of the projection.
    bias_tpl: template of the bias (used when has_bias).
    activation_tpl: template of the activation; ReLU by default, as in Pax.
  """

  input_dims: int = 0
  output_dims: int = 0
  has_bias: bool = True
  weight_axes: tuple[str | None, str | None] = ("embed", "mlp")
  linear_tpl: base_hyperparams.Config = template_field(Linear)
  bias_tpl: base_hyperparams.Config = template_field(Bias)
  activation_tpl: base_hyperparams.Config = template_field(activations.ReLU)

  def setup(self):
    self.linear = self.create_child(self.linear_tpl, input_dims=self.input_dims,
                                    output_dims=self.output_dims, weight_axes=self.weight_axes)
    if self.has_bias:
      self.bias = self.create_child(self.bias_tpl, dims=self.output_dims,
                                    weight_axes=(self.weight_axes[-1],))
    self.activation = self.create_child(self.activation_tpl)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    projected = self.linear(inputs)  # [..., O]
    if self.has_bias:
      projected = self.bias(projected)
    return self.activation(projected)


class MLPBlock(base_layer.BaseLayer):
  """`num_layers` FeedForward layers: input_dims -> hidden_dims -> ... -> output_dims.

  As in Pax, every layer applies the template's activation, the last one too; for a linear
  output put the last layer's activation in `last_activation_tpl` (e.g. Identity).

  Weight axes: the first layer keeps the template's `weight_axes` (default ("embed", "mlp"));
  hidden-to-hidden layers use (None, "mlp") and the last of several layers ("mlp", None), so no
  weight names one logical axis twice (which a sharding rule could not place).

  Attributes:
    num_layers: number of FeedForward layers (>= 1); children are `layers_0`, `layers_1`, ...
    input_dims: size of the last input dim.
    hidden_dims: output size of every layer but the last.
    output_dims: output size of the last layer.
    ff_tpl: template of each layer (activation, bias, ...); its sizes are set here.
    last_activation_tpl: if set, replaces the activation of the last layer.
  """

  num_layers: int = 3
  input_dims: int = 0
  hidden_dims: int = 128
  output_dims: int = 0
  ff_tpl: base_hyperparams.Config = template_field(FeedForward)
  last_activation_tpl: base_hyperparams.Config | None = template_field(None)

  def setup(self):
    if self.num_layers < 1:
      raise ValueError(f"MLPBlock needs num_layers >= 1, got {self.num_layers}.")
    dims = [self.input_dims] + [self.hidden_dims] * (self.num_layers - 1) + [self.output_dims]
    layers = []
    for i in range(self.num_layers):
      overrides = dict(input_dims=dims[i], output_dims=dims[i + 1])
      if i == self.num_layers - 1 and i > 0:
        overrides["weight_axes"] = ("mlp", None)
      elif i > 0:
        overrides["weight_axes"] = (None, "mlp")
      if i == self.num_layers - 1 and self.last_activation_tpl is not None:
        overrides["activation_tpl"] = self.last_activation_tpl
      layers.append(self.create_child(self.ff_tpl, **overrides))
    self.layers = layers

  def __call__(self, inputs: jax.Array) -> jax.Array:
    outputs = inputs
    for layer in self.layers:
      outputs = layer(outputs)  # [..., hidden_dims], the last [..., output_dims]
    return outputs
