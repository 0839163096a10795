"""Pax's gradient transformations with sharding specs (the pieces of `praxis.optimizers`).

Pax builds an optimizer as a chain of transformations that, besides optax's `init` and `update`,
can say how their state is sharded: `init_partition_spec(var_weight_hparams)` returns the state's
tree with a `WeightHParams` (shape, dtype, `tensor_split_dims_mapping`) where the state holds an
array. `ShardedGradientTransformation` is that triple; every function here returns one (or a
plain `optax.GradientTransformationExtraArgs` when `use_optax_gradient_transformations=True`,
which is how `OptaxOptimizer` chains them around a user's optax transformation).

The formulas are Pax's:
  * apply_lp_regularizer: `g + w * p` (L2) or `g + w * sign(p)` (L1), per variable masked by the
    SKIP_LP_REGULARIZATION collection (and 1-D vectors with `skip_lp_1d_vectors`); runs before
    the optimizer.
  * apply_decoupled_weight_decay: `u - lr(step) * w * p`; runs after the optimizer.
  * apply_ewc_regularization: `u - lr(step) * w * (p - p0)` with p0 the parameters at the first
    update and `w = ewc_regularizer_weight / 2` (times `ewc_weight_per_var` when given).
  * apply_ema_weights: `ema -= (1 - d) * (ema - p)` with p the parameters before the update
    (Pax's order), started at the initial parameters, d = min(decay, (1 + n) / (10 + n)).
  * sharded_static_accumulation: sums `num_sub_batches` updates, then hands their mean to the
    wrapped transformation; zero updates in between.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from praxis import pytypes
from praxis import weight_hparams as wh

NestedMap = pytypes.NestedMap
WeightHParams = wh.WeightHParams


@dataclasses.dataclass(frozen=True)
class ShardedGradientTransformation:
  """An optax transformation that also gives its state's sharding (`init_partition_spec`)."""

  init: Callable[[Any], Any]
  update: Callable[..., Any]
  init_partition_spec: Callable[[Any], Any]


GeneralGradientTransformation = optax.GradientTransformation | ShardedGradientTransformation


def _replicated_scalar(dtype=jnp.int32) -> WeightHParams:
  return WeightHParams(
    shape=[], init=None, dtype=dtype, collections=None, tensor_split_dims_mapping=[]
  )


def count_init_fn(_):
  """A state that only counts the updates (the step)."""
  return NestedMap(count=jnp.zeros([], jnp.int32))


def count_init_partition_spec_fn(var_hparams: Any) -> NestedMap:
  del var_hparams
  return NestedMap(count=_replicated_scalar())


def var_skip_lp_regularization(var_hparams: WeightHParams) -> bool:
  """Whether a variable is in the SKIP_LP_REGULARIZATION collection."""
  collections = getattr(var_hparams, "collections", None) or ()
  return wh.WeightHParamsCollection.SKIP_LP_REGULARIZATION in collections


def is_masked_node(x: Any) -> bool:
  return isinstance(x, optax.MaskedNode)


def _wrap(init, update, partition_spec, use_optax: bool) -> GeneralGradientTransformation:
  if use_optax:
    return optax.GradientTransformationExtraArgs(init=init, update=update)
  return ShardedGradientTransformation(init=init, update=update, init_partition_spec=partition_spec)


def partition_params(grad_tx: Any, var_weight_hparams: Any, opt_states: Any) -> Any:
  """The sharding (WeightHParams) of each array of `opt_states`.

  Arrays shaped like the parameters take their parameter's WeightHParams; every other state
  array (counts, scalars) is replicated, and so is the whole state of a transformation whose
  init cannot be traced with optax's parameter placeholder.
  """

  def for_param(value, spec):
    return None if is_masked_node(value) else spec

  def for_other(value):
    return WeightHParams(
      shape=getattr(value, "shape", []),
      init=None,
      dtype=jnp.int32,
      collections=None,
      tensor_split_dims_mapping=[],
    )

  try:
    return optax.tree_map_params(
      grad_tx,
      for_param,
      opt_states,
      var_weight_hparams,
      transform_non_params=for_other,
      is_leaf=is_masked_node,
    )
  except (TypeError, AttributeError, ValueError):
    # optax finds the parameter-shaped arrays by calling init on a placeholder; an init that
    # computes with its parameters (reductions, factored statistics) cannot take one. Its state
    # is then replicated.
    return jax.tree.map(
      lambda x: WeightHParams(
        shape=list(getattr(x, "shape", [])),
        init=None,
        dtype=getattr(x, "dtype", None),
        collections=None,
        tensor_split_dims_mapping=[-1] * len(getattr(x, "shape", [])),
      ),
      opt_states,
    )


