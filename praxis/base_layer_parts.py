"""Pax's smaller `base_layer` helpers, kept apart so base_layer.py stays about the layer itself.

Everything here is re-exported by `praxis.base_layer` under Pax's names: summary-key helpers,
the WeightHParams collection predicates, the orthogonal initialisers, `var_init_scale`, mesh-axis
transposition, `BoxedParam` / `BoxedPartitionSpec`, `compatible_hparams`, `get_template_fields`.
"""

from __future__ import annotations

import collections.abc
import copy
import enum
import math
from typing import Any, Sequence

from absl import logging
import fiddle as fdl
from flax import struct
import flax.core as flax_core
import jax
import jax.numpy as jnp
import numpy as np

from praxis import jax_context as _jax_context
from praxis import weight_hparams as _wh

AxisMetadata = flax_core.meta.AxisMetadata
TAxisMetadata = flax_core.meta.TAxisMetadata
WeightHParams = _wh.WeightHParams
WeightHParamsCollection = _wh.WeightHParamsCollection

# The pmap axis name under which Pax's layers sync batch statistics across replicas.
PMAP_PARALLEL_AXIS_NAME = "batch"
# Suffixes of the extra weights a quantized / sparsified weight `w` comes with.
QUANTIZED_SCALE_NAME_POSTFIX = "_quantized_scale"
QUANTIZED_ZP_NAME_POSTFIX = "_quantized_zp"
SPARSITY_NAME_POSTFIX = "_sparsity_mask"


# ---- Summaries: the kind of a summary is the suffix of its key ('loss_scalar'). ----


class SummaryType(enum.Enum):
  """Kinds of summaries (Pax's values). AGGREGATE_* are SCALAR / IMAGE data that are safe to
  report from sensitive inputs."""

  SCALAR = 1
  IMAGE = 2
  TEXT = 5
  AUDIO = 6
  VIDEO = 7
  HISTOGRAM = 8
  AGGREGATE_SCALAR = 3
  AGGREGATE_IMAGE = 4


def get_summary_base_type(summary_type: SummaryType) -> SummaryType:
  """SCALAR for AGGREGATE_SCALAR, IMAGE for AGGREGATE_IMAGE, the type itself otherwise."""
  return {
    SummaryType.AGGREGATE_SCALAR: SummaryType.SCALAR,
    SummaryType.AGGREGATE_IMAGE: SummaryType.IMAGE,
  }.get(summary_type, summary_type)


def get_summary_type_suffix(summary_type: SummaryType) -> str:
  return "_" + summary_type.name.lower()


def _types_longest_suffix_first() -> list[SummaryType]:
  # 'x_aggregate_scalar' also ends in '_scalar': try the longer suffixes first.
  return sorted(SummaryType, key=lambda t: len(t.name), reverse=True)


def get_summary_type_from_key(key: str) -> SummaryType:
  """The SummaryType whose suffix ends `key`."""
  for summary_type in _types_longest_suffix_first():
    if key.endswith(get_summary_type_suffix(summary_type)):
      return summary_type
  raise ValueError(
    f"Cannot parse summary type from key: {key} (a summary key ends in "
    f"one of {[get_summary_type_suffix(t) for t in SummaryType]})."
  )


def trim_summary_type_from_key(key: str) -> str:
  """`key` without its summary-type suffix ('loss_scalar' -> 'loss')."""
  suffix = get_summary_type_suffix(get_summary_type_from_key(key))
  return key[: -len(suffix)]


# ---- WeightHParams collections ----


def var_requires_mean_sync(var_hparams: WeightHParams) -> bool:
  """Whether the variable is averaged across replicas (e.g. batch-norm moving statistics)."""
  return WeightHParamsCollection.REQUIRES_MEAN_SYNC in var_hparams.collections


def var_requires_sum_sync(var_hparams: WeightHParams) -> bool:
  """Whether the variable is summed across replicas."""
  return WeightHParamsCollection.REQUIRES_SUM_SYNC in var_hparams.collections


def var_overwrite_with_gradient(var_hparams: WeightHParams) -> bool:
  """Whether the variable is replaced by its gradient each step (`x = grad`) instead of being
  updated by the learner (used for fp8 scales)."""
  return WeightHParamsCollection.OVERWRITE_WITH_GRADIENT in var_hparams.collections


# ---- Initialisers ----


def scaled_orthogonal(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32):
  """An orthogonal matrix over the last two dims, scaled by max(sqrt(rows / cols), 1)."""
  scale = max(np.sqrt(float(shape[-2]) / shape[-1]), 1)
  return jax.nn.initializers.orthogonal(scale=scale, column_axis=-1, dtype=dtype)(key, shape)


