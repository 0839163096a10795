"""A task's train state built from the model's WeightHParams: Pax's `tasks_lib` state functions.

Pax's library code (paxml.trainer_lib, user scripts) builds the train state from the tree of
`WeightHParams` that `model.abstract_init_with_metadata` returns, one optimizer state per
learner:

  * `create_state(mdl_vars, var_weight_hparams, discard_opt_states, learners)`: the step-0
    `TrainState` around given variables;
  * `create_state_unpadded_shapes` / `create_state_padded_shapes`: the same as
    ShapeDtypeStructs (padded: each sharded dim rounded up to a multiple of its mesh axes);
  * `create_state_partition_specs`: the same as PartitionSpecs on a mesh.

Bprop masks. A learner's `bprop_variable_inclusion` (regexes fully matching variable paths,
'a/b/w') names the only variables that train; otherwise `bprop_variable_exclusion` names the
ones that stay fixed. Excluded variables get no gradient and, unless the learner keeps
`keep_optimizer_state_for_excluded_vars`, no optimizer state (a `BpropMaskedNode` stands in).
The trainer (paxml/trainer.py) freezes the same variables with `get_excluded_var_mask_for_grad`.

These are re-exported by `paxml.tasks_lib` under Pax's names; `tasks_lib.SingleTask`'s
`create_train_state*` methods call them with the task's learners and the model's mesh.
"""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml import train_states
from praxis import base_layer
from praxis import optimizer_prefix_vectorization
from praxis import optimizers
from praxis import py_utils
from praxis import trees

PartitionSpec = jax.sharding.PartitionSpec


def _is_hparams(x: Any) -> bool:
  return isinstance(x, base_layer.WeightHParams)


def _patterns(value: str | Sequence[str]) -> list[str]:
  return [value] if isinstance(value, str) else list(value)


def get_excluded_var_mask_for_grad_or_opt(
  var_weight_hparams: Any,
  learner: Any,
  mask_all_non_trainable: bool,
  mask_all_overwrite_with_gradient: bool = False,
) -> Any:
  """A bool tree like `var_weight_hparams`: True for variables left out of bprop (see module
  docstring), plus non-trainable / overwrite-with-gradient ones when asked."""
  inclusion = _patterns(learner.bprop_variable_inclusion)
  exclusion = _patterns(learner.bprop_variable_exclusion)
  if inclusion and exclusion:
    raise ValueError(
      "Learner: set bprop_variable_inclusion or bprop_variable_exclusion, not both "
      f"(got {inclusion} and {exclusion})."
    )
  if inclusion:
    included = py_utils.match_variable_names(var_weight_hparams, inclusion)
    excluded = jax.tree.map(lambda x: not x, included)
  else:
    excluded = py_utils.match_variable_names(var_weight_hparams, exclusion)

  def also(pred):
    return jax.tree.map(lambda hp, e: e or pred(hp), var_weight_hparams, excluded)

  if mask_all_overwrite_with_gradient:
    excluded = also(base_layer.var_overwrite_with_gradient)
  if mask_all_non_trainable:
    excluded = also(base_layer.var_not_trainable)
  return excluded


def get_excluded_var_mask_for_opt(var_weight_hparams: Any, learner: Any) -> Any:
  """Variables without optimizer state (none when keep_optimizer_state_for_excluded_vars);
  non-trainable ones keep theirs when the optimizer keeps an EMA of every variable."""
  if learner.keep_optimizer_state_for_excluded_vars:
    return jax.tree.map(lambda _: False, var_weight_hparams)
  ema = (learner.optimizer.ema_decay or 0.0) > 0.0
  return get_excluded_var_mask_for_grad_or_opt(var_weight_hparams, learner, not ema, True)


def get_excluded_var_mask_for_grad(var_weight_hparams: Any, learner: Any) -> Any:
  """Variables that get no gradient: the bprop-excluded and the non-trainable ones."""
  return get_excluded_var_mask_for_grad_or_opt(var_weight_hparams, learner, True)


def filter_vars_for_grad_or_opt(mdl_vars: Any, excluded: Any) -> Any:
  """`mdl_vars` with each excluded variable replaced by a BpropMaskedNode."""
  return jax.tree.map(
    lambda v, e: py_utils.BpropMaskedNode() if e else v,
    mdl_vars,
    excluded,
    is_leaf=_is_hparams,
  )


def _create_opt_states(mdl_vars: Any, var_weight_hparams: Any, learners: Sequence[Any]):
  """One optimizer state per learner, over the variables it keeps state for."""
  opt_states = []
  for learner in learners:
    excluded = get_excluded_var_mask_for_opt(var_weight_hparams, learner)
    hparams = filter_vars_for_grad_or_opt(var_weight_hparams, excluded)
    tx = learner.get_grad_tx(hparams)
    opt_states.append(tx.init(filter_vars_for_grad_or_opt(mdl_vars, excluded)))
  return opt_states


