"""`BaseLayer`: what every praxis layer shares, with Pax's API.

A layer is a Flax linen module whose dataclass fields are its hyperparameters. Pax's style:

    cfg = pax_fiddle.Config(linears.Linear, name='l', input_dims=2, output_dims=3)
    layer = base_layer.instantiate(cfg)
    variables = layer.init(jax.random.PRNGKey(0), x)   # {'params': {'w': array[2, 3]}}
    y = layer.apply(variables, x)

and the seed's style, `Linear.HParams.config(input_dims=2, output_dims=3)`, make the same Config.
Layers create their weights (`create_variable(name, WeightHParams(...))`) and children
(`create_child(name, template)`) in `setup` and compute in `__call__`.

What `init` returns. As in Pax, `layer.init` returns plain arrays. Each weight is stored during
init in a box that carries its WeightHParams; `abstract_init_with_metadata` returns those
WeightHParams (shape, init, sharding), and `init_boxed` returns the boxed variables, which the
trainer turns into shardings (praxis.sharding.logical_to_shardings):
  * a weight with Pax's `tensor_split_dims_mapping` on a layer with `mesh_axis_names` is boxed as
    `nn.Partitioned` (mesh axis names as given);
  * otherwise its `logical_axes` (this project's logical names: embed, mlp, heads, kv, vocab,
    layers, kv_heads, classes, batch, length) are boxed as `nn.LogicallyPartitioned`, mapped to
    mesh axes by the rules table; no names means replicated.

Logical names used across praxis:

    batch    examples in a batch           length   sequence positions
    embed    model dims (d_model)          mlp      feed-forward hidden dims
    heads    attention heads               kv       per-head dims
    vocab    vocabulary                    layers   the stacked leading axis of repeated layers
    kv_heads key/value heads (grouped-query attention); classes  classifier outputs
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import weakref
from typing import Any, Callable, Mapping, Sequence, TypeVar

from absl import flags
from flax import struct
from flax import traverse_util
import flax.core as flax_core
import flax.linen as nn
import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer_parts as _parts
from praxis import jax_context as _jax_context
from praxis import pytypes
from praxis import py_utils
from praxis import weight_hparams as _wh

# Pax's names, re-exported: users import them from base_layer.
WeightInit = _wh.WeightInit
WeightHParams = _wh.WeightHParams
# Pax defines these here: configs, model_params.txt and pickles name them praxis.base_layer.*.
WeightInit.__module__ = WeightHParams.__module__ = __name__
WeightHParamsCollection = _wh.WeightHParamsCollection
default_param_init = _wh.default_param_init
is_default_param_init = _wh.is_default_param_init
get_fan_in_fan_out = _wh.get_fan_in_fan_out
init_var = _wh.init_var
var_not_trainable = _wh.var_not_trainable
var_skip_lp_regularization = _wh.var_skip_lp_regularization
var_disallow_bfloat16_conversion = _wh.var_disallow_bfloat16_conversion
to_partition_spec = _wh.to_partition_spec
var_partition_specs = _wh.var_partition_specs
JaxContext = _jax_context.JaxContext
cur_jax_context = _jax_context.cur_jax_context
add_global_summary = _jax_context.add_global_summary
all_global_summaries = _jax_context.all_global_summaries
clear_global_summary = _jax_context.clear_global_summary
instantiate = base_hyperparams.instantiate
template_field = base_hyperparams.template_field
instance_field = base_hyperparams.instance_field

FLAGS = flags.FLAGS
sub_config_field = base_hyperparams.sub_config_field
SummaryType = _parts.SummaryType
get_summary_base_type = _parts.get_summary_base_type
get_summary_type_suffix = _parts.get_summary_type_suffix
get_summary_type_from_key = _parts.get_summary_type_from_key
trim_summary_type_from_key = _parts.trim_summary_type_from_key
var_requires_mean_sync = _parts.var_requires_mean_sync
var_requires_sum_sync = _parts.var_requires_sum_sync
var_overwrite_with_gradient = _parts.var_overwrite_with_gradient
scaled_orthogonal = _parts.scaled_orthogonal
scaled_delta_orthogonal = _parts.scaled_delta_orthogonal
var_init_scale = _parts.var_init_scale
is_running_under_pmap = _parts.is_running_under_pmap
transpose_one_axis = _parts.transpose_one_axis
maybe_transpose_mesh_axes = _parts.maybe_transpose_mesh_axes
BoxedParam = _parts.BoxedParam
BoxedPartitionSpec = _parts.BoxedPartitionSpec
AxisMetadata = _parts.AxisMetadata
TAxisMetadata = _parts.TAxisMetadata
compatible_hparams = _parts.compatible_hparams
get_template_fields = _parts.get_template_fields
PMAP_PARALLEL_AXIS_NAME = _parts.PMAP_PARALLEL_AXIS_NAME
QUANTIZED_SCALE_NAME_POSTFIX = _parts.QUANTIZED_SCALE_NAME_POSTFIX
QUANTIZED_ZP_NAME_POSTFIX = _parts.QUANTIZED_ZP_NAME_POSTFIX
SPARSITY_NAME_POSTFIX = _parts.SPARSITY_NAME_POSTFIX

# Pax's type aliases, as base_layer re-exports them.
Axes = tuple[str | None, ...]
NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
PRNGKey = pytypes.PRNGKey
JTensorOrPartitionSpec = pytypes.JTensorOrPartitionSpec
NpTensor = pytypes.NpTensor
SummaryDict = pytypes.SummaryDict
Nested = pytypes.Nested
NestedJTensor = pytypes.NestedJTensor
NestedBool = pytypes.NestedBool
NestedHParams = pytypes.NestedHParams
NestedJTensorOrPartitionSpec = pytypes.NestedJTensorOrPartitionSpec
NestedPartitionSpec = pytypes.NestedPartitionSpec
NestedWeightHParams = Nested[WeightHParams]
SplitDimsMapping = pytypes.SplitDimsMapping
ParamsT = Any  # Pax: a layer's hyperparameters (here its Config)
BaseLayerT = TypeVar("BaseLayerT", bound="BaseLayer")
# Reshapes one decode-state tensor: (state, batch_dim, time_dim) -> new state.
DecodeStateTransformFn = Callable[[JTensor, int, int | None], JTensor]
LayerTpl = base_hyperparams.Config

# Flax collections (Pax's names and values).
PARAMS = "params"
AUX_LOSS = "aux_loss"
SUMMARIES = "summaries"
NON_TRAINABLE = "non_trainable"
DECODE_CACHE = "decoder_cache"
PREFIX_DECODE_CACHE = "prefix_decoder_cache"
INTERMEDIATES = "intermediates"
HYPER_PARAMS = "hyper_params"
NON_PAX_VAR_COLLECTION = ["batch_stats", "params_axes"]
DEFAULT_INIT_MUTABLE_LIST = [PARAMS, NON_TRAINABLE] + NON_PAX_VAR_COLLECTION
# RNG streams.
RANDOM = "random"
NON_PAX_RNG_KEY = "dropout"


def maybe_shard(
  x: JTensor,
  split_dims_mapping: SplitDimsMapping = None,
  mesh_axis_names: Sequence[str] | None = None,
  unconstrained_dims: Sequence[int] | None = None,
) -> JTensor:
  """Pax's sharding annotation: a no-op unless both a mapping and mesh axis names are given."""
  if split_dims_mapping is None or mesh_axis_names is None:
    return x
  if len(split_dims_mapping) != x.ndim:
    raise ValueError(
      f"split_dims_mapping {split_dims_mapping} needs one entry per dim of shape {x.shape}."
    )
  spec = list(to_partition_spec(split_dims_mapping, mesh_axis_names))
  for dim in unconstrained_dims or ():
    spec[dim] = jax.sharding.PartitionSpec.UNCONSTRAINED
  return py_utils.with_sharding_constraint(x, jax.sharding.PartitionSpec(*spec))


