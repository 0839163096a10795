"""Pax's `paxml.trainer_lib`: initialise a task's model state and run train / eval steps.

The library API a Pax script is written against (the train loop, paxml/trainer.py, has its own
jitted step over the same TrainState; see docs/experiments.md):

    task = base_hyperparams.instantiate(task_p)           # a tasks_lib.SingleTask
    state, _ = trainer_lib.initialize_model_state(task, key, inputs_shape_dtype)
    state, out = trainer_lib.train_step_single_learner(task, state, key, batch)
    _, out = trainer_lib.eval_step_single_learner(task, state.to_eval_state(), key, batch)

`out` is a `StepFnOutput` (loss, weighted_scalars, per_example_out, summary_tensors). A train
step takes the gradient of the learner's `loss_name` metric, leaves the learner's
bprop-excluded variables (and non-trainable ones) where they were, and updates the rest with
`learner.update_states` / `learner.apply_gradient` (paxml/learners.py).

`create_train_state_metadata` gives the shapes and partition specs of that state;
`write_post_init_model_hparams_file` writes Pax's post_init_model_params.txt. `RunningMode` is
what Pax's early-stopping functions receive.
"""

import dataclasses
import enum
import re
from typing import Any, Callable

from absl import logging
from etils import epath
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from paxml import checkpoint_types
from paxml import tasks_lib
from paxml import train_states
from praxis import base_hyperparams
from praxis import base_layer
from praxis import py_utils

NestedMap = py_utils.NestedMap
TrainState = train_states.TrainState
CheckpointType = checkpoint_types.CheckpointType
PARAMS = base_layer.PARAMS
NON_TRAINABLE = base_layer.NON_TRAINABLE


class RunningMode(enum.Flag):
  """What a program is running (Pax's flag enum)."""

  UNKNOWN = 0
  TRAIN = enum.auto()
  EVAL = enum.auto()
  DECODE = enum.auto()

  @classmethod
  def detect(cls, has_train_metrics: bool, has_eval_metrics: bool, has_decode_metrics: bool):
    """The modes whose metrics are present (Pax's `detect`)."""
    mode = cls.UNKNOWN
    if has_train_metrics:
      mode |= cls.TRAIN
    if has_eval_metrics:
      mode |= cls.EVAL
    if has_decode_metrics:
      mode |= cls.DECODE
    return mode

  @property
  def has_train(self) -> bool:
    return bool(self & RunningMode.TRAIN)

  @property
  def has_eval(self) -> bool:
    return bool(self & RunningMode.EVAL)

  @property
  def has_decode(self) -> bool:
    return bool(self & RunningMode.DECODE)


@dataclasses.dataclass
class TrainStateMetadata:
  """What building and partitioning a task's TrainState needs (Pax's fields)."""

  input_shape_dtype: Any
  var_weight_hparams: Any
  padded_global_shapes: TrainState | None = None
  unpadded_global_shapes: TrainState | None = None
  partition_specs: TrainState | None = None


def create_train_state_metadata(
  jax_task: tasks_lib.SingleTask,
  train_shape_dtype: Any,
  discard_opt_states: bool = False,
  do_eval: bool = False,
) -> TrainStateMetadata:
  """The model's WeightHParams for inputs like `train_shape_dtype` and the train state's global
  shapes (padded and not) and partition specs (None without a mesh)."""
  var_weight_hparams = jax_task.model.abstract_init_with_metadata(
    train_shape_dtype, do_eval=do_eval
  )
  return TrainStateMetadata(
    input_shape_dtype=train_shape_dtype,
    var_weight_hparams=var_weight_hparams,
    padded_global_shapes=jax_task.create_train_state_padded_shapes(
      var_weight_hparams, discard_opt_states=discard_opt_states
    ),
    unpadded_global_shapes=jax_task.create_train_state_unpadded_shapes(
      var_weight_hparams, discard_opt_states=discard_opt_states
    ),
    partition_specs=jax_task.create_train_state_partition_specs(
      var_weight_hparams, discard_opt_states=discard_opt_states
    ),
  )


