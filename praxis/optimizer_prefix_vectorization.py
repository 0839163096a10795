"""Optimizers that treat a stacked variable as its separate layers (Pax's prefix vectorization).

A variable whose WeightHParams has a `repeat_prefix` (e.g. [L] for L stacked layers, made by
`Repeat` / stacked Transformers) holds L variables. An optimizer that reduces over a variable
(Adafactor's factored statistics, per-tensor clipping or norms, ...) must see each layer alone.
`get_transformations_with_vectorized_repeat_prefix(tx, var_hparams)` wraps `tx` so that its
init and update are `jax.vmap`ped over the prefix dims of such variables.

Variables are grouped by (shape prefix, sharding prefix[, optimizer sharding prefix]); each group
runs through one vmapped copy of `tx`. When some variable has a prefix, the optimizer state is a
NestedMap keyed by group, with Pax's key format (checkpoints store these names):

    'no_prefix'            variables without a prefix
    'p#2.3#i0.i-1'         shape prefix [2, 3], sharding prefix [0, -1]
    'p#2#sdata'            sharding prefix ['data']
    'p#2.2#tsdata,smdl.'   sharding prefix [('data', 'mdl'), None]

('i' an int, 's' a mesh axis name, 't' a tuple of them, '' None; a fourth '#' part holds the
`repeat_optimizer_dims_mapping`, which becomes the vmap's `spmd_axis_name`.) Without any prefixed
variable the state is the wrapped optimizer's own state, unchanged.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import jax
import optax

from praxis import optimizer_transforms
from praxis import pytypes

NestedMap = pytypes.NestedMap
GeneralGradientTransformation = optimizer_transforms.GeneralGradientTransformation
ShardedGradientTransformation = optimizer_transforms.ShardedGradientTransformation

NO_PREFIX_KEY = "no_prefix"
_REPEAT_PREFIX_SEP = "#"


def has_no_prefix(dct: NestedMap) -> bool:
  return dct.keys() == {NO_PREFIX_KEY}


def _is_hparams(x: Any) -> bool:
  return isinstance(x, optimizer_transforms.WeightHParams)


def _encode_dim(d: Any, sep: str) -> str:
  """One dim of a sharding prefix as text (see the module docstring)."""
  if d is None:
    return ""
  if isinstance(d, int):
    return f"i{d}"
  if isinstance(d, (list, tuple)):
    return "t" + ",".join(_encode_dim(e, sep) for e in d)
  if not isinstance(d, str) or any(c in d for c in (".", ",", sep)):
    raise ValueError(
      f"Sharding prefix dim {d!r}: a mesh axis name may not contain '.', ',' or {sep!r}."
    )
  return "s" + d


def _decode_dim(text: str) -> Any:
  if not text:
    return None
  if text[0] == "i":
    return int(text[1:])
  if text[0] == "s":
    return text[1:]
  if len(text) == 1:
    return ()
  return tuple(_decode_dim(e) for e in text[1:].split(","))


def _prefix_key(hp: Any, sep: str) -> str:
  """The group key of a variable (NO_PREFIX_KEY without a repeat_prefix)."""
  if not hp.repeat_prefix:
    return NO_PREFIX_KEY
  n = len(hp.repeat_prefix)
  sharding = hp.repeat_prefix_split_dims_mapping
  sharding = [-1] * n if sharding is None else list(sharding)
  optimizer = hp.repeat_optimizer_dims_mapping
  if len(sharding) != n or (optimizer is not None and len(optimizer) != n):
    raise ValueError(
      f"repeat_prefix {hp.repeat_prefix} and its dims mappings ({sharding}, {optimizer}) "
      "must have the same length."
    )
  key = sep.join(
    [
      "p",
      ".".join(str(d) for d in hp.repeat_prefix),
      ".".join(_encode_dim(d, sep) for d in sharding),
    ]
  )
  if optimizer is not None and any(d != -1 for d in optimizer):
    key += sep + ".".join(_encode_dim(d, sep) for d in optimizer)
  return key


def _parse_key(key: str, sep: str) -> tuple[list, list, list | None]:
  """(shape prefix, sharding prefix, optimizer prefix) of a group key."""
  if key == NO_PREFIX_KEY:
    return [], [], []
  parts = key.split(sep)
  shape = [int(d) for d in parts[1].split(".")]
  sharding = [_decode_dim(d) for d in parts[2].split(".")]
  optimizer = [_decode_dim(d) for d in parts[3].split(".")] if len(parts) == 4 else None
  return shape, sharding, optimizer


def _vmap_prefix(fn: Callable, num_dims: int, optimizer_prefix: Sequence[Any] | None) -> Callable:
  """fn vmapped over the `num_dims` leading dims (outermost first)."""
  if optimizer_prefix is not None and len(optimizer_prefix) != num_dims:
    raise ValueError(
      f"The optimizer prefix {optimizer_prefix} must have one entry per prefix dim ({num_dims})."
    )
  for i in range(num_dims):
    axis = None if optimizer_prefix is None or optimizer_prefix[i] == -1 else optimizer_prefix[i]
    fn = jax.vmap(fn, spmd_axis_name=axis)
  return fn


def _group(values: Any, var_hparams: Any, sep: str) -> NestedMap:
  """One copy of `values` per group key, MaskedNode where a variable is in another group."""
  keys = {
    _prefix_key(hp, sep) for hp in jax.tree_util.tree_leaves(var_hparams, is_leaf=_is_hparams)
  }
  keys.add(NO_PREFIX_KEY)
  groups = NestedMap()
  for key in sorted(keys):
    groups[key] = jax.tree.map(
      lambda v, hp, key=key: v if _prefix_key(hp, sep) == key else optax.MaskedNode(),
      values,
      var_hparams,
      is_leaf=lambda x: _is_hparams(x) or isinstance(x, optax.MaskedNode),
    )
  return groups


def _ungroup(groups: NestedMap, var_hparams: Any, sep: str) -> Any:
  """The inverse of _group: each variable's value from its own group."""
  keys = list(groups.keys())
  return jax.tree.map(
    lambda hp, *vals: vals[keys.index(_prefix_key(hp, sep))],
    var_hparams,
    *[groups[k] for k in keys],
    is_leaf=_is_hparams,
  )