class WeightBox(nn.LogicallyPartitioned):
  """A weight during init: its value, its logical axis names, and its WeightHParams."""

  meta: Any = struct.field(pytree_node=False, default=None)

  def unbox(self, apply_constraint=True) -> Any:
    # No names: nothing to constrain (and an all-None constraint would force replication).
    if all(n is None for n in self.names):
      return self.value
    return super().unbox(apply_constraint)


class MeshWeightBox(nn.Partitioned):
  """A weight during init with Pax's mesh-axis sharding, and its WeightHParams."""

  meta: Any = struct.field(pytree_node=False, default=None)


@struct.dataclass
class WrappedHParams:
  """A layer's config, kept in the "hyper_params" collection (abstract_init_with_mdl_config)."""

  meta: Any = struct.field(pytree_node=False)


@struct.dataclass
class AuxLossStruct:
  value: Any
  weight: Any


def _is_box(x: Any) -> bool:
  return isinstance(x, (nn.Partitioned, BoxedParam))


def maybe_unbox_value(tree: Any) -> Any:
  """The tree with every box replaced by its value."""
  return jax.tree.map(lambda x: x.value if _is_box(x) else x, tree, is_leaf=_is_box)


def unbox_meta(tree: Any) -> Any:
  """The tree with every leaf replaced by its WeightHParams (shape includes repeat prefixes)."""

  def meta(x):
    value = x.value if _is_box(x) else x
    shape = tuple(getattr(value, "shape", ()))
    hp = copy.deepcopy(getattr(x, "meta", None))
    if hp is None:
      hp = WeightHParams(shape=shape, dtype=getattr(value, "dtype", None))
      if _is_box(x) and any(n is not None for n in getattr(x, "names", ())):
        hp.logical_axes = tuple(x.names)
    extra = len(shape) - len(hp.shape)
    if extra > 0:  # a repeat prefix added by nn.scan (Repeat / StackedTransformerRepeated)
      hp.repeat_prefix = list(shape[:extra])
      if _is_box(x) and hasattr(x, "names"):
        hp.repeat_prefix_split_dims_mapping = tuple(x.names[:extra])
    return hp

  return jax.tree.map(meta, tree, is_leaf=_is_box)