def sharded_chain(*args: GeneralGradientTransformation) -> ShardedGradientTransformation:
  """optax.chain that also chains `init_partition_spec` (every part must have one)."""

  def init_fn(params):
    return tuple(fn.init(params) for fn in args)

  def update_fn(updates, state, params=None):
    if len(args) != len(state):
      raise ValueError(f"sharded_chain: {len(args)} transformations but {len(state)} states.")
    new_state = []
    for s, fn in zip(state, args):
      updates, s = fn.update(updates, s, params)
      new_state.append(
        jax.tree.map(
          lambda x: optax.MaskedNode() if x is None else x, s, is_leaf=lambda x: x is None
        )
      )
    return updates, tuple(new_state)

  def init_partition_spec_fn(var_hparams):
    specs = []
    for fn in args:
      spec_fn = getattr(fn, "init_partition_spec", None)
      if not callable(spec_fn):
        raise ValueError(
          f"sharded_chain: {fn} has no init_partition_spec; use ShardedGradientTransformations "
          "(or optax.chain when no sharding is needed)."
        )
      specs.append(spec_fn(var_hparams))
    return optax.MaskedState(inner_state=tuple(specs))

  return ShardedGradientTransformation(init_fn, update_fn, init_partition_spec_fn)


def sharded_masked(
  inner: GeneralGradientTransformation, mask: Any, use_custom_masked: bool = False
) -> GeneralGradientTransformation:
  """optax.masked keeping `inner`'s init_partition_spec (when it has one)."""
  del use_custom_masked  # Pax's flag, unused there too.
  masked = optax.masked(inner, mask)
  spec_fn = getattr(inner, "init_partition_spec", None)
  if not callable(spec_fn):
    return masked
  return ShardedGradientTransformation(masked.init, masked.update, spec_fn)


def apply_lp_regularizer(
  var_lp_mask: Any,
  regularizer_weight: float | None = 0.0,
  p: float | None = 2.0,
  skip_lp_1d_vectors: bool | None = False,
  use_optax_gradient_transformations: bool = False,
):
  """Adds the gradient of an L1 (p=1) or L2 (p=2) penalty: `g + w * sign(p)` or `g + w * p`."""
  if p not in (1.0, 2.0):
    raise ValueError(f"apply_lp_regularizer: p must be 1 or 2, got {p}.")

  def term(param):
    return jnp.sign(param) if p == 1.0 else param

  def update_fn(updates, state, params=None):
    if regularizer_weight:
      if params is None:
        raise ValueError("Lp regularization needs the parameters: update(grads, state, params).")

      def one(g, param, m=1.0):
        if is_masked_node(g):
          return g
        skip = 0.0 if skip_lp_1d_vectors and param.ndim <= 1 else 1.0
        return g + regularizer_weight * term(param) * skip * m

      if var_lp_mask is None:
        updates = jax.tree.map(one, updates, params)
      else:
        updates = jax.tree.map(one, updates, params, var_lp_mask, is_leaf=is_masked_node)
    return updates, NestedMap(count=state.count + 1)

  return _wrap(
    count_init_fn, update_fn, count_init_partition_spec_fn, use_optax_gradient_transformations
  )


