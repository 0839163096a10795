"""Pax's `paxml.learners.Learner`: which loss to minimise and with which optimizer.

Pax experiments set it through the task config:

    lp = task_p.train.learner
    lp.loss_name = 'total_loss'
    lp.optimizer = pax_fiddle.Config(optimizers.Adam, beta1=0.9, beta2=0.99,
                                     clip_gradient_norm_to_value=5.0, learning_rate=2.5e-4,
                                     lr_schedule=pax_fiddle.Config(schedules.Constant))

The fields are Pax's, with Pax's defaults, and so are the methods a Pax step function calls:
`get_grad_tx(var_weight_hparams)` (the optimizer's sharded chain, vectorized over scanned layers'
repeat prefix), `scale_gradients` (clipping and the valid-step check), `update_states` (the
transformation, skipping anomalous steps) and `apply_gradient` (adds the update to the learnable
variables). `MultiOptimizerLearner` gives variables matching `auxiliary_regex` their own optimizer.

The trainer (paxml/trainer.py) applies `optimizer` (clipping, weight
decay and schedule are the optimizer's fields, praxis/optimizers.py) and `loss_name` (which must
name the model's training loss, `total_loss` for praxis models); it skips steps whose loss or
gradients are NaN/Inf as Pax's `check_valid_step` / `enable_skip_step_on_gradient_anomalies` do.
`HONOURED` lists these; a task that sets any other field away from its default trains as if it
had not, and `tasks_lib.to_task_config` logs each such field by name.
"""

from collections.abc import Sequence
import dataclasses
import re
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
import optax

from praxis import base_hyperparams
from praxis import base_layer
from praxis import optimizer_prefix_vectorization as opt_vec
from praxis import optimizers
from praxis import py_utils
from praxis import pytypes

NestedMap = pytypes.NestedMap
_AGGREGATE = base_layer.SummaryType.AGGREGATE_SCALAR


def _global_norm(tree: Any) -> jax.Array:
  """sqrt of the sum of squares over every array of `tree` (masked nodes count as nothing)."""
  leaves = [x for x in jax.tree.leaves(tree) if hasattr(x, "shape")]
  return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in leaves))


def _summary(name: str, value: Any) -> None:
  """A learner summary when a JaxContext collects them (Pax's step functions open one)."""
  if base_layer.JaxContext.has_context():
    base_layer.add_global_summary(name, jnp.asarray(value), _AGGREGATE)


def _keep_where(valid: Any, new: Any, old: Any) -> Any:
  """`new` where the step is valid, else `old`; optax's masked nodes pass through."""
  if py_utils.is_optax_masked_node(new) or py_utils.is_optax_masked_node(old):
    return new
  return jnp.where(valid, new, old)


