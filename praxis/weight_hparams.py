"""Pax's weight description: `WeightInit`, `WeightHParams`, `init_var` (re-exported by base_layer).

A layer declares each weight with a `WeightHParams` (shape, initialiser, dtype, collections,
sharding) and `BaseLayer.create_variable` turns it into a Flax variable. Sharding comes in two
notations, both kept on the WeightHParams:
  * Pax's `tensor_split_dims_mapping`: one mesh axis name (or None / -1) per dim, meaningful when
    the layer has `mesh_axis_names`;
  * this project's `logical_axes`: one logical name per dim ('embed', 'mlp', ...), which the
    trainer maps to mesh axes through its rules table (praxis.sharding).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

SplitDimsMapping = Any


@dataclasses.dataclass
class WeightInit:
  """How a weight is initialised: a method name and a scale (Pax's WeightInit).

  Use the constructors: `WeightInit.Xavier(1.0)`, `WeightInit.Gaussian(0.02)`, ...
  """

  method: str
  scale: float | int

  @staticmethod
  def Gaussian(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale * normal(0, 1)."""
    return WeightInit("gaussian", scale)

  @staticmethod
  def Uniform(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale * uniform(-1, 1)."""
    return WeightInit("uniform", scale)

  @staticmethod
  def Xavier(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale * sqrt(6 / (fan_in + fan_out)) * uniform(-1, 1)."""
    return WeightInit("xavier", scale)

  @staticmethod
  def XavierWithFixupParams(
    scale: float = 1.0,
    depth: float = 1.0,  # pylint: disable=invalid-name
    layers_per_residual_block: float = 1.0,
  ) -> WeightInit:
    """Xavier with the Fixup scale depth^(-1 / (2 * layers_per_residual_block))."""
    return WeightInit("xavier", scale * math.pow(depth, -1.0 / (2 * layers_per_residual_block)))

  @staticmethod
  def Constant(scale: float | int = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """Every entry equals scale."""
    return WeightInit("constant", scale)

  @staticmethod
  def TruncatedGaussian(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale * truncated_normal(-2, 2)."""
    return WeightInit("truncated_gaussian", scale)

  @staticmethod
  def GaussianSqrtDim(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale / sqrt(shape[0]) * normal(0, 1)."""
    return WeightInit("gaussian_sqrt_dim", scale)

  @staticmethod
  def GaussianSqrtFanIn(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale / sqrt(fan_in) * normal(0, 1)."""
    return WeightInit("gaussian_sqrt_fanin", scale)

  @staticmethod
  def GaussianSqrtFanOut(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale / sqrt(fan_out) * normal(0, 1)."""
    return WeightInit("gaussian_sqrt_fanout", scale)

  @staticmethod
  def GaussianSqrtFanAvg(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale * sqrt(2 / (fan_in + fan_out)) * normal(0, 1)."""
    return WeightInit("gaussian_sqrt_fanavg", scale)

  @staticmethod
  def UniformSqrtDim(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale / sqrt(shape[0]) * uniform(-1, 1)."""
    return WeightInit("uniform_sqrt_dim", scale)

  @staticmethod
  def UniformSqrtFanAvg(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """sqrt(3) * scale * sqrt(2 / (fan_in + fan_out)) * uniform(-1, 1)."""
    return WeightInit("uniform_sqrt_fanavg", scale)

  @staticmethod
  def UniformUnitScaling(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    """scale * sqrt(3 / prod(shape[:-1])) * uniform(-1, 1)."""
    return WeightInit("uniform_unit_scaling", scale)

  @staticmethod
  def TruncatedGaussianSqrtDim(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit("truncated_gaussian_sqrt_dim", scale)

  @staticmethod
  def TruncatedGaussianSqrtFanIn(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit("truncated_gaussian_sqrt_fanin", scale)

  @staticmethod
  def TruncatedGaussianSqrtFanOut(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit("truncated_gaussian_sqrt_fanout", scale)

  @staticmethod
  def ScaledDeltaOrthogonal(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit("delta_orthogonal", scale)


# Pax's default initialiser: Xavier with a scale of 1.000001, the tell-tale that a layer kept the
# default (children then inherit their parent's params_init; see BaseLayer.copy_base_hparams).
_DEFAULT_XAVIER_INIT = 1.000001


def _default_param_init() -> WeightInit:
  """Pax's default initialiser: WeightInit.Xavier(1.000001)."""
  return WeightInit("xavier", _DEFAULT_XAVIER_INIT)


def _auto_configured(fn):
  """fn, auto_config'd as Pax's: called, it returns the object; inside a config it gives the
  Config that builds it (`Config(WeightInit, 'xavier', 1.000001)`)."""
  from praxis import pax_fiddle  # pylint: disable=import-outside-toplevel

  return pax_fiddle.auto_config(fn)


default_param_init = _auto_configured(_default_param_init)


def is_default_param_init(p: Any) -> bool:
  return p.method == "xavier" and abs(p.scale - _DEFAULT_XAVIER_INIT) < 1e-7


class WeightHParamsCollection:
  """Names a WeightHParams' `collections` may hold (Pax's)."""

  SKIP_LP_REGULARIZATION = "__lingvo_jax_skip_regularization"
  NON_TRAINABLE = "_lingvo_jax_non_trainable"
  REQUIRES_MEAN_SYNC = "_requires_mean_sync"
  REQUIRES_SUM_SYNC = "_requires_sum_sync"
  DISALLOW_BFLOAT16_CONVERSION = "_disallow_bfloat16_conversion"
  OVERWRITE_WITH_GRADIENT = "_overwrite_with_gradient"


@dataclasses.dataclass
class WeightHParams:
  """A weight's shape, initialiser, dtype, collections and sharding (Pax's WeightHParams).

  Attributes:
    shape: the weight's shape, without `repeat_prefix`.
    init: the initialiser; None takes the layer's `params_init`.
    dtype: None takes the layer's `dtype`.
    collections: WeightHParamsCollection names (non-trainable, skip Lp regularisation, ...).
    mesh_shape: the mesh shape the mapping refers to (informational).
    tensor_split_dims_mapping: Pax's sharding: per dim a mesh axis name (or index, tuple, None,
      -1). Used when the layer has `mesh_axis_names`.
    repeat_prefix: leading dims added by repetition (nn.scan); `full_shape` includes them.
    repeat_prefix_split_dims_mapping: sharding of the repeat_prefix dims.
    repeat_optimizer_dims_mapping: sharding of the optimizer state's repeat_prefix dims.
    fan_in_axes / fan_out_axes: the dims that make up fan-in and fan-out for fan-based inits
      (default: dim -2 and dim -1, times the other dims as a receptive field).
    logical_axes: this project's addition: one logical axis name per dim ('embed', 'mlp', ...,
      or None), mapped to mesh axes by the trainer's rules table when no
      tensor_split_dims_mapping applies.
  """

  shape: Sequence[int]
  init: WeightInit | None = None
  dtype: Any = None
  collections: Sequence[str] | None = None
  mesh_shape: Sequence[int] | None = None
  tensor_split_dims_mapping: SplitDimsMapping = None
  repeat_prefix: Sequence[int] | None = None
  repeat_prefix_split_dims_mapping: SplitDimsMapping = None
  repeat_optimizer_dims_mapping: SplitDimsMapping = None
  fan_in_axes: Sequence[int] | None = None
  fan_out_axes: Sequence[int] | None = None
  logical_axes: Sequence[str | None] | None = None

  def __post_init__(self):
    if self.collections is None:
      self.collections = []
    if self.mesh_shape is not None and self.tensor_split_dims_mapping is None:
      self.tensor_split_dims_mapping = (-1,) * len(self.shape)
    if self.tensor_split_dims_mapping is not None and len(self.tensor_split_dims_mapping) != len(
      self.shape
    ):
      raise ValueError(
        f"tensor_split_dims_mapping {self.tensor_split_dims_mapping} needs one "
        f"entry per dim of shape {tuple(self.shape)}."
      )
    if self.logical_axes is not None and len(self.logical_axes) != len(self.shape):
      raise ValueError(
        f"logical_axes {tuple(self.logical_axes)} needs one name (or None) per "
        f"dim of shape {tuple(self.shape)}."
      )

  @property
  def full_shape(self) -> Sequence[int]:
    return (*(self.repeat_prefix or ()), *self.shape)

  @property
  def full_split_dims_mapping(self) -> SplitDimsMapping:
    mapping = self.tensor_split_dims_mapping or (-1,) * len(self.shape)
    prefix = self.repeat_prefix_split_dims_mapping
    if self.repeat_prefix and prefix is None:
      prefix = (-1,) * len(self.repeat_prefix)
    return (*(prefix or ()), *mapping)


def get_fan_in_fan_out(
  shape: Sequence[int],
  fan_in_axes: Sequence[int] | None = None,
  fan_out_axes: Sequence[int] | None = None,
) -> tuple[Any, Any]:
  """(fan_in, fan_out) as Pax computes them (TF's convention for rank >= 2)."""
  if not shape:
    return None, None
  if len(shape) == 1:
    return shape[0], shape[0]
  if fan_in_axes is None and fan_out_axes is None:
    fan_in_axes, fan_out_axes = [-2], [-1]
    receptive = math.prod(shape[:-2])
  else:
    if fan_in_axes is None or fan_out_axes is None:
      raise ValueError("Give both fan_in_axes and fan_out_axes, or neither.")
    receptive = 1
  fan_in = math.prod(shape[i] for i in fan_in_axes) * receptive
  fan_out = math.prod(shape[i] for i in fan_out_axes) * receptive
  return fan_in, fan_out


def _scaled_orthogonal(key, shape, dtype):
  scale = max(np.sqrt(float(shape[-2]) / shape[-1]), 1)
  return jax.nn.initializers.orthogonal(scale=scale, column_axis=-1, dtype=dtype)(key, shape)


def init_var(var_p: WeightHParams, prng_key: jax.Array, var_full_name: str = "") -> jax.Array:
  """The initial value of a weight (Pax's init_var: same methods, scales and fans)."""
  if var_p.init is None:
    raise ValueError(
      f"{var_full_name}: WeightHParams.init is None; set it or the layer's params_init."
    )
  method, scale = var_p.init.method, var_p.init.scale
  shape, dtype = tuple(var_p.shape), var_p.dtype or jnp.float32
  fans = (var_p.fan_in_axes, var_p.fan_out_axes)
  if shape and any(d <= 0 for d in shape):
    raise ValueError(f"{var_full_name}: every dim must be > 0; shape is {shape}.")
  dim0 = shape[0] if shape else 1
  if method in ("gaussian_sqrt_dim", "uniform_sqrt_dim", "truncated_gaussian_sqrt_dim"):
    scale *= 1.0 / math.sqrt(dim0)
  if method in ("gaussian_sqrt_fanin", "truncated_gaussian_sqrt_fanin"):
    fan_in, _ = get_fan_in_fan_out(shape, *fans)
    if fan_in is not None:
      scale *= 1.0 / math.sqrt(fan_in)
  if method in ("gaussian_sqrt_fanout", "truncated_gaussian_sqrt_fanout"):
    _, fan_out = get_fan_in_fan_out(shape, *fans)
    if fan_out is not None:
      scale *= 1.0 / math.sqrt(fan_out)
  if method in ("gaussian_sqrt_fanavg", "uniform_sqrt_fanavg"):
    fan_in, fan_out = get_fan_in_fan_out(shape, *fans)
    if fan_in is not None and fan_out is not None:
      scale *= math.sqrt(2.0 / (fan_in + fan_out))

  if method == "delta_orthogonal":
    if len(shape) < 2:
      return scale * jax.random.normal(prng_key, shape, dtype)
    if len(shape) == 2:
      return _scaled_orthogonal(prng_key, shape, dtype)
    ortho = _scaled_orthogonal(prng_key, shape[-2:], dtype)
    center = tuple((k - 1) // 2 for k in shape[:-2])
    return jnp.zeros(shape, dtype).at[center].set(ortho)
  if method in (
    "gaussian",
    "gaussian_sqrt_dim",
    "gaussian_sqrt_fanin",
    "gaussian_sqrt_fanout",
    "gaussian_sqrt_fanavg",
  ):
    return scale * jax.random.normal(prng_key, shape, dtype)
  if method in ("uniform", "uniform_sqrt_dim"):
    return scale * jax.random.uniform(prng_key, shape, dtype, minval=-1.0, maxval=1.0)
  if method == "uniform_sqrt_fanavg":
    return math.sqrt(3) * scale * jax.random.uniform(prng_key, shape, dtype, -1.0, 1.0)
  if method in (
    "truncated_gaussian",
    "truncated_gaussian_sqrt_dim",
    "truncated_gaussian_sqrt_fanin",
    "truncated_gaussian_sqrt_fanout",
  ):
    return scale * jax.random.truncated_normal(prng_key, -2.0, 2.0, shape, dtype)
  if method == "constant":
    if jnp.issubdtype(dtype, jnp.integer) and not isinstance(scale, (int, np.integer)):
      raise ValueError(
        f"{var_full_name}: an integer variable ({dtype}) needs an integer constant, got {scale!r}."
      )
    return scale + jnp.zeros(shape, dtype)
  if method == "xavier":
    fan_in, fan_out = get_fan_in_fan_out(shape, *fans)
    if fan_in is None:
      fan_in = fan_out = 1
    limit = scale * math.sqrt(6.0 / (fan_in + fan_out))
    return limit * jax.random.uniform(prng_key, shape, dtype, minval=-1.0, maxval=1.0)
  if method == "uniform_unit_scaling":
    input_size = max(float(math.prod(shape[:-1])), 1.0)
    return (
      math.sqrt(3 / input_size)
      * scale
      * jax.random.uniform(prng_key, shape, dtype, minval=-1.0, maxval=1.0)
    )
  raise ValueError(f"{var_full_name}: unknown WeightInit method {method!r}.")


def var_not_trainable(var_hparams: WeightHParams) -> bool:
  return WeightHParamsCollection.NON_TRAINABLE in var_hparams.collections


def var_skip_lp_regularization(var_hparams: WeightHParams) -> bool:
  return WeightHParamsCollection.SKIP_LP_REGULARIZATION in var_hparams.collections


def var_disallow_bfloat16_conversion(var_hparams: WeightHParams) -> bool:
  return WeightHParamsCollection.DISALLOW_BFLOAT16_CONVERSION in var_hparams.collections


def to_partition_spec(
  split_dims_mapping: SplitDimsMapping, mesh_axis_names: Sequence[str]
) -> jax.sharding.PartitionSpec:
  """Pax's split_dims_mapping (names, indices, -1/None, tuples) as a PartitionSpec."""

  def parse(entry):
    if isinstance(entry, (int, np.integer)):
      return None if entry < 0 else mesh_axis_names[entry]
    if isinstance(entry, str):
      if entry not in mesh_axis_names:
        raise ValueError(f"Mesh axis {entry!r} is not one of {tuple(mesh_axis_names)}.")
      return entry
    if isinstance(entry, (list, tuple)):
      return tuple(parse(e) for e in entry)
    return None

  return jax.sharding.PartitionSpec(*(parse(e) for e in split_dims_mapping))


def var_partition_specs(
  var_specs: Any, mesh_shape: Sequence[int], device_axis_names: Sequence[str]
) -> Any:
  """PartitionSpecs for a tree of WeightHParams (Pax's var_partition_specs)."""
  del mesh_shape
  return jax.tree.map(
    lambda p: to_partition_spec(p.full_split_dims_mapping, device_axis_names),
    var_specs,
    is_leaf=lambda x: isinstance(x, WeightHParams),
  )