class _PrefixVectorizationTransform(optax.GradientTransformationExtraArgs):
  """The vectorized transformation, remembering the one it wraps (for partition_params)."""

  def __new__(cls, init, update, original_grad_tx):
    self = super().__new__(cls, init, update)
    self.original_grad_tx = original_grad_tx
    return self


def get_transformations_with_vectorized_repeat_prefix(
  tx: GeneralGradientTransformation,
  var_hparams: Any,
  repeat_prefix_sep: str = _REPEAT_PREFIX_SEP,
  force_prefix_structure: bool = False,
) -> GeneralGradientTransformation:
  """`tx` vmapped over each variable's repeat_prefix dims (see the module docstring).

  force_prefix_structure: keep the keyed state even when no variable has a prefix.
  """
  sep = repeat_prefix_sep

  def collapse(results: NestedMap) -> Any:
    if has_no_prefix(results) and not force_prefix_structure:
      return results[NO_PREFIX_KEY]
    return results

  def init_fn(params):
    results = NestedMap()
    for key, group in _group(params, var_hparams, sep).items():
      shape, _, optimizer = _parse_key(key, sep)
      results[key] = _vmap_prefix(tx.init, len(shape), optimizer)(group)
    return collapse(results)

  def update_fn(updates, state, params=None):
    grouped_updates = _group(updates, var_hparams, sep)
    grouped_params = (
      _group(params, var_hparams, sep) if params is not None else {k: None for k in grouped_updates}
    )
    if has_no_prefix(grouped_updates) and not force_prefix_structure:
      state = NestedMap({NO_PREFIX_KEY: state})
    new_updates, new_state = NestedMap(), NestedMap()
    for key, group in grouped_updates.items():
      shape, _, optimizer = _parse_key(key, sep)
      new_updates[key], new_state[key] = _vmap_prefix(tx.update, len(shape), optimizer)(
        group, state[key], grouped_params[key]
      )
    return _ungroup(new_updates, var_hparams, sep), collapse(new_state)

  def init_partition_spec_fn(var_param_args):
    results = NestedMap()
    for key, group in _group(var_param_args, var_param_args, sep).items():
      shape, sharding, _ = _parse_key(key, sep)

      def strip(hp):
        hp = copy.deepcopy(hp)
        hp.repeat_prefix, hp.repeat_prefix_split_dims_mapping = None, None
        return hp

      def restore(hp, shape=shape, sharding=sharding):
        hp.repeat_prefix, hp.repeat_prefix_split_dims_mapping = shape, sharding
        return hp

      inner = tx.init_partition_spec(jax.tree.map(strip, group, is_leaf=_is_hparams))
      results[key] = jax.tree.map(restore, inner, is_leaf=_is_hparams)
    return collapse(results)

  if isinstance(tx, ShardedGradientTransformation):
    return ShardedGradientTransformation(init_fn, update_fn, init_partition_spec_fn)
  return _PrefixVectorizationTransform(init_fn, update_fn, tx)


def partition_params(
  grad_tx: optax.GradientTransformation,
  var_weight_hparams: Any,
  opt_states: optax.OptState,
  repeat_prefix_sep: str = _REPEAT_PREFIX_SEP,
) -> Any:
  """optimizers.partition_params, group by group for a vectorized transformation's state."""
  del repeat_prefix_sep  # The groups are the state's own keys.
  if isinstance(grad_tx, _PrefixVectorizationTransform):
    inner = grad_tx.original_grad_tx
    if isinstance(opt_states, dict):
      return NestedMap(
        {
          key: optimizer_transforms.partition_params(inner, var_weight_hparams, group)
          for key, group in opt_states.items()
        }
      )
    grad_tx = inner
  return optimizer_transforms.partition_params(grad_tx, var_weight_hparams, opt_states)