class Learner(base_hyperparams.FiddleBaseParameterizable):
  """Pax's Learner fields (see the module docstring for what this trainer applies).

  Attributes:
    loss_name: the metric minimised; praxis models call it 'total_loss'.
    optimizer: a praxis optimizer config (praxis.optimizers.Adam, ShardedAdafactor, ...).
    stochastic_gradient: Pax's DP-SGD / MC gradient transform (not provided here).
    skip_zero_gradients: Pax's None or 'variable' (skip all-zero gradients).
    grad_norm_summary: export the gradient norm.
    grad_norm_individual_vars: export each variable's gradient norm.
    var_norm_summary: export the parameter norm.
    var_norm_individual_vars: export each variable's norm.
    check_valid_step: skip steps with NaN/Inf loss or gradients.
    vectorize_on_repeat_prefix: vectorize optimizer state over scanned layers' leading dims.
    force_repeat_prefix_structure: Pax's legacy-checkpoint switch.
    skip_step_gradient_norm_value: skip a step whose gradient norm exceeds this (0: never).
    enable_skip_step_on_gradient_anomalies: skip steps whose gradients are NaN/Inf.
    bprop_variable_exclusion: regexes of variables kept fixed.
    bprop_variable_inclusion: regexes of the only variables trained.
    repeat_prefix_sep: separator of repeated-layer names in Pax's checkpoints.
    keep_optimizer_state_for_excluded_vars: keep optimizer state of excluded variables.
    scale_update_by_var_norm: scale updates by the initial variable norm.
  """

  loss_name: str | None = None
  optimizer: Any = None
  stochastic_gradient: Any = None
  skip_zero_gradients: bool | None = None
  grad_norm_summary: bool = True
  grad_norm_individual_vars: bool = False
  var_norm_summary: bool = True
  var_norm_individual_vars: bool = False
  check_valid_step: bool = True
  vectorize_on_repeat_prefix: bool = True
  force_repeat_prefix_structure: bool = False
  skip_step_gradient_norm_value: float = 0.0
  enable_skip_step_on_gradient_anomalies: bool = True
  bprop_variable_exclusion: str | Sequence[str] = ()
  bprop_variable_inclusion: str | Sequence[str] = ()
  repeat_prefix_sep: str = "#"
  keep_optimizer_state_for_excluded_vars: bool = False
  scale_update_by_var_norm: bool = False

  def __post_init__(self):
    parent = getattr(super(), "__post_init__", None)
    if parent is not None:
      parent()
    if self.force_repeat_prefix_structure and not self.vectorize_on_repeat_prefix:
      raise ValueError(
        "Learner: force_repeat_prefix_structure=True only applies with "
        "vectorize_on_repeat_prefix=True; set both or neither."
      )

  def _optimizer(self) -> Any:
    """The optimizer object (a config left unbuilt, e.g. under a template field, is built)."""
    if self.optimizer is None:
      raise ValueError(f"Learner {self.name!r} has no optimizer; set learner.optimizer.")
    return base_hyperparams.instantiate(self.optimizer)

  def plot_learning_rate(self, step: Any) -> None:
    """Adds the learning rate at `step` as the 'lr' and 'learning/lr' summaries."""
    lr = self._optimizer().get_learning_rate(step)
    _summary("lr", lr)
    _summary("learning/lr", lr)

  def get_grad_tx(self, var_weight_hparams: Any) -> Any:
    """The optimizer's transformation for these variables (vmapped over repeat prefixes)."""
    tx = self._optimizer().get_grad_transformation(var_weight_hparams)
    if not self.vectorize_on_repeat_prefix:
      return tx
    return opt_vec.get_transformations_with_vectorized_repeat_prefix(
      tx,
      var_weight_hparams,
      self.repeat_prefix_sep,
      force_prefix_structure=self.force_repeat_prefix_structure,
    )

  def summarize_norms(self, summary_prefix: str, tensors: Any) -> None:
    """One `<summary_prefix>/<variable path>` summary per tensor: its L2 norm."""
    names = py_utils.extract_prefixed_keys_from_nested_map(tensors)
    jax.tree.map(
      lambda name, x: _summary(f"{summary_prefix}/{name}", jnp.sqrt(jnp.sum(x * x))),
      names,
      tensors,
    )

  def _is_valid(self, grad_norm: jax.Array) -> jax.Array:
    """A step is valid when the gradient norm is finite (and under the skip threshold)."""
    valid = jnp.all(jnp.isfinite(grad_norm))
    if self.skip_step_gradient_norm_value:
      valid &= jnp.all(grad_norm < self.skip_step_gradient_norm_value)
    return valid

  def scale_gradients(
    self,
    raw_grads: Any,
    optimizer_name: str | None = None,
    clip_gradient_norm_to_value: float | None = None,
    clip_gradient_single_norm_to_value: float | None = None,
  ) -> tuple[Any, jax.Array]:
    """Clips the gradients (global or per-tensor norm) and checks them.

    The clip values default to the optimizer's. Returns (clipped gradients, valid) where
    `valid` is False for a step whose gradient norm is NaN/Inf (or over
    skip_step_gradient_norm_value); True (a Python bool) when check_valid_step is off.
    """
    opt = self._optimizer()
    prefix = "learning/" + (f"{optimizer_name}/" if optimizer_name else "")
    global_clip = (
      opt.clip_gradient_norm_to_value
      if clip_gradient_norm_to_value is None
      else clip_gradient_norm_to_value
    ) or 0.0
    single_clip = (
      opt.clip_gradient_single_norm_to_value
      if clip_gradient_single_norm_to_value is None
      else clip_gradient_single_norm_to_value
    ) or 0.0
    if global_clip and single_clip:
      raise ValueError(
        "Learner.scale_gradients: set one of clip_gradient_norm_to_value and "
        f"clip_gradient_single_norm_to_value, not both (got {global_clip}, {single_clip})."
      )
    if self.grad_norm_individual_vars:
      per_var = "per_var_grad_norm" + (f"/{optimizer_name}/" if optimizer_name else "")
      self.summarize_norms(per_var.rstrip("/"), raw_grads)
    raw_norm = _global_norm(raw_grads)
    if self.grad_norm_summary:
      _summary(prefix + "raw_grad_norm", raw_norm)

    scale = jnp.ones((), jnp.float32)
    grads = raw_grads
    if global_clip:
      # g * min(1, c / |g|): the global norm becomes min(|g|, c).
      scale = jnp.minimum(1.0, global_clip / raw_norm).astype(raw_norm.dtype)
      grads = jax.tree.map(lambda g: g * scale, raw_grads)
    elif single_clip:
      grads = jax.tree.map(
        lambda g: g * jnp.minimum(1.0, single_clip / jnp.sqrt(jnp.sum(g * g))), raw_grads
      )

    valid = True
    if self.check_valid_step:
      valid = self._is_valid(raw_norm)
      _summary(prefix + "is_valid_step", valid.astype(jnp.float32))
    _summary(prefix + "grad_scale", scale)
    if self.grad_norm_summary:
      _summary(prefix + "clipped_grad_norm", _global_norm(grads))
    return grads, valid

  def _without_overwritten(self, tree: Any, var_weight_hparams: Any) -> Any:
    """`tree` with the overwrite-with-gradient variables (fp8 scales) masked out."""
    masked = py_utils.is_bprop_masked_node
    return jax.tree.map(
      lambda x, hp: (
        py_utils.BpropMaskedNode()
        if masked(x) or masked(hp) or base_layer.var_overwrite_with_gradient(hp)
        else x
      ),
      tree,
      var_weight_hparams,
      is_leaf=masked,
    )

  def _skip_invalid(self, valid: Any, transformed: Any, new_states: Any, states: Any):
    """Zero update and old optimizer state on an invalid step (when skipping is enabled)."""
    if not self.enable_skip_step_on_gradient_anomalies:
      return transformed, new_states
    transformed = jax.tree.map(lambda u: jnp.where(valid, u, jnp.zeros_like(u)), transformed)
    new_states = jax.tree.map(
      lambda n, o: _keep_where(valid, n, o),
      new_states,
      states,
      is_leaf=py_utils.is_optax_masked_node,
    )
    return transformed, new_states

  def update_states(
    self, grads: Any, states: Any, old_vars: Any, var_weight_hparams: Any
  ) -> tuple[Any, Any]:
    """Clips `grads`, runs the optimizer; returns (updates to add, new optimizer states).

    Variables marked overwrite-with-gradient skip the optimizer: their "update" is their raw
    gradient (apply_gradient then replaces the variable with it).
    """
    raw_grads = grads
    grads, valid = self.scale_gradients(self._without_overwritten(grads, var_weight_hparams))
    transformed, new_states = self.get_grad_tx(
      self._without_overwritten(var_weight_hparams, var_weight_hparams)
    ).update(grads, states, self._without_overwritten(old_vars, var_weight_hparams))
    transformed, new_states = self._skip_invalid(valid, transformed, new_states, states)
    if self.grad_norm_summary:
      _summary("learning/applied_grad_norm", _global_norm(transformed))
    masked = py_utils.is_bprop_masked_node
    transformed = jax.tree.map(
      lambda hp, g, u: g if not masked(hp) and base_layer.var_overwrite_with_gradient(hp) else u,
      var_weight_hparams,
      raw_grads,
      transformed,
      is_leaf=lambda x: isinstance(x, base_layer.WeightHParams) or masked(x),
    )
    return transformed, new_states

  def apply_gradient(self, old_vars: Any, transformed_grads: Any, var_weight_hparams: Any) -> Any:
    """The new variables: learnable ones plus their update, the others unchanged.

    With scale_update_by_var_norm, each update of a matrix is scaled by the variable's init
    scale (praxis' var_init_scale); overwrite-with-gradient variables become their gradient.
    """
    if self.skip_zero_gradients is not None:
      raise NotImplementedError(
        "Learner.skip_zero_gradients is not implemented (Pax does not implement it either); "
        "leave it None."
      )
    if self.var_norm_summary:
      _summary("learning/var_norm", _global_norm(old_vars))
    if self.var_norm_individual_vars:
      self.summarize_norms("per_var_norm", old_vars)
    names = py_utils.extract_prefixed_keys_from_nested_map(old_vars)

    def new_var(old, update, hp, name):
      if py_utils.is_bprop_masked_node(old) or base_layer.var_not_trainable(hp):
        return old
      if base_layer.var_overwrite_with_gradient(hp):
        return update
      if not self.scale_update_by_var_norm:
        return old + update
      # Vectors and scalars keep the raw update; matrices move in units of their init scale.
      magnitude = 1.0 if len(hp.shape) <= 1 else base_layer.var_init_scale(hp, name)
      logging.info("var %s: update scaled by %f", name, magnitude)
      return old + update * magnitude

    return jax.tree.map(
      new_var,
      old_vars,
      transformed_grads,
      var_weight_hparams,
      names,
      is_leaf=py_utils.is_bprop_masked_node,
    )


