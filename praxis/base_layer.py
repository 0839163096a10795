"""`BaseLayer`: what every praxis layer shares.

A layer is a Flax linen module whose dataclass fields are its hyperparameters, so

    Linear.HParams.config(input_dims=4, output_dims=8)

gives a Fiddle config (see base_hyperparams) and building it gives the module. Layers create their
weights and children in `setup` and compute in `__call__`.

Sharding is data, not code in the layers: every weight and every large activation is annotated with
*logical* axis names, and one rules table (praxis.sharding) maps them to the mesh axes
(`replica`, `data`, `mdl`). The names used across praxis:

    batch    examples in a batch           length   sequence positions
    embed    model dims (d_model)          mlp      feed-forward hidden dims
    heads    attention heads               kv       per-head dims
    vocab    vocabulary                    layers   the stacked leading axis of repeated layers
    kv_heads key/value heads (grouped-query attention); classes  classifier outputs

Without a mesh and rules in context the annotations do nothing, so a layer runs unchanged on one
device.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from praxis import base_hyperparams

Axes = tuple[str | None, ...]
Initializer = Callable[[jax.Array, Sequence[int], Any], jax.Array]

# Flax collections praxis layers write besides "params".
SUMMARIES = "summaries"
AUX_LOSS = "aux_loss"


@dataclasses.dataclass(frozen=True)
class WeightInit:
  """How a weight is initialised: Pax's `WeightInit` methods, on jax.nn.initializers.

  `fan_in` is the product of all dims but the last, `fan_out` the last dim, which is right for the
  praxis weight layouts where the output dims come last (`w[in, out]`, `w[d, n, h]` is the exception
  handled by passing `fan_in_axes` to `create_variable`).
  """

  method: str = "xavier"
  scale: float = 1.0

  _METHODS = ("gaussian", "uniform", "xavier", "constant", "gaussian_sqrt_fanin",
              "gaussian_sqrt_fanout", "truncated_gaussian")

  def __post_init__(self):
    if self.method not in self._METHODS:
      raise ValueError(f"WeightInit method {self.method!r} is not one of {self._METHODS}.")

  @classmethod
  def Gaussian(cls, scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return cls("gaussian", scale)

  @classmethod
  def Uniform(cls, scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return cls("uniform", scale)

  @classmethod
  def Xavier(cls, scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return cls("xavier", scale)

  @classmethod
  def Constant(cls, scale: float = 0.0) -> WeightInit:  # pylint: disable=invalid-name
    return cls("constant", scale)

  @classmethod
  def GaussianSqrtFanIn(cls, scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return cls("gaussian_sqrt_fanin", scale)

  def initializer(self, fan_in: int, fan_out: int) -> Initializer:
    scale = self.scale
    if self.method == "constant":
      return lambda key, shape, dtype: jnp.full(shape, scale, dtype)
    if self.method == "gaussian":
      std = scale
    elif self.method == "gaussian_sqrt_fanin":
      std = scale / math.sqrt(max(fan_in, 1))
    elif self.method == "gaussian_sqrt_fanout":
      std = scale / math.sqrt(max(fan_out, 1))
    elif self.method == "truncated_gaussian":
      return lambda key, shape, dtype: scale * jax.random.truncated_normal(key, -2, 2, shape, dtype)
    elif self.method == "uniform":
      return lambda key, shape, dtype: jax.random.uniform(key, shape, dtype, -scale, scale)
    else:  # xavier (Glorot uniform): limit sqrt(6 / (fan_in + fan_out)), times scale.
      limit = scale * math.sqrt(6.0 / max(fan_in + fan_out, 1))
      return lambda key, shape, dtype: jax.random.uniform(key, shape, dtype, -limit, limit)
    return lambda key, shape, dtype: std * jax.random.normal(key, shape, dtype)


class BaseLayer(base_hyperparams.HParamsMixin, nn.Module):
  """Base class of praxis layers.

  Attributes:
    dtype: dtype of the weights.
    fprop_dtype: dtype of the activations (the computation); None means `dtype`. bfloat16 here
      with float32 weights is the usual mixed-precision setting.
    params_init: default initialiser of this layer's weights (a weight may choose its own).
  """

  dtype: Any = jnp.float32
  fprop_dtype: Any = None
  params_init: WeightInit = WeightInit.Xavier()

  # What create_child copies onto each child layer; model_params.txt shows these values on the
  # children (base_hyperparams.nested_struct_to_text). A plain class attribute, not a field.
  hparams_inherited_by_children = ("dtype", "fprop_dtype")

  @property
  def compute_dtype(self) -> Any:
    return self.dtype if self.fprop_dtype is None else self.fprop_dtype

  def create_child(self, template: base_hyperparams.Config, **overrides) -> Any:
    """Builds a child from its template, in `setup`: `self.ffn = self.create_child(self.ffn_tpl)`.

    The child inherits this layer's dtype and fprop_dtype (as in Pax, where they are set once on
    the root), then `overrides` are applied; the template itself is left unchanged.
    """
    if template is None:
      raise ValueError(f"{type(self).__name__}: a child template is None; set it in the config.")
    cfg = template.clone()
    target = cfg.__fn_or_cls__
    if isinstance(target, type) and issubclass(target, BaseLayer):
      for name in self.hparams_inherited_by_children:
        setattr(cfg, name, getattr(self, name))
    for name, value in overrides.items():
      setattr(cfg, name, value)
    return base_hyperparams.instantiate(cfg)

  def create_variable(self, name: str, shape: Sequence[int], axes: Axes, *,
                      init: WeightInit | None = None, dtype: Any = None,
                      fan_in_axes: Sequence[int] | None = None) -> jax.Array:
    """Creates (or reads) the weight `name` with logical `axes`, one name per dim.

    `fan_in_axes` are the dims that are summed over when the weight is applied (default: all but
    the last); they decide the scale of fan-based initialisers.
    """
    shape = tuple(int(d) for d in shape)
    if len(axes) != len(shape):
      raise ValueError(f"{type(self).__name__}.{name}: {len(axes)} logical axes {axes} for a "
                       f"weight of rank {len(shape)} {shape}; give one name (or None) per dim.")
    fan_in_axes = tuple(range(len(shape) - 1)) if fan_in_axes is None else tuple(fan_in_axes)
    fan_in = math.prod(shape[i] for i in fan_in_axes) if shape else 1
    fan_out = math.prod(shape) // max(fan_in, 1) if shape else 1
    initializer = (init or self.params_init).initializer(fan_in, fan_out)
    return self.param(name, nn.with_logical_partitioning(initializer, axes), shape,
                      dtype or self.dtype)

  def maybe_shard(self, x: jax.Array, axes: Axes) -> jax.Array:
    """Constrains activation `x` to the mesh placement the rules give its logical `axes`."""
    if len(axes) != x.ndim:
      raise ValueError(f"{type(self).__name__}: {len(axes)} logical axes {axes} for an "
                       f"activation of shape {x.shape}.")
    return nn.with_logical_constraint(x, axes)

  def add_summary(self, name: str, value: jax.Array) -> None:
    """Records a scalar or tensor for TensorBoard (collection "summaries"; ignored unless mutable)."""
    self.sow(SUMMARIES, name, value)

  def add_aux_loss(self, name: str, value: jax.Array, weight: jax.Array | float = 1.0) -> None:
    """Adds an auxiliary loss (e.g. a z-loss) that the model adds to its total loss."""
    self.sow(AUX_LOSS, name, (value, jnp.asarray(weight, jnp.float32)))