def write_post_init_model_hparams_file(
  model: Any,
  train_state_metadata: TrainStateMetadata,
  job_log_dir: epath.PathLike,
  do_eval: bool = False,
) -> None:
  """Writes `job_log_dir/post_init_model_params.txt`: each layer's config as built, a blank
  line, then each variable's WeightHParams (process 0 only)."""
  if jax.process_index() != 0:
    return
  job_log_dir = epath.Path(job_log_dir)
  job_log_dir.mkdir(parents=True, exist_ok=True)
  configs = model.abstract_init_with_mdl_config(
    train_state_metadata.input_shape_dtype, do_eval=do_eval
  )
  text = (
    base_hyperparams.nested_struct_to_text(configs)
    + "\n\n"
    + base_hyperparams.nested_struct_to_text(train_state_metadata.var_weight_hparams)
  )
  path = job_log_dir / "post_init_model_params.txt"
  path.write_text(text)
  logging.info("post_init_model_params: %s", path)


def _init_rngs(prng_key: jax.Array) -> dict[str, jax.Array]:
  _, k_params, k_random, k_other = jax.random.split(prng_key, 4)
  return {PARAMS: k_params, base_layer.RANDOM: k_random, base_layer.NON_PAX_RNG_KEY: k_other}


def initialize_model_state(
  jax_task: tasks_lib.SingleTask,
  prng_key: jax.Array,
  inputs_shape_dtype: Any,
  discard_opt_states: bool = False,
  do_init_checkpoint_rules: bool = True,
  is_eval: bool = False,
  checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED,
  var_weight_hparams: Any = None,
) -> tuple[TrainState, "train_states.TrainStateProvenance"]:
  """A freshly initialised TrainState (step 0, optimizer state unless discarded) and where
  each part came from.

  Warm starts (`train.init_from_checkpoint_rules`) are the trainer's (paxml/warm_start.py,
  applied when a run starts); here a task that sets them with do_init_checkpoint_rules raises
  rather than silently starting from random weights.
  """
  del checkpoint_type  # One checkpoint format here (paxml/checkpoints.py).
  rules = jax_task.train.init_from_checkpoint_rules
  if do_init_checkpoint_rules and rules:
    raise NotImplementedError(
      "initialize_model_state: train.init_from_checkpoint_rules is applied by the trainer "
      "(paxml/warm_start.py) when a run starts, not here; pass do_init_checkpoint_rules=False "
      "and restore with checkpoints.restore_checkpoint, or run the trainer."
    )
  model = jax_task.model
  eval_init = False if jax_task.train.always_use_train_for_model_init else is_eval
  if not var_weight_hparams:
    var_weight_hparams = model.abstract_init_with_metadata(inputs_shape_dtype, do_eval=eval_init)

  @jax.jit
  def init(rngs):
    context = base_layer.JaxContext.HParams(
      do_eval=eval_init, summary_verbosity=jax_task.summary_verbosity
    )
    with base_layer.JaxContext.new_context(hparams=context):
      inputs = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), inputs_shape_dtype)
      return model.init(rngs, inputs)

  variables = dict(init(_init_rngs(prng_key)))
  variables.pop("params_axes", None)
  variables = {k: v for k, v in variables.items() if k in var_weight_hparams}
  state = jax_task.create_train_state(variables, var_weight_hparams, discard_opt_states)
  return state, train_states.build_train_state_provenance(state)


def replicate_model_state(model_states: TrainState) -> TrainState:
  """Each array stacked once per local device and laid out one copy per device (Pax's pmap
  layout); arrays already spread over several devices are left as they are."""
  devices = jax.local_devices()
  mesh = jax.sharding.Mesh(np.array(devices), ("_device_put_sharded",))
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("_device_put_sharded"))

  def replicate(x):
    if isinstance(x, jax.Array) and len(x.devices()) != 1:
      return x
    stacked = (
      jnp.stack([x] * len(devices)) if isinstance(x, jax.Array) else np.stack([x] * len(devices))
    )
    return jax.device_put(stacked, sharding)

  return jax.tree.map(replicate, model_states)


def initialize_replicate_model_state(
  jax_task: tasks_lib.SingleTask,
  prng_key: jax.Array,
  inputs_shape_dtype: Any,
  discard_opt_states: bool = False,
) -> TrainState:
  state, _ = initialize_model_state(jax_task, prng_key, inputs_shape_dtype, discard_opt_states)
  return replicate_model_state(state)


@flax.struct.dataclass
class BaseStepFnStaticArgs:
  """Static (hashable) arguments of a step function; subclass to add your own."""

  unpadded_global_batch_size: int | None


@flax.struct.dataclass
class StepFnOutput:
  """What a step function returns besides the state."""

  loss: Any
  weighted_scalars: Any
  per_example_out: Any
  summary_tensors: Any
  clu_metrics: dict[str, Any] | None = None