def apply_decoupled_weight_decay(
  learning_rate_fn: Callable[[Any], Any],
  var_wd_mask: Any,
  regularizer_weight: float | None = 0.0,
  use_optax_gradient_transformations: bool = False,
):
  """`u - lr(step) * w * p` after the optimizer (AdamW-style decay that follows the schedule)."""

  def update_fn(updates, state, params=None):
    if regularizer_weight:
      if params is None:
        raise ValueError("Weight decay needs the parameters: update(grads, state, params).")
      lr = learning_rate_fn(state.count)

      def one(u, param, m=1.0):
        return u if is_masked_node(u) else u - lr * regularizer_weight * param * m

      if var_wd_mask is None:
        updates = jax.tree.map(one, updates, params)
      else:
        updates = jax.tree.map(one, updates, params, var_wd_mask, is_leaf=is_masked_node)
    return updates, NestedMap(count=state.count + 1)

  return _wrap(
    count_init_fn, update_fn, count_init_partition_spec_fn, use_optax_gradient_transformations
  )


def _copy_leaf(x):
  # optax.tree_map_params calls init with a placeholder object: pass it through.
  return jnp.copy(x) if hasattr(x, "dtype") else x


def _zeros_leaf(x):
  return jnp.zeros_like(x) if hasattr(x, "dtype") else x


def apply_ewc_regularization(
  learning_rate_fn: Callable[[Any], Any],
  ewc_regularizer_weight: float = 0.0,
  ewc_weight_per_var: Any = None,
  use_optax_gradient_transformations: bool = False,
):
  """Elastic weight consolidation: pulls the parameters back to those of the first update.

  The penalty `w/2 * (p - p0)**2` enters as `u - lr(step) * w/2 * (p - p0)`; p0 is taken from
  the parameters at the first update (count 0), so a restored pre-trained model anchors itself.
  """
  enabled = ewc_regularizer_weight > 0.0
  half = ewc_regularizer_weight / 2.0

  def init_fn(params):
    if not enabled:
      return NestedMap(count=jnp.zeros([], jnp.int32))
    weights = jax.tree.map(
      lambda v: jnp.asarray(half, v.dtype) if hasattr(v, "dtype") else v, params
    )
    return NestedMap(
      count=jnp.zeros([], jnp.int32),
      pretrain_vars=jax.tree.map(_copy_leaf, params),
      var_weights=weights,
    )

  def update_fn(updates, state, params=None):
    if not enabled:
      return updates, NestedMap(count=state.count + 1)
    if params is None:
      raise ValueError("EWC needs the parameters: update(grads, state, params).")
    first = state.count == 0
    lr = learning_rate_fn(state.count)
    anchors = jax.tree.map(lambda p, v: jnp.where(first, p, v), params, state.pretrain_vars)
    weights = state.var_weights
    if ewc_weight_per_var is not None:
      # The per-variable weights scale the base weight once, at the first update.
      weights = jax.tree.map(
        lambda w, p, extra: jnp.where(first, (w * extra).astype(p.dtype), w),
        weights,
        params,
        ewc_weight_per_var,
      )
    updates = jax.tree.map(
      lambda u, p, w, v: u if is_masked_node(u) else u - lr * w * (p - v),
      updates,
      params,
      weights,
      anchors,
    )
    return updates, NestedMap(count=state.count + 1, pretrain_vars=anchors, var_weights=weights)

  def partition_spec_fn(var_hparams):
    count = _replicated_scalar()
    if not enabled:
      return NestedMap(count=count)
    like = lambda x: WeightHParams(
      shape=x.shape,
      init=None,
      dtype=x.dtype,
      collections=None,
      tensor_split_dims_mapping=x.tensor_split_dims_mapping,
    )
    scalar = lambda x: _replicated_scalar(x.dtype)
    is_hp = lambda x: isinstance(x, WeightHParams)
    return NestedMap(
      count=count,
      pretrain_vars=jax.tree.map(like, var_hparams, is_leaf=is_hp),
      var_weights=jax.tree.map(scalar, var_hparams, is_leaf=is_hp),
    )

  return _wrap(init_fn, update_fn, partition_spec_fn, use_optax_gradient_transformations)