class Theta:
  """`self.theta.w` / `self.theta['w']`: the layer's weight `w`, cast to its fprop_dtype.

  As in Pax, the layer is the public attribute `module`, and `__getattr__` / `__getitem__` each
  read the weight on their own, so a subclass can override either and call the base class's
  (LoRA does: `super().__getattr__(k)` plus a low-rank update). Install a subclass on a layer
  with a descriptor: `theta = MyThetaDescriptor()` whose `__get__` returns `MyTheta(obj)`.
  """

  def __init__(self, module: BaseLayer):
    self.module = module

  def __getattr__(self, k: str) -> Any:
    if k == "module":  # not set yet (a subclass __init__ that skipped ours): no recursion
      raise AttributeError(k)
    return Theta._read(self.module, k, f"theta.{k}")

  def __getitem__(self, k: str) -> Any:
    return Theta._read(self.module, k, f"theta[{k!r}]")

  @staticmethod
  def _read(module: BaseLayer, k: str, how: str) -> Any:
    module._try_setup()  # pylint: disable=protected-access
    if not module.has_variable(PARAMS, k):
      raise ValueError(
        f"Module {type(module).__name__} has no {how} defined; create it with "
        "create_variable in setup first."
      )
    value = module.get_variable(PARAMS, k)
    hp = module._weight_hparams.get(k)  # pylint: disable=protected-access
    if (
      hp is not None and module.fprop_dtype == jnp.bfloat16 and var_disallow_bfloat16_conversion(hp)
    ):
      return value
    return module._cast_to_fprop_dtype(value)  # pylint: disable=protected-access


class ThetaDescriptor:
  """`theta = ThetaDescriptor()` on a layer class makes `self.theta` a Theta of the layer."""

  def __get__(self, obj, objtype=None):
    return Theta(obj)