def get_excluded_var_masks(var_weight_hparams: Any, learner: Any) -> tuple[Any, Any]:
  """(variables without a gradient, variables without optimizer state) for `learner`."""
  return (
    tasks_lib.get_excluded_var_mask_for_grad(var_weight_hparams, learner),
    tasks_lib.get_excluded_var_mask_for_opt(var_weight_hparams, learner),
  )


def _default_apply_fn(model, variables, inputs, mutable, rngs):
  return model.apply(variables, inputs, mutable=mutable, rngs=rngs)


def _step_rngs(prng_key: jax.Array, step: Any) -> dict[str, jax.Array]:
  key = jax.random.fold_in(prng_key, jnp.asarray(step, jnp.uint32))
  k_random, k_other = jax.random.split(key)
  return {base_layer.RANDOM: k_random, base_layer.NON_PAX_RNG_KEY: k_other}


def _loss(weighted_scalars: Any, loss_name: str | None) -> jax.Array:
  """The learner's loss from the model's metrics (name -> (value, weight))."""
  name = loss_name or "total_loss"
  if name not in weighted_scalars:
    raise KeyError(
      f"learner.loss_name={name!r} is not one of the model's metrics "
      f"{sorted(weighted_scalars)}; set train.learner.loss_name to the loss to minimise."
    )
  value = weighted_scalars[name]
  return value[0] if isinstance(value, tuple) else value


def _summaries(updated_vars: Any) -> dict[str, Any]:
  """The layers' sown summaries flattened to 'path/name_type' keys."""
  summaries = updated_vars.get(base_layer.SUMMARIES, {})
  flat = py_utils.extract_prefixed_keys_from_nested_map(summaries)
  return {k: v for k, v in zip(jax.tree.leaves(flat), jax.tree.leaves(summaries))}


def _with_variational_noise(jax_task, mdl_vars: Any, step: Any, prng_key: jax.Array) -> Any:
  """`mdl_vars` with Gaussian noise of scale vn.vn_scale on the params whose path matches
  vn.vn_regex (from the start), from step vn.vn_start_step on (Pax's variational noise): only
  the forward pass sees it; the stored weights are updated without it."""
  vn = jax_task.vn
  if not vn.vn_scale:
    return mdl_vars
  pattern = re.compile(vn.vn_regex)
  params = mdl_vars[PARAMS]
  names = jax.tree.leaves(py_utils.extract_prefixed_keys_from_nested_map(params))
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(prng_key, len(leaves))
  on = jnp.asarray(step) >= vn.vn_start_step
  noisy = [
    jnp.where(on, x + vn.vn_scale * jax.random.normal(k, x.shape, x.dtype), x)
    if pattern.match(name)
    else x
    for x, k, name in zip(leaves, keys, names)
  ]
  return {**mdl_vars, PARAMS: jax.tree.unflatten(treedef, noisy)}