def create_state(
  mdl_vars: Any,
  var_weight_hparams: Any,
  discard_opt_states: bool,
  learners: Sequence[Any] | None,
) -> "train_states.TrainState":
  """The step-0 TrainState around (a copy of) `mdl_vars`; no optimizer state if discarded."""
  mdl_vars = trees.copy(mdl_vars)
  opt_states = (
    [] if discard_opt_states else _create_opt_states(mdl_vars, var_weight_hparams, learners)
  )
  return train_states.TrainState(
    step=jnp.array(0, dtype=jnp.uint32), mdl_vars=mdl_vars, opt_states=opt_states, extra_state=()
  )


def _var_shape(hp: Any) -> jax.ShapeDtypeStruct:
  """A variable's global shape: its repeat prefix (scanned layers) then its own shape."""
  return jax.ShapeDtypeStruct(tuple(hp.repeat_prefix or ()) + tuple(hp.shape), hp.dtype)


def create_state_unpadded_shapes(
  var_weight_hparams: Any, discard_opt_states: bool, learners: Sequence[Any] | None
) -> "train_states.TrainState":
  """`create_state`'s result as ShapeDtypeStructs (nothing is allocated)."""
  var_shapes = jax.tree.map(_var_shape, var_weight_hparams, is_leaf=_is_hparams)
  return jax.eval_shape(
    lambda v: create_state(v, var_weight_hparams, discard_opt_states, learners), var_shapes
  )


def create_state_partition_specs(
  var_weight_hparams: Any,
  mesh_shape: Sequence[int],
  mesh_axis_names: Sequence[str],
  discard_opt_states: bool,
  learners: Sequence[Any] | None,
  opt_states: Any = None,
) -> "train_states.TrainState":
  """The train state's PartitionSpecs: variables from their split dims, optimizer state from
  each transformation's `init_partition_spec` (or, for plain optax ones, its shapes)."""
  var_specs = base_layer.var_partition_specs(
    var_weight_hparams, mesh_shape=mesh_shape, device_axis_names=mesh_axis_names
  )
  opt_specs = []
  if not discard_opt_states:
    opt_hparams = []
    for index, learner in enumerate(learners):
      excluded = get_excluded_var_mask_for_opt(var_weight_hparams, learner)
      hparams = filter_vars_for_grad_or_opt(var_weight_hparams, excluded)
      tx = learner.get_grad_tx(hparams)
      if isinstance(tx, optimizers.ShardedGradientTransformation):
        opt_hparams.append(tx.init_partition_spec(hparams))
      elif isinstance(tx, optax.GradientTransformation):
        opt_hparams.append(
          optimizer_prefix_vectorization.partition_params(tx, hparams, opt_states[index])
        )
      else:
        raise ValueError(f"Unsupported gradient transformation {type(tx).__name__}: {tx!r}")
    opt_specs = base_layer.var_partition_specs(
      opt_hparams, mesh_shape=mesh_shape, device_axis_names=mesh_axis_names
    )
    # A chain's outer MaskedState only wraps the per-part states; its specs are the parts'.
    opt_specs = jax.tree.map(
      lambda x: x.inner_state if isinstance(x, optax.MaskedState) else x,
      opt_specs,
      is_leaf=lambda x: isinstance(x, optax.MaskedState),
    )
  return train_states.TrainState(
    step=PartitionSpec(), mdl_vars=var_specs, opt_states=opt_specs, extra_state=()
  )


def _padded(shape: Sequence[int], spec: Any, mesh_shape: Sequence[int], names: Sequence[str]):
  """`shape` with each dim rounded up to a multiple of the mesh axes it is split over."""
  sizes = dict(zip(names, mesh_shape))
  out = list(shape)
  for dim, axes in enumerate(tuple(spec)[: len(out)]):
    if axes is None:
      continue
    axes = axes if isinstance(axes, tuple) else (axes,)
    split = int(np.prod([sizes[a] for a in axes]))
    out[dim] = -(-out[dim] // split) * split
  return tuple(out)


def create_state_padded_shapes(
  var_weight_hparams: Any,
  mesh_shape: Sequence[int] | None,
  mesh_axis_names: Sequence[str] | None,
  discard_opt_states: bool,
  learners: Sequence[Any] | None,
) -> "train_states.TrainState":
  """The unpadded shapes, each sharded dim padded to divide evenly (unchanged without a mesh)."""
  shapes = create_state_unpadded_shapes(var_weight_hparams, discard_opt_states, learners)
  if mesh_shape is None:
    return shapes
  specs = create_state_partition_specs(
    var_weight_hparams,
    mesh_shape,
    mesh_axis_names,
    discard_opt_states,
    learners,
    shapes.opt_states,
  )

  def pad(x, spec):
    if py_utils.is_optax_masked_node(x) or py_utils.is_bprop_masked_node(x):
      return x
    return jax.ShapeDtypeStruct(_padded(x.shape, spec, mesh_shape, mesh_axis_names), x.dtype)

  return jax.tree.map(
    pad,
    shapes,
    specs,
    is_leaf=lambda x: py_utils.is_optax_masked_node(x) or py_utils.is_bprop_masked_node(x),
  )