class BaseLayer(base_hyperparams.HParamsMixin, nn.Module):
  """Base class of praxis layers (Pax's BaseLayer fields and methods).

  Attributes:
    dtype: dtype of the weights.
    fprop_dtype: dtype of the activations; None means `dtype` (set at construction, as Pax).
    params_init: default initialiser of this layer's weights (Pax: Xavier(1.000001)).
    skip_lp_regularization: every weight of this layer (and of children that leave it None)
      skips Lp regularisation.
    ici_mesh_shape: the mesh within a slice, e.g. [1, 4, 2]; None for one device.
    dcn_mesh_shape: the mesh across slices; None for one slice.
    contiguous_submeshes: passed to the mesh builder.
    mesh_axis_names: names of the mesh axes, e.g. ['replica', 'data', 'mdl']; with it, weights'
      tensor_split_dims_mapping and activations' maybe_shard mappings take effect.
    shared_weight_layer_id: layers built with the same id (in one init / apply) are one layer, whose
      variables sit at the root under the id (Pax's weight sharing; see instantiate_layer).
    weight_split_dims_mapping: the layer's WeightSharding (`.wt`, ...), Pax's mesh-axis mappings.
    activation_split_dims_mapping: the layer's ActivationSharding (`.out`, ...).
  """

  @dataclasses.dataclass(frozen=True)
  class WeightSharding:
    """How the layer's weights are split over the mesh (Pax: `wt` for the main weight)."""

    wt: SplitDimsMapping = None

  @dataclasses.dataclass(frozen=True)
  class ActivationSharding:
    """How the layer's outputs are split over the mesh (Pax: `out`)."""

    out: SplitDimsMapping = None

  dtype: Any = jnp.float32
  fprop_dtype: Any = None
  params_init: WeightInit = instance_field(default_param_init)
  skip_lp_regularization: bool | None = None
  ici_mesh_shape: Sequence[int] | None = None
  dcn_mesh_shape: Sequence[int] | None = None
  contiguous_submeshes: bool | None = None
  mesh_axis_names: Sequence[str] | None = None
  shared_weight_layer_id: str | None = None
  weight_split_dims_mapping: Any = template_field(WeightSharding)
  activation_split_dims_mapping: Any = template_field(ActivationSharding)

  # What model_params.txt shows as inherited on child templates (base_hyperparams); a plain
  # class attribute, not a field.
  hparams_inherited_by_children = ("dtype", "fprop_dtype")

  theta = ThetaDescriptor()

  @classmethod
  def __init_subclass__(cls, **kwargs: Any):
    # A subclass's own WeightSharding / ActivationSharding become dataclasses and the defaults
    # of its *_split_dims_mapping fields, before Flax turns the class into a dataclass.
    if isinstance(cls.__dict__.get("HParams"), type):
      raise ValueError(
        f"For {cls}: PAX layers should no longer use nested HParams classes. Instead, add "
        "fields directly to the layer class (`x: int = 0`)."
      )
    if "__annotations__" not in cls.__dict__:
      cls.__annotations__ = {}
    for inner, field_name in (
      ("WeightSharding", "weight_split_dims_mapping"),
      ("ActivationSharding", "activation_split_dims_mapping"),
    ):
      if inner in cls.__dict__:
        sharding_cls = dataclasses.dataclass(frozen=True)(cls.__dict__[inner])
        setattr(cls, inner, sharding_cls)
        cls.__annotations__[field_name] = Any
        setattr(cls, field_name, template_field(sharding_cls))
    super().__init_subclass__(**kwargs)

  @classmethod
  def config(cls, **kwargs) -> base_hyperparams.Config:
    """pax_fiddle.Config(cls, **kwargs)."""
    return base_hyperparams.Config(cls, **kwargs)

  def __post_init__(self):
    try:
      jnp.dtype(self.dtype)
    except (TypeError, ValueError):
      raise TypeError(
        f"{type(self).__name__}: dtype must be a dtype, got {self.dtype!r}. A layer is built "
        f"from its config: Please use `layer_p.Instantiate()` instead of "
        f"`{type(self).__name__}(layer_p)` (or `base_layer.instantiate(layer_p)`)."
      ) from None
    object.__setattr__(self, "_weight_hparams", {})
    object.__setattr__(self, "_private_children", {})
    super().__post_init__()
    if isinstance(self.parent, BaseLayer):
      # Pax: children take what they leave at the default from their parent.
      BaseLayer.copy_base_hparams(self.parent, self)
    if self.fprop_dtype is None:
      object.__setattr__(self, "fprop_dtype", self.dtype)

  @staticmethod
  def copy_base_hparams(source: Any, target: Any) -> None:
    """Copies the inheritable fields from `source` to `target` where `target` kept defaults.

    Inherited: dtype (when float32), fprop_dtype, skip_lp_regularization, ici_mesh_shape,
    dcn_mesh_shape, mesh_axis_names, contiguous_submeshes (when None), params_init (when the
    default). `source` / `target` are layers or layer configs; `target` is changed in place.
    """

    def put(name, value):
      if isinstance(target, nn.Module):
        object.__setattr__(target, name, value)
      else:
        setattr(target, name, value)

    if target.dtype == jnp.float32:
      put("dtype", source.dtype)
    if target.fprop_dtype is None:
      put("fprop_dtype", source.fprop_dtype)
    for name in (
      "skip_lp_regularization",
      "ici_mesh_shape",
      "dcn_mesh_shape",
      "mesh_axis_names",
      "contiguous_submeshes",
    ):
      if getattr(target, name) is None:
        put(name, copy.deepcopy(getattr(source, name)))
    target_init = target.params_init
    if isinstance(target_init, base_hyperparams.Config):
      target_init = base_hyperparams.instantiate(target_init)
    if target_init is None or is_default_param_init(target_init):
      put("params_init", copy.deepcopy(source.params_init))

  @property
  def mesh_shape(self) -> Sequence[int] | None:
    if self.dcn_mesh_shape is None or self.ici_mesh_shape is None:
      return self.ici_mesh_shape
    return [i * d for i, d in zip(self.ici_mesh_shape, self.dcn_mesh_shape)]

  @property
  def compute_dtype(self) -> Any:
    """The activations' dtype (fprop_dtype, which defaults to dtype)."""
    return self.dtype if self.fprop_dtype is None else self.fprop_dtype

  @functools.cached_property
  def hparams(self) -> base_hyperparams.Config:
    """A Config that builds this layer (Pax's `layer.hparams`)."""
    kwargs = {}
    for field in dataclasses.fields(self):
      if field.init and field.name != "parent":
        kwargs[field.name] = getattr(self, field.name)
    return base_hyperparams.Config(type(self), **kwargs)

  def get_shard_count_on_dim(self, dim_sharding: Any) -> int:
    """How many shards a dim with this mesh-axis sharding has."""
    if dim_sharding is None or self.mesh_axis_names is None:
      return 1
    axes = [dim_sharding] if isinstance(dim_sharding, str) else dim_sharding
    count = 1
    for axis in axes:
      index = list(self.mesh_axis_names).index(axis)
      count *= (self.ici_mesh_shape or [1] * (index + 1))[index]
      if self.dcn_mesh_shape:
        count *= self.dcn_mesh_shape[index]
    return count

  # ---- Context ----

  @property
  def jax_context(self) -> JaxContext:
    return cur_jax_context()

  @property
  def do_eval(self) -> bool:
    """True inside a JaxContext with do_eval=True; False otherwise."""
    top = JaxContext.top()
    return bool(top is not None and top.do_eval)

  @property
  def reflect_configs(self) -> bool:
    top = JaxContext.top()
    return bool(top is not None and top.self_reflect_configs)

  @nn.nowrap
  def next_prng_key(self, name: str = RANDOM) -> jax.Array:
    return self.make_rng(name)

  # ---- init / apply, as Pax's ----

  @nn.nowrap
  def init(self, rngs, *args, method=None, mutable=None, **kwargs):
    """Flax's init returning plain arrays (Pax's): params and non_trainable by default."""
    variables = nn.Module.init(
      self,
      rngs,
      *args,
      method=method,
      mutable=mutable if mutable else DEFAULT_INIT_MUTABLE_LIST,
      **kwargs,
    )
    return flax_core.unfreeze(maybe_unbox_value(variables))

  @nn.nowrap
  def apply(
    self,
    variables,
    *args,
    rngs=None,
    method=None,
    mutable=False,
    capture_intermediates=False,
    **kwargs,
  ):
    result = nn.Module.apply(
      self,
      variables,
      *args,
      rngs=rngs,
      method=method,
      mutable=mutable,
      capture_intermediates=capture_intermediates,
      **kwargs,
    )
    if mutable:
      outputs, updated = result
      return outputs, flax_core.unfreeze(updated)
    return result

  @nn.nowrap
  def _abstract_init(
    self,
    *args,
    do_eval=False,
    method=None,
    extra_mutable_list=None,
    self_reflect_configs=False,
    **kwargs,
  ):
    key = jax.random.PRNGKey(1)
    rngs = {PARAMS: key, RANDOM: key, NON_PAX_RNG_KEY: key}
    mutable = list(DEFAULT_INIT_MUTABLE_LIST)
    if self_reflect_configs:
      mutable.append(HYPER_PARAMS)
    mutable += list(extra_mutable_list or [])
    init_fn = functools.partial(nn.Module.init, self, method=method, mutable=mutable)
    context_p = JaxContext.HParams(do_eval=do_eval, self_reflect_configs=self_reflect_configs)
    with JaxContext.new_context(hparams=context_p):
      return jax.eval_shape(init_fn, rngs, *args, **kwargs)

  @nn.nowrap
  def abstract_init_with_metadata(
    self, *args, do_eval=False, method=None, extra_mutable_list=None, **kwargs
  ) -> Any:
    """`jax.eval_shape(init)` with every variable replaced by its WeightHParams."""
    variables = self._abstract_init(
      *args, do_eval=do_eval, method=method, extra_mutable_list=extra_mutable_list, **kwargs
    )
    variables = dict(flax_core.unfreeze(variables))
    variables.pop("params_axes", None)
    return unbox_meta(variables)

  @nn.nowrap
  def abstract_init_with_mdl_config(
    self, *args, do_eval=False, method=None, extra_mutable_list=None, **kwargs
  ) -> Any:
    """Each layer's config as built (inherited fields filled in): {child: {'_hparams': cfg}}."""
    variables = self._abstract_init(
      *args,
      do_eval=do_eval,
      method=method,
      extra_mutable_list=extra_mutable_list,
      self_reflect_configs=True,
      **kwargs,
    )
    return jax.tree.map(
      lambda x: x.meta,
      flax_core.unfreeze(variables).get(HYPER_PARAMS, {}),
      is_leaf=lambda x: isinstance(x, WrappedHParams),
    )

  @nn.nowrap
  def _try_setup(self, shallow: bool = False) -> None:
    before = self._state.setup_called
    super()._try_setup(shallow=shallow)
    if before != self._state.setup_called and self.reflect_configs and self.is_initializing():
      kwargs = {}
      for field in dataclasses.fields(self):
        if not field.init or field.name == "parent":
          continue
        value = getattr(self, field.name)
        if isinstance(value, (nn.Module, base_hyperparams.Config)) or (
          is_sublayer_template_or_instance(value)
        ):
          value = None  # children (and lists / dicts of them) report their own config
        kwargs[field.name] = value
      self.put_variable(
        HYPER_PARAMS, "_hparams", WrappedHParams(base_hyperparams.Config(type(self), **kwargs))
      )

  @nn.nowrap
  def get_variable(self, col: str, name: str, default: Any = None) -> Any:
    return maybe_unbox_value(super().get_variable(col, name, default))

  # ---- Weights ----

  @nn.nowrap
  def create_variable(
    self,
    name: str,
    var_hparams: WeightHParams | Sequence[int],
    axes: Axes | None = None,
    *,
    trainable: bool = True,
    init: WeightInit | None = None,
    dtype: Any = None,
    fan_in_axes: Sequence[int] | None = None,
  ) -> JTensor:
    """Creates the weight `name`: Pax's `create_variable(name, WeightHParams(...), trainable)`.

    Trainable weights go to "params", others to "non_trainable". Unset `init` / `dtype` take the
    layer's `params_init` / `dtype`. Returns the weight as `self.theta.<name>` gives it (cast to
    fprop_dtype), or a non-trainable variable's value.

    The seed's shorthand `create_variable(name, shape, logical_axes, init=, dtype=,
    fan_in_axes=)` is the same call: it only spells the WeightHParams (its `logical_axes`, fan-in
    over `fan_in_axes`, default all but the last dim, fan-out over the rest).
    """
    if not isinstance(var_hparams, WeightHParams):
      shape = tuple(int(d) for d in var_hparams)
      if axes is None or len(axes) != len(shape):
        raise ValueError(
          f"{type(self).__name__}.{name}: {len(axes or ())} logical axes {axes} "
          f"for a weight of rank {len(shape)} {shape}; give one name (or None) "
          "per dim."
        )
      fan_in = tuple(range(len(shape) - 1)) if fan_in_axes is None else tuple(fan_in_axes)
      fan_in = tuple(i % len(shape) for i in fan_in) if shape else ()
      fan_out = tuple(i for i in range(len(shape)) if i not in fan_in)
      var_hparams = WeightHParams(
        shape=shape,
        init=init,
        dtype=dtype,
        logical_axes=tuple(axes),
        fan_in_axes=fan_in if len(shape) > 1 else None,
        fan_out_axes=(fan_out or fan_in) if len(shape) > 1 else None,
      )
    hp = copy.deepcopy(var_hparams)
    if hp.init is None:
      hp.init = copy.deepcopy(self.params_init)
    if hp.dtype is None:
      hp.dtype = self.dtype
    collections = list(hp.collections or [])
    if self.skip_lp_regularization and (
      WeightHParamsCollection.SKIP_LP_REGULARIZATION not in collections
    ):
      collections.append(WeightHParamsCollection.SKIP_LP_REGULARIZATION)
    if not trainable and WeightHParamsCollection.NON_TRAINABLE not in collections:
      collections.append(WeightHParamsCollection.NON_TRAINABLE)
    hp.collections = collections
    self._weight_hparams[name] = hp
    full_name = f"{self.scope.path_text}/{name}" if self.scope is not None else name

    def boxed(key):
      value = init_var(hp, key, full_name)
      if hp.tensor_split_dims_mapping is not None and self.mesh_axis_names is not None:
        spec = to_partition_spec(hp.tensor_split_dims_mapping, self.mesh_axis_names)
        return MeshWeightBox(value, tuple(spec), meta=hp)
      names = tuple(hp.logical_axes) if hp.logical_axes is not None else (None,) * len(hp.shape)
      return WeightBox(value, names, meta=hp)

    if trainable:
      self.param(name, boxed)
      return getattr(self.theta, name)
    self.variable(NON_TRAINABLE, name, lambda: boxed(self.make_rng(PARAMS)))
    return self.get_var(name)

  @nn.nowrap
  def create_quantized_variable(
    self,
    name: str,
    weight_hparams: WeightHParams,
    scale_shape: Sequence[int] = (),
    dtype: Any = jnp.int8,
    use_symmetric: bool = True,
    scale_hparams: WeightHParams | None = None,
  ) -> None:
    """Pax's quantized weight: `name` (zeros of `dtype`), `name`_quantized_scale (+ `_zp`).

    The scale (and the zero point, when not `use_symmetric`) takes `scale_hparams`, or a plain
    WeightHParams of `scale_shape`; give one of them.
    """
    if scale_hparams is not None and len(scale_shape):
      raise ValueError(f"{name}: give scale_shape or scale_hparams, not both.")
    w_hp = copy.deepcopy(weight_hparams)
    w_hp.dtype, w_hp.init = dtype, WeightInit.Constant(0)
    s_hp = scale_hparams if scale_hparams is not None else WeightHParams(shape=list(scale_shape))
    self.create_variable(name, w_hp)
    self.create_variable(name + QUANTIZED_SCALE_NAME_POSTFIX, s_hp)
    if not use_symmetric:
      self.create_variable(name + QUANTIZED_ZP_NAME_POSTFIX, s_hp)

  @nn.nowrap
  def get_quantized_weight(self, name: str, use_symmetric: bool = True) -> tuple[Any, Any, Any]:
    """(weight, scale, zero point or None) created by create_quantized_variable."""
    zp = None if use_symmetric else getattr(self.theta, name + QUANTIZED_ZP_NAME_POSTFIX)
    return (
      getattr(self.theta, name),
      getattr(self.theta, name + QUANTIZED_SCALE_NAME_POSTFIX),
      zp,
    )

  def quantize_weight(self) -> Any:
    """Pax's serving weights of this layer and its children: {collection: {name: value}}.

    The default passes this layer's "params" / "non_trainable" through and asks every child
    that has variables for its own; quantized layers override it.
    """
    return self._quantize_fn(return_pspec=False)

  def quantized_partition_specs(self) -> Any:
    """Like quantize_weight, with each weight's boxed PartitionSpec instead of its value."""
    return self._quantize_fn(return_pspec=True)

  def _quantize_fn(self, return_pspec: bool) -> Any:
    self._try_setup()  # A child's setup may not have run yet: its children are made there.
    # getattr gives the children bound to this apply (the registry holds unbound copies).
    children = {name: self._bound_child(name) for name in self._private_children}
    # Children made by setup's `self.x = self.create_child(tpl)` shorthand are not in
    # _private_children: their variable subtrees name them.
    for col in (PARAMS, NON_TRAINABLE):
      for name, value in self.variables.get(col, {}).items():
        if name in children or not isinstance(value, Mapping):
          continue
        try:
          child = self._bound_child(name)
        except (AttributeError, ValueError, IndexError, TypeError):
          continue
        if isinstance(child, BaseLayer):
          children[name] = child
    hparams = dict(self._weight_hparams)
    for f in dataclasses.fields(self):
      value = getattr(self, f.name, None)
      if f.name != "parent" and isinstance(value, BaseLayer):
        children[f.name] = value
        hparams.update(value._weight_hparams)  # pylint: disable=protected-access
    out: dict[str, dict[str, Any]] = {}
    for name, child in children.items():
      if not child.variables:
        continue
      sub = child.quantized_partition_specs() if return_pspec else child.quantize_weight()
      for col, tree in sub.items():
        out.setdefault(col, {})[name] = tree
    for col in (PARAMS, NON_TRAINABLE):
      for name, value in self.variables.get(col, {}).items():
        if name in children:
          continue
        if return_pspec:
          hp = hparams[name]
          mapping = hp.tensor_split_dims_mapping or [None] * len(hp.shape)
          value = BoxedPartitionSpec(meta=to_partition_spec(mapping, self.mesh_axis_names))
        out.setdefault(col, {})[name] = maybe_unbox_value(value)
    return out

  def _bound_child(self, name: str) -> Any:
    """Child `name` bound to this apply; create_children's `x_3` is the attribute list x's [3]."""
    if hasattr(self, name):
      return getattr(self, name)
    base, _, index = name.rpartition("_")
    return getattr(self, base)[int(index)]

  @nn.nowrap
  def get_var(self, name: str) -> Any:
    """A non-trainable variable's current value."""
    return self.get_variable(NON_TRAINABLE, name)

  @nn.nowrap
  def update_var(self, name: str, new_val: JTensor) -> None:
    """Replaces a non-trainable variable in the forward pass (when the collection is mutable)."""
    if self.is_mutable_collection(NON_TRAINABLE) and not self.is_initializing():
      old = nn.Module.get_variable(self, NON_TRAINABLE, name)
      self.put_variable(NON_TRAINABLE, name, flax_core.meta.replace_boxed(old, new_val))

  @nn.nowrap
  def get_decode_state(self, name: str) -> JTensor:
    return self.get_variable(DECODE_CACHE, name)

  @nn.nowrap
  def update_decode_state(self, name: str, new_state: JTensor) -> None:
    if self.is_mutable_collection(DECODE_CACHE):
      self.put_variable(DECODE_CACHE, name, new_state)

  @nn.nowrap
  def _cast_to_fprop_dtype(self, value: Any) -> Any:

    def cast(x):
      if x is None or not jnp.issubdtype(x.dtype, jnp.floating):
        return x
      return x.astype(self.fprop_dtype) if x.dtype != self.fprop_dtype else x

    return jax.tree.map(cast, value)

  # ---- Children ----

  @nn.nowrap
  def create_child(
    self, name: Any, params: Any = None, *, skip_clone: bool = False, **overrides
  ) -> Any:
    """Builds a child layer from a template: Pax's `self.create_child('linear', self.linear_tpl)`.

    The child is named `name` and set as `self.<name>` (in setup); it inherits what it leaves at
    the default (dtype, fprop_dtype, params_init, mesh ...). The seed's shorthand
    `self.ffn = self.create_child(self.ffn_tpl, **overrides)` is the same call on a copy of the
    template with `overrides` set, named by the attribute it is assigned to.
    """
    if isinstance(name, str):
      child = self._create_child(name, params, skip_clone=skip_clone, overrides=overrides)
      if self._state.in_setup:
        setattr(self, name, child)
      return child
    if name is None:
      raise ValueError(f"{type(self).__name__}: a child template is None; set it in the config.")
    return self._create_child(None, name, skip_clone=False, overrides=overrides)

  @nn.nowrap
  def create_children(
    self, name: str, params: Sequence[Any], *, skip_clone: bool = False
  ) -> list[Any]:
    """Builds children `name_0`, `name_1`, ... from templates and sets `self.<name>` to the list."""
    counter = itertools.count()
    children = [
      self._create_child(f"{name}_{next(counter)}", p, skip_clone=skip_clone, overrides={})
      for p in params
    ]
    if self._state.in_setup:
      setattr(self, name, children)
    return children

  @nn.nowrap
  def _create_child(
    self, name: str | None, params: Any, *, skip_clone: bool, overrides: dict[str, Any]
  ) -> Any:
    if not isinstance(params, base_hyperparams.fdl.Buildable):
      msg = (
        f"{type(self).__name__}.create_child({name!r}): Expected templates for `create_child` "
        f"to be Fiddle Configs (pax_fiddle.Config); got {type(params).__name__}."
      )
      if isinstance(params, BaseLayer):
        msg += (
          " This may be caused by an incorrect type annotation on a field that contains a "
          "Fiddle Config. Annotate it `pax_fiddle.Config[...]` (or declare it with "
          "template_field) so building leaves it a Config."
        )
      raise ValueError(msg)
    cfg = params if skip_clone else params.clone()
    for key, value in overrides.items():
      setattr(cfg, key, value)
    target = cfg.__fn_or_cls__
    if isinstance(target, type) and issubclass(target, BaseLayer):
      BaseLayer.copy_base_hparams(self, cfg)
      if name is not None:
        cfg.name = name
      elif self._state.in_setup:
        # The shorthand in setup: the attribute the child is assigned to names it, not the
        # template's own name (the child is now built under this module, which would keep it).
        cfg.name = None
    if getattr(cfg, "shared_weight_layer_id", None) and self.scope is not None:
      child = instantiate_layer(cfg, self.scope.root)
    else:
      child = base_hyperparams.instantiate(cfg)
    if name is not None:
      self._private_children[name] = child
    return child

  # ---- Sharding, summaries, aux losses ----

  @nn.nowrap
  def maybe_shard(self, x: JTensor, axes: Axes) -> JTensor:
    """Constrains activation `x` to the placement the rules give its logical `axes`."""
    if len(axes) != x.ndim:
      raise ValueError(
        f"{type(self).__name__}: {len(axes)} logical axes {axes} for an "
        f"activation of shape {x.shape}."
      )
    return nn.with_logical_constraint(x, axes)

  @nn.nowrap
  def add_summary(
    self, name: str, tensor: Any, summary_type: SummaryType = SummaryType.SCALAR, verbosity: int = 2
  ) -> None:
    """Records a summary in "summaries" as `<name>_<type>` (Pax's keys, e.g. 'loss_scalar').

    Skipped when the JaxContext's summary_verbosity is below `verbosity`. As in Pax, the name
    gets a number (`name1_scalar`) only while a summary called `name` itself (no type suffix)
    exists; otherwise the value overwrites: a layer called twice, or summaries fed back in the
    variables, keep the last value under the same key.
    """
    if JaxContext.has_context() and verbosity > self.jax_context.summary_verbosity:
      return
    if callable(tensor):
      tensor = tensor()
    full = name
    count = 0
    while self.has_variable(SUMMARIES, full):
      count += 1
      full = f"{name}{count}"
    self.sow(
      SUMMARIES, full + get_summary_type_suffix(summary_type), tensor, reduce_fn=lambda _, y: y
    )

  @nn.nowrap
  def add_aux_loss(self, name: str, value: JTensor, weight: Any = None) -> None:
    """Adds an auxiliary loss (e.g. a z-loss) that the model adds to its total loss.

    Recorded in "aux_loss" as (value, weight) entries, one per call.
    """
    weight = 1.0 if weight is None else weight
    self.sow(AUX_LOSS, name, (value, jnp.asarray(weight, jnp.float32)))