def apply_ema_weights(decay: float, use_optax_gradient_transformations: bool = False):
  """Keeps an EMA of the parameters *before* each update (Pax's order: non-trainable variables
  have no updates here); the updates pass unchanged. The EMA starts at the initial parameters and
  its decay ramps up as `min(decay, (1 + n) / (10 + n))` at update n; integer and bool variables
  are copied, not averaged."""

  def init_fn(params):
    return NestedMap(count=jnp.zeros([], jnp.int32), ema=jax.tree.map(_copy_leaf, params))

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("The parameter EMA needs the parameters: update(grads, state, params).")
    n = state.count.astype(jnp.float32)
    rate = 1.0 - jnp.minimum(decay, (1.0 + n) / (10.0 + n))

    def one(old, new):
      if old.dtype == jnp.bool_ or jnp.issubdtype(old.dtype, jnp.integer):
        return new
      return old - rate * (old - new)

    return updates, NestedMap(count=state.count + 1, ema=jax.tree.map(one, state.ema, params))

  def partition_spec_fn(var_hparams):
    is_hp = lambda x: isinstance(x, WeightHParams)
    like = lambda x: WeightHParams(
      shape=x.shape,
      init=None,
      dtype=x.dtype,
      collections=None,
      tensor_split_dims_mapping=x.tensor_split_dims_mapping,
    )
    return NestedMap(count=_replicated_scalar(), ema=jax.tree.map(like, var_hparams, is_leaf=is_hp))

  return _wrap(init_fn, update_fn, partition_spec_fn, use_optax_gradient_transformations)


def sharded_sgd(
  learning_rate_fn: Callable[[Any], Any], momentum: float | None, nesterov: bool
) -> ShardedGradientTransformation:
  """`-lr(step) * g`, or with momentum `m = momentum * m + g` (nesterov: `g + momentum * m`)."""

  def init_fn(params):
    state = NestedMap(count=jnp.zeros([], jnp.int32))
    if momentum is not None:
      state.m = jax.tree.map(_zeros_leaf, params)
    return state

  def update_fn(updates, state, params=None):
    del params
    new_state = NestedMap(count=state.count + 1)
    if momentum is not None:
      m = jax.tree.map(lambda g, t: g + momentum * t, updates, state.m)
      new_state.m = m
      updates = jax.tree.map(lambda g, t: g + momentum * t, updates, m) if nesterov else m
    lr = learning_rate_fn(state.count)
    return jax.tree.map(lambda g: -lr * g, updates), new_state

  def partition_spec_fn(var_hparams):
    spec = NestedMap(count=_replicated_scalar())
    if momentum is not None:
      spec.m = var_hparams
    return spec

  return ShardedGradientTransformation(init_fn, update_fn, partition_spec_fn)


def sharded_static_accumulation(
  num_sub_batches: int,
  base_tx: GeneralGradientTransformation,
  accumulation_use_cond_op: bool = False,
):
  """Sums `num_sub_batches` updates and every `num_sub_batches`-th step hands their mean to
  `base_tx`; the steps in between return zero updates."""
  del accumulation_use_cond_op  # Both branches are computed under jnp.where either way.

  def init_fn(params):
    return NestedMap(
      count=jnp.zeros([], jnp.int32),
      inner_state=base_tx.init(params),
      accumulated_update=jax.tree.map(_zeros_leaf, params),
    )

  def update_fn(updates, state, params=None):
    total = jax.tree.map(lambda a, u: a + u, state.accumulated_update, updates)
    count = state.count + 1
    apply = count % num_sub_batches == 0
    mean = jax.tree.map(lambda a: a / num_sub_batches, total)
    stepped, inner = base_tx.update(mean, state.inner_state, params)
    out = jax.tree.map(lambda s: jnp.where(apply, s, jnp.zeros_like(s)), stepped)
    inner = jax.tree.map(lambda new, old: jnp.where(apply, new, old), inner, state.inner_state)
    total = jax.tree.map(lambda a: jnp.where(apply, jnp.zeros_like(a), a), total)
    return out, NestedMap(count=count, inner_state=inner, accumulated_update=total)

  def partition_spec_fn(var_hparams):
    return NestedMap(
      count=_replicated_scalar(),
      inner_state=base_tx.init_partition_spec(var_hparams),
      accumulated_update=var_hparams,
    )

  return ShardedGradientTransformation(init_fn, update_fn, partition_spec_fn)