def train_step_single_learner(
  jax_task: tasks_lib.SingleTask,
  states: TrainState,
  prng_key: jax.Array,
  inputs: Any,
  fprop_dtype: Any = jnp.float32,
  var_weight_hparams: Any = None,
  static_args: BaseStepFnStaticArgs | None = None,
  *,
  grad_fn: Callable[..., Any] | None = None,
  apply_fn: Callable[..., Any] | None = None,
  expose_updated_nontrainables_to_learner: bool = True,
) -> tuple[TrainState, StepFnOutput]:
  """One update of `states` on `inputs` with the task's (single) learner (module docstring).

  `grad_fn(loss_fn, mdl_vars, inputs, rngs) -> ((loss, aux), grads)` replaces the gradient
  computation, `apply_fn(model, variables, inputs, mutable, rngs)` the model call.
  """
  del fprop_dtype, static_args  # The model's own fprop_dtype applies.
  model = jax_task.model
  (learner,) = jax_task.learners
  if var_weight_hparams is None:
    var_weight_hparams = model.abstract_init_with_metadata(inputs)
  apply_fn = apply_fn or _default_apply_fn
  excluded_grad, excluded_opt = get_excluded_var_masks(var_weight_hparams, learner)
  rngs = _step_rngs(prng_key, states.step)
  mutable = [base_layer.AUX_LOSS, base_layer.SUMMARIES, NON_TRAINABLE]

  vn_key = jax.random.fold_in(rngs[base_layer.RANDOM], 1)

  def loss_fn(trainable, inputs, rngs):
    # Excluded variables enter as constants: no gradient flows to them.
    mdl_vars = jax.tree.map(
      lambda e, fixed, var: fixed if e else var, excluded_grad, states.mdl_vars, trainable
    )
    mdl_vars = _with_variational_noise(jax_task, mdl_vars, states.step, vn_key)
    context = base_layer.JaxContext.HParams(
      do_eval=False, summary_verbosity=jax_task.summary_verbosity
    )
    with base_layer.JaxContext.new_context(hparams=context):
      (weighted_scalars, per_example_out), updated = apply_fn(
        model, mdl_vars, inputs, mutable, rngs
      )
    return _loss(weighted_scalars, learner.loss_name), (weighted_scalars, per_example_out, updated)

  if grad_fn is None:
    grad_fn = lambda fn, v, x, r: jax.value_and_grad(fn, has_aux=True)(v, x, r)  # noqa: E731
  (loss, (weighted_scalars, per_example_out, updated)), grads = grad_fn(
    loss_fn, states.mdl_vars, inputs, rngs
  )
  mdl_vars = dict(states.mdl_vars)
  if expose_updated_nontrainables_to_learner and NON_TRAINABLE in updated:
    mdl_vars[NON_TRAINABLE] = updated[NON_TRAINABLE]

  # The learner sees the variables it keeps optimizer state for (masked nodes for the rest).
  with_opt = jax.tree.map(lambda eo, eg: eo and eg, excluded_opt, excluded_grad)
  vars_opt = tasks_lib.filter_vars_for_grad_or_opt(mdl_vars, with_opt)
  hparams_opt = tasks_lib.filter_vars_for_grad_or_opt(var_weight_hparams, with_opt)
  grads_opt = tasks_lib.filter_vars_for_grad_or_opt(grads, with_opt)
  context = base_layer.JaxContext.HParams(do_eval=False)
  with base_layer.JaxContext.new_context(hparams=context):
    learner.plot_learning_rate(states.step)
    transformed, new_opt_state = learner.update_states(
      grads_opt, states.opt_states[0], vars_opt, hparams_opt
    )
    vars_opt = learner.apply_gradient(vars_opt, transformed, hparams_opt)
    learner_summaries = dict(base_layer.all_global_summaries())
  mdl_vars = jax.tree.map(
    lambda e, old, new: old if e else new,
    excluded_grad,
    mdl_vars,
    vars_opt,
    is_leaf=py_utils.is_bprop_masked_node,
  )
  if NON_TRAINABLE in updated:
    mdl_vars[NON_TRAINABLE] = updated[NON_TRAINABLE]
  new_states = states.new_state(mdl_vars=mdl_vars, opt_states=[new_opt_state], extra_state=())
  summaries = _summaries(updated)
  summaries.update(learner_summaries)
  return new_states, StepFnOutput(
    loss=loss,
    weighted_scalars=weighted_scalars,
    per_example_out=per_example_out,
    summary_tensors=summaries,
  )


def eval_step_single_learner(
  jax_task: tasks_lib.SingleTask,
  states: TrainState,
  prng_key: jax.Array,
  inputs: Any,
  fprop_dtype: Any = jnp.float32,
  var_weight_hparams: Any = None,
  static_args: BaseStepFnStaticArgs | None = None,
  *,
  apply_fn: Callable[..., Any] | None = None,
) -> tuple[None, StepFnOutput]:
  """The model's metrics on `inputs` in eval mode (no dropout); the state is not changed."""
  del fprop_dtype, var_weight_hparams, static_args
  (learner,) = jax_task.learners
  apply_fn = apply_fn or _default_apply_fn
  context = base_layer.JaxContext.HParams(
    do_eval=True, summary_verbosity=jax_task.summary_verbosity
  )
  with base_layer.JaxContext.new_context(hparams=context):
    (weighted_scalars, per_example_out), updated = apply_fn(
      jax_task.model,
      states.mdl_vars,
      inputs,
      [base_layer.AUX_LOSS, base_layer.SUMMARIES],
      _step_rngs(prng_key, states.step),
    )
  loss = None
  if (learner.loss_name or "total_loss") in weighted_scalars:
    loss = _loss(weighted_scalars, learner.loss_name)
  return None, StepFnOutput(
    loss=loss,
    weighted_scalars=weighted_scalars,
    per_example_out=per_example_out,
    summary_tensors=_summaries(updated),
  )


# Pax's signature of the early-stopping function the trainer calls after each eval/decode:
# (tuning metrics, running mode, global step, is last checkpoint, checkpoint path) -> stop?
# tuning_lib.EarlyStoppingFn is the one `tuning_lib.tune` gives each trial.
EarlyStoppingFn = Callable[[dict[str, float], RunningMode, int, bool, Any], bool]