# Pax's name for the layer API (the same class there too).
BaseLayerApi = BaseLayer


def aux_loss_totals(variables: Any) -> tuple[jax.Array, jax.Array]:
  """(sum of the values, sum of the weights) of every add_aux_loss entry in `variables`.

  Each recorded name holds (value, weight) entries, one per call; a repeated (scanned) layer's
  entries carry a leading layer dim, which is summed too. Pax sums them all into its
  `aux_loss` / `aux_loss_weight`.
  """
  total = jnp.zeros((), jnp.float32)
  weight = jnp.zeros((), jnp.float32)
  collection = variables.get(AUX_LOSS, {})
  if not collection:
    return total, weight
  for entries in traverse_util.flatten_dict(flax_core.unfreeze(collection)).values():
    for value, entry_weight in entries:
      total = total + jnp.sum(jnp.asarray(value, jnp.float32))
      weight = weight + jnp.sum(jnp.asarray(entry_weight, jnp.float32))
  return total, weight


def init_boxed(module: nn.Module, *args, **kwargs) -> Any:
  """`module.init` keeping the weight boxes (sharding names + WeightHParams), for the trainer.

  Under `jax.eval_shape`, the result gives shardings through praxis.sharding.logical_to_shardings;
  `nn.unbox` (or `maybe_unbox_value`) gives what `module.init` returns.
  """
  return nn.Module.init(module, *args, **kwargs)