# The fields this trainer applies (see the module docstring); `name` only labels the learner,
# and the summaries and repeat-prefix layout are this trainer's own.
HONOURED = frozenset(
  {
    "name",
    "loss_name",
    "optimizer",
    "check_valid_step",
    "enable_skip_step_on_gradient_anomalies",
    "grad_norm_summary",
    "var_norm_summary",
    "vectorize_on_repeat_prefix",
    "repeat_prefix_sep",
  }
)


class MultiOptimizerLearner(Learner):
  """A learner whose variables matching `auxiliary_regex[i]` use `auxiliary_optimizers[i]`.

  Every other variable uses `optimizer`. The regexes must not overlap (a variable matched by
  two raises). By default one clipping covers all gradients (the main optimizer's); with
  `apply_separate_scaling` each optimizer's group is clipped by its own settings.

  Attributes:
    auxiliary_optimizers: optimizer configs, one per regex.
    auxiliary_regex: regexes matched (from the start) against variable paths ('a/b/w').
    auxiliary_names: names of the auxiliary optimizers (summary names).
    apply_separate_scaling: clip each optimizer's gradients separately.
  """

  auxiliary_optimizers: Sequence[Any] = ()
  auxiliary_regex: Sequence[str] = ()
  auxiliary_names: Sequence[str] = ()
  apply_separate_scaling: bool = False
  _auxiliary_optimizer_insts: Any = dataclasses.field(init=False, repr=False, default=None)

  def __post_init__(self):
    super().__post_init__()
    lengths = {len(self.auxiliary_optimizers), len(self.auxiliary_regex), len(self.auxiliary_names)}
    if len(lengths) != 1:
      raise ValueError(
        "MultiOptimizerLearner: auxiliary_optimizers, auxiliary_regex and auxiliary_names must "
        f"have the same length (got {len(self.auxiliary_optimizers)}, "
        f"{len(self.auxiliary_regex)}, {len(self.auxiliary_names)})."
      )
    insts = [base_hyperparams.instantiate(o) for o in self.auxiliary_optimizers]
    object.__setattr__(self, "_auxiliary_optimizer_insts", insts)

  def plot_learning_rate(self, step: Any) -> None:
    _summary("learning/lr_main", self._optimizer().get_learning_rate(step))
    for name, opt in zip(self.auxiliary_names, self._auxiliary_optimizer_insts):
      _summary(f"learning/lr_{name}", opt.get_learning_rate(step))

  def get_masks(self, var_weight_hparams: Any) -> tuple[list[Any], Any]:
    """(one bool tree per auxiliary regex, the main optimizer's bool tree)."""
    names = py_utils.extract_prefixed_keys_from_nested_map(var_weight_hparams)
    masks = [
      jax.tree.map(lambda n, r=re.compile(regex): r.match(n) is not None, names)
      for regex in self.auxiliary_regex
    ]

    def main_owns(name, *matched):
      if sum(bool(m) for m in matched) > 1:
        raise ValueError(
          f"MultiOptimizerLearner: variable {name!r} matches more than one of "
          f"auxiliary_regex={list(self.auxiliary_regex)}; make the regexes non-overlapping."
        )
      return not any(matched)

    return masks, jax.tree.map(main_owns, names, *masks)

  def get_grad_tx(self, var_weight_hparams: Any) -> Any:
    """A chain of masked transformations, one per optimizer (the main one's EMA first)."""
    masks, main_mask = self.get_masks(var_weight_hparams)
    main = self._optimizer()
    optax_style = isinstance(main, optimizers.OptaxOptimizer)
    chain = []
    if main.ema_decay > 0.0:
      chain.append(optimizers.apply_ema_weights(main.ema_decay, optax_style))
    chain.append(
      optimizers.sharded_masked(
        main.get_grad_transformation(var_weight_hparams, include_ema=False), main_mask
      )
    )
    for mask, opt in zip(masks, self._auxiliary_optimizer_insts):
      chain.append(
        optimizers.sharded_masked(
          opt.get_grad_transformation(var_weight_hparams, include_ema=False), mask
        )
      )
    tx = optax.chain(*chain) if optax_style else optimizers.sharded_chain(*chain)
    if self.vectorize_on_repeat_prefix:
      tx = opt_vec.get_transformations_with_vectorized_repeat_prefix(tx, var_weight_hparams)
    return tx

  def scale_gradients_by_optimizer(self, raw_grads: Any, var_weight_hparams: Any):
    """Clips each optimizer's group of gradients with that optimizer's settings."""
    masks, main_mask = self.get_masks(var_weight_hparams)
    grads, valid = self.scale_gradients(
      jax.tree.map(lambda g, m: g * m, raw_grads, main_mask), optimizer_name="main"
    )
    for name, mask, opt in zip(self.auxiliary_names, masks, self._auxiliary_optimizer_insts):
      part, part_valid = self.scale_gradients(
        jax.tree.map(lambda g, m: g * m, raw_grads, mask),
        optimizer_name=name,
        clip_gradient_norm_to_value=opt.clip_gradient_norm_to_value,
        clip_gradient_single_norm_to_value=opt.clip_gradient_single_norm_to_value,
      )
      grads = jax.tree.map(jnp.add, grads, part)
      valid = jnp.logical_and(valid, part_valid)
    return grads, valid

  def update_states(self, grads: Any, states: Any, old_vars: Any, var_weight_hparams: Any):
    if self.apply_separate_scaling:
      grads, valid = self.scale_gradients_by_optimizer(grads, var_weight_hparams)
    else:
      grads, valid = self.scale_gradients(grads)
    transformed, new_states = self.get_grad_tx(var_weight_hparams).update(grads, states, old_vars)
    return self._skip_invalid(valid, transformed, new_states, states)