def scaled_delta_orthogonal(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32):
  """A 1-, 2- or 3-D convolution kernel that is zero except at its spatial centre, which holds
  a scaled orthogonal [in, out] matrix (delta-orthogonal init, arXiv:1806.05393)."""
  if len(shape) not in (3, 4, 5):
    raise ValueError(
      f"scaled_delta_orthogonal needs a 3-D, 4-D or 5-D kernel shape, got "
      f"{tuple(shape)} ([spatial..., in, out])."
    )
  centre = tuple((k - 1) // 2 for k in shape[:-2])
  kernel = jnp.zeros(shape, dtype=dtype)
  return kernel.at[centre].set(scaled_orthogonal(key, shape[-2:], dtype=dtype))


def var_init_scale(var_p: WeightHParams, var_key: str | None = None) -> float:
  """The standard deviation scale `init_var` uses for this weight ('gaussian',
  'gaussian_sqrt_fanin' and 'xavier' only), for optimizers that scale updates by it."""
  if var_p is None or var_p.init is None:
    raise ValueError(f"var_init_scale({var_key}): the weight has no init.")
  method, scale = var_p.init.method, var_p.init.scale
  if method == "gaussian":
    return scale
  if method not in ("gaussian_sqrt_fanin", "xavier"):
    raise NotImplementedError(
      f"var_init_scale: init method {method!r} is not supported "
      "(only 'gaussian', 'gaussian_sqrt_fanin', 'xavier')."
    )
  fan_in, fan_out = _wh.get_fan_in_fan_out(var_p.shape, var_p.fan_in_axes, var_p.fan_out_axes)
  if method == "gaussian_sqrt_fanin":
    scale *= 1.0 / math.sqrt(fan_in)
  else:
    scale *= math.sqrt(6.0 / (fan_in + fan_out))
  logging.info(
    "var_init_scale %s %s fan_in %d fan_out %d: %f",
    var_key or "unset_var_key",
    method,
    fan_in,
    fan_out,
    scale,
  )
  return scale


# ---- Mesh axes ----


def is_running_under_pmap() -> bool:
  """Whether the caller runs inside `jax.pmap(..., axis_name=PMAP_PARALLEL_AXIS_NAME)`."""
  try:
    jax.lax.axis_index(PMAP_PARALLEL_AXIS_NAME)
  except NameError:
    return False
  return True


def transpose_one_axis(axis: str | None, mesh_axes_transpose: dict[str, str] | None):
  """`axis` renamed through `mesh_axes_transpose` (unchanged when absent or None)."""
  if mesh_axes_transpose is None or axis is None:
    return axis
  return mesh_axes_transpose.get(axis, axis)


def maybe_transpose_mesh_axes(partition_spec: jax.sharding.PartitionSpec):
  """`partition_spec` with its mesh axes renamed by the JaxContext's `mesh_axes_transpose`."""
  context = _jax_context.JaxContext.top()
  mapping = context.hparams.mesh_axes_transpose if context is not None else None
  if not mapping:
    return partition_spec

  def rename(axes):
    if axes == jax.sharding.PartitionSpec.UNCONSTRAINED:
      return axes
    if axes is None or isinstance(axes, str):
      return transpose_one_axis(axes, mapping)
    return tuple(a for a in (rename(x) for x in axes) if a)

  return jax.sharding.PartitionSpec(*[rename(axes) for axes in partition_spec])


# ---- Boxes ----


@struct.dataclass
class BoxedPartitionSpec:
  """A PartitionSpec held as static metadata (`meta`), so a tree of them is a pytree with no
  leaves: Pax's quantized_partition_specs return these."""

  meta: Any = struct.field(pytree_node=False)


def _shift_axes(axes, by):
  return [i if i < 0 else i + by for i in axes] if axes else axes


@struct.dataclass
class BoxedParam(struct.PyTreeNode, AxisMetadata):
  """A variable's value with its WeightHParams (`meta`, static), Pax's box.

  Under `nn.scan` / `nn.vmap` (Pax's repeats) the stacked axis is recorded in the meta:
  `add_axis` prepends `x_times` to `repeat_prefix` and the sub-weight / optimizer mappings, and
  shifts fan-in / fan-out axes; `remove_axis` undoes it.
  """

  value: Any
  meta: WeightHParams = struct.field(pytree_node=False)

  def __post_init__(self):
    if isinstance(self.value, BoxedParam):
      raise ValueError("BoxedParam: cannot box a BoxedParam again.")

  def unbox(self, apply_constraint=True) -> Any:
    del apply_constraint  # Pax's boxes carry no sharding constraint
    return self.value

  def replace_boxed(self, val: Any) -> BoxedParam:
    return self.replace(value=val)

  @staticmethod
  def _axis_params(index, params):
    if index != 0:
      raise ValueError(
        f"BoxedParam: only the leading axis (index 0) can be added or removed, got index={index}."
      )
    sub = params.get("sub_weight_split_dims_mapping")
    opt = params.get("optimizer_dims_mapping")
    return tuple(sub) if sub is not None else (-1,), tuple(opt) if opt is not None else (-1,)

  def add_axis(self, index: int, metadata_params: dict[Any, Any]) -> BoxedParam:
    sub, opt = self._axis_params(index, metadata_params)
    if not metadata_params["is_initializing"]:
      return self
    meta = copy.deepcopy(self.meta)
    meta.repeat_prefix = [metadata_params["x_times"]] + list(self.meta.repeat_prefix or [])
    meta.repeat_prefix_split_dims_mapping = sub + tuple(
      self.meta.repeat_prefix_split_dims_mapping or ()
    )
    meta.repeat_optimizer_dims_mapping = opt + tuple(self.meta.repeat_optimizer_dims_mapping or ())
    meta.fan_in_axes = _shift_axes(self.meta.fan_in_axes, 1)
    meta.fan_out_axes = _shift_axes(self.meta.fan_out_axes, 1)
    return self.replace(meta=meta)

  def remove_axis(self, index: int, metadata_params: dict[Any, Any]) -> BoxedParam:
    self._axis_params(index, metadata_params)
    if not metadata_params["is_initializing"]:
      return self
    meta = copy.deepcopy(self.meta)
    if meta.repeat_prefix:
      meta.repeat_prefix = list(meta.repeat_prefix)[1:]
    if meta.repeat_prefix_split_dims_mapping:
      meta.repeat_prefix_split_dims_mapping = list(meta.repeat_prefix_split_dims_mapping)[1:]
    if meta.repeat_optimizer_dims_mapping:
      meta.repeat_optimizer_dims_mapping = list(meta.repeat_optimizer_dims_mapping)[1:]
    meta.fan_in_axes = _shift_axes(self.meta.fan_in_axes, -1)
    meta.fan_out_axes = _shift_axes(self.meta.fan_out_axes, -1)
    return self.replace(meta=meta)


# ---- Configs ----


def compatible_hparams(hparams1: Any, hparams2: Any) -> bool:
  """Whether two layer configs are the same apart from their names."""
  p1, p2 = hparams1.clone(), hparams2.clone()
  p1.name = ""
  p2.name = ""
  if isinstance(p1, fdl.Buildable) != isinstance(p2, fdl.Buildable):
    raise ValueError(
      "compatible_hparams: both arguments must be configs of the same kind; got "
      f"{hparams1!r} and {hparams2!r}."
    )
  if isinstance(p1, fdl.Buildable):
    return p1 == p2
  from praxis import base_hyperparams  # pylint: disable=import-outside-toplevel

  return base_hyperparams.nested_struct_to_text(p1) == base_hyperparams.nested_struct_to_text(p2)


def get_template_fields(template: Any) -> list[str]:
  """The names of every argument `template` (a Config) can take, set or not, defaults included."""
  if not isinstance(template, fdl.Config):
    raise TypeError(f"get_template_fields: expected a pax_fiddle.Config, got {type(template)}.")
  return list(
    fdl.ordered_arguments(
      template, include_defaults=True, include_unset=True, include_positional=False
    )
  )


def is_sublayer_template_or_instance(val: Any, base_layer_cls: type) -> bool:
  """Whether `val` is a layer, a layer Config, or a container of them (Nones allowed)."""
  if isinstance(val, base_layer_cls):
    return True
  if (
    isinstance(val, fdl.Config)
    and isinstance(val.__fn_or_cls__, type)
    and issubclass(val.__fn_or_cls__, base_layer_cls)
  ):
    return True
  if isinstance(val, collections.abc.Mapping) and all(isinstance(k, str) for k in val):
    return is_sublayer_template_or_instance(list(val.values()), base_layer_cls)
  if isinstance(val, (list, tuple)):
    members = [is_sublayer_template_or_instance(v, base_layer_cls) for v in val]
    return any(members) and all(m or v is None for m, v in zip(members, val))
  return False