def assert_has_shape(t: JTensor, shape: Sequence[int]) -> None:
  """Raises unless `t`'s shape matches `shape` (-1 matches any size)."""
  if t.ndim != len(shape) or any(s not in (-1, d) for s, d in zip(shape, t.shape)):
    raise ValueError(f"Expected shape {tuple(shape)}, got {t.shape}.")


def is_sublayer_template_or_instance(val: Any) -> bool:
  """Whether `val` is a layer, a layer Config, or a list / tuple / str-keyed dict of them."""
  return _parts.is_sublayer_template_or_instance(val, BaseLayer)


# Per root scope (one init / apply), the shared layers built so far: {id: (config, layer)}.
_SHARED_LAYERS: "weakref.WeakKeyDictionary[Any, dict[str, tuple[Any, Any]]]" = (
  weakref.WeakKeyDictionary()
)


def instantiate_layer(layer_p: Any, scope: Any) -> BaseLayer:
  """Builds layer config `layer_p`; with `shared_weight_layer_id`, builds it once per root
  `scope` (under the root, named by the id) and returns that same layer to every later caller,
  whose configs must then match it but for their names (Pax's weight sharing)."""
  shared_id = getattr(layer_p, "shared_weight_layer_id", None)
  if not shared_id:
    return base_hyperparams.instantiate(layer_p)
  built = _SHARED_LAYERS.setdefault(scope, {})
  if shared_id in built:
    first_p, layer = built[shared_id]
    if not compatible_hparams(first_p, layer_p):
      raise ValueError(
        f"Layers sharing weights under shared_weight_layer_id={shared_id!r} must have the same "
        f"config but for their names:\n{base_hyperparams.nested_struct_to_text(first_p)}\nvs\n"
        f"{base_hyperparams.nested_struct_to_text(layer_p)}"
      )
    return layer
  wrapped = layer_p.clone()
  wrapped.shared_weight_layer_id = None
  wrapped.name = shared_id
  # Bound to the root's scope `<id>`, so its variables sit at the root under the id, whichever
  # layer uses it (a module bound to a scope is not adopted by the layers it is assigned to).
  wrapped.parent = scope.push(shared_id)
  layer = base_hyperparams.instantiate(wrapped)
  built[shared_id] = (layer_p.clone(), layer)
  return layer
