"""Activation layers: weightless modules with `__call__(x) -> x'` of the same shape and dtype.

They are layers (not plain functions) so that a parent can take one as a template,
`activation_tpl = activations.GELU.HParams(approximate=False)`, and the choice prints in
model_params.txt like every other hyperparameter. Pass the class or its config; where a name
must be looked up (a command-line flag, say), `activation_config(name)` lists what exists.

Layers:
  Identity, ReLU, ReLU6, SquaredReLU, LeakyReLU, ELU, GELU (exact or tanh approximation),
  SiLU, Swish (x * sigmoid(beta * x)), Sigmoid, Tanh, Softplus.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import pytypes


class BaseActivation(base_layer.BaseLayer):
  """An activation: no weights, elementwise, keeps the input's shape and dtype."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    raise NotImplementedError(f"{type(self).__name__} must implement __call__.")

  @classmethod
  def get_subclass_by_name(cls, name: str) -> type[BaseActivation]:
    """The direct subclass named `name` (case-insensitive, underscores ignored; Pax's)."""
    wanted = name.replace("_", "").lower()
    found = [sub for sub in cls.__subclasses__() if sub.__name__.lower() == wanted]
    if len(found) != 1:
      names = sorted(sub.__name__ for sub in cls.__subclasses__())
      raise KeyError(f"{len(found)} activation layers named {name!r}; the activations are {names}.")
    return found[0]


class Identity(BaseActivation):
  """Returns the input unchanged (for a linear output layer)."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return inputs


class ReLU(BaseActivation):
  """max(x, 0)."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jax.nn.relu(inputs)


class ReLU6(BaseActivation):
  """min(max(x, 0), 6)."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jax.nn.relu6(inputs)


class SquaredReLU(BaseActivation):
  """relu(x)**2 (So et al., "Primer", 2021)."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jnp.square(jax.nn.relu(inputs))


class LeakyReLU(BaseActivation):
  """x for x >= 0, negative_slope * x otherwise.

  Attributes:
    negative_slope: slope for negative inputs.
  """

  negative_slope: float = 0.01

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jax.nn.leaky_relu(inputs, self.negative_slope)


class ELU(BaseActivation):
  """x for x > 0, alpha * (exp(x) - 1) otherwise.

  Attributes:
    alpha: the value the activation approaches for large negative inputs is -alpha.
  """

  alpha: float = 1.0

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jax.nn.elu(inputs, self.alpha)


class GELU(BaseActivation):
  """Gaussian error linear unit, x * Phi(x).

  Attributes:
    approximate: True uses the tanh approximation
      0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as Pax does by default (and BERT/GPT-2);
      False uses the exact 0.5 x (1 + erf(x / sqrt(2))).
  """

  approximate: bool = True

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jax.nn.gelu(inputs, approximate=self.approximate)


class SiLU(BaseActivation):
  """x * sigmoid(x) (also called Swish with beta = 1)."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jax.nn.silu(inputs)


class Swish(BaseActivation):
  """x * sigmoid(beta * x) (Ramachandran et al., 2017); beta = 1 is SiLU.

  Attributes:
    beta: the fixed (not learned) slope inside the sigmoid.
  """

  beta: float = 1.0

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return inputs * jax.nn.sigmoid(self.beta * inputs)


class Sigmoid(BaseActivation):
  """1 / (1 + exp(-x))."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jax.nn.sigmoid(inputs)


class Tanh(BaseActivation):
  """tanh(x)."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jnp.tanh(inputs)


class Softplus(BaseActivation):
  """log(1 + exp(x))."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jax.nn.softplus(inputs)


# Lower-case names for `activation_config`. Configs should hold the class itself; this table
# exists only for places where a string is all there is (flags, legacy configs).
_BY_NAME: dict[str, type[BaseActivation]] = {
  "identity": Identity,
  "none": Identity,
  "relu": ReLU,
  "relu6": ReLU6,
  "squared_relu": SquaredReLU,
  "leaky_relu": LeakyReLU,
  "elu": ELU,
  "gelu": GELU,
  "silu": SiLU,
  "swish": Swish,
  "sigmoid": Sigmoid,
  "tanh": Tanh,
  "softplus": Softplus,
}


class SineReLU(BaseActivation):
  """sin(relu(x))."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jnp.sin(jax.nn.relu(inputs))


class CubedReLU(BaseActivation):
  """relu(x) ** 3."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    outputs = jax.nn.relu(inputs)
    return outputs * jnp.square(outputs)


class Exp(BaseActivation):
  """exp(x)."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jnp.exp(inputs)


def activation_config(name: str, **kwargs) -> base_hyperparams.Config:
  """Returns the config of the activation called `name` (case-insensitive), e.g. "gelu".

  Raises:
    ValueError: naming the known activations, when `name` is not one of them.
  """
  cls = _BY_NAME.get(name.lower())
  if cls is None:
    raise ValueError(
      f"Unknown activation {name!r}; known names are {sorted(_BY_NAME)}. "
      "Better: pass the class, e.g. activations.GELU.HParams()."
    )
  return cls.HParams.config(**kwargs)


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
