"""The drivers (`jaxline.train`): `train` (the training job) and `evaluate`.

train: seed, build the experiment in mode "train", restore "latest" if there
  is one, run `experiment.train_loop` with the periodic actions (absl log
  line, "latest" checkpoint, writer scalars; the last step is always
  written), then a final "latest" save, wait for it, and a rendezvous so no
  host exits before the chief's checkpoint is on disk.
evaluate: watch "latest": evaluate each new checkpoint (only the newest at
  poll time), track the "best" series (restored first after a restart),
  stop after the final step (`should_run_step` False) or after one pass with
  `one_off_evaluate`.
"""

from collections.abc import Callable
import functools
import inspect
import threading
import time
from typing import Any

from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from paxml import leader
from paxml.experiment_api import utils

FLAGS = flags.FLAGS


def _log_outputs(step: int, scalar_values: dict[str, Any]) -> None:
  logging.info(
    "global_step: %d, %s",
    step,
    jax.tree.map(
      lambda x: x.tolist() if isinstance(x, (np.ndarray, jax.Array)) else x, scalar_values
    ),
  )


def _initialize_experiment(experiment_class, mode: str, rng: jax.Array, experiment_kwargs: Any):
  """Builds the experiment; constructors without `init_rng` still work (warned)."""
  kwargs = dict(experiment_kwargs or {})
  if "init_rng" in inspect.signature(experiment_class).parameters:
    return experiment_class(mode, init_rng=rng, **kwargs)
  logging.warning(
    "You should add init_rng to your Experiment constructor, which we will use to pass "
    "you jaxline.base_config.random_seed: __init__(self, mode, init_rng, ...)."
  )
  return experiment_class(mode, **kwargs)


def _interval_type(config, override_name: str) -> str:
  return config.get(override_name) or config.interval_type


@utils.disable_pmap_jit
def train(
  experiment_class,
  config,
  checkpointer: utils.Checkpointer,
  writer: utils.Writer | None,
  periodic_actions=(),
) -> None:
  """Trains until `should_run_step` is False; see the module docstring."""
  logging.info("Training with config:\n%s", config)
  is_chief = leader.is_leader()
  is_checkpointer = config.train_checkpoint_all_hosts or is_chief
  rng = jax.random.PRNGKey(config.random_seed)
  if config.legacy_random_seed_behavior:
    train_step_rng = init_rng = rng
  else:
    train_step_rng, init_rng = jax.random.split(rng)
  with utils.log_activity("experiment init"):
    experiment = _initialize_experiment(
      experiment_class, "train", init_rng, config.experiment_kwargs
    )
  state = checkpointer.get_experiment_state("latest")
  state.global_step = 0
  state.experiment_module = experiment
  state.train_step_rng = experiment.initialize_train_step_rng(train_step_rng)
  if checkpointer.can_be_restored("latest"):
    with utils.log_activity("checkpoint restore"):
      checkpointer.restore("latest")

  growth = config.get("periodic_action_growth_ratios")
  periodic_actions = tuple(periodic_actions) + (
    utils.PeriodicAction(
      _log_outputs,
      interval_type=_interval_type(config, "logging_interval_type"),
      interval=config.log_tensors_interval,
      logging_growth_ratios=growth,
      run_async=config.log_async,
    ),
  )
  if is_checkpointer and config.save_checkpoint_interval > 0:
    periodic_actions += (
      utils.PeriodicAction(
        lambda *_: checkpointer.save("latest"),
        interval_type=_interval_type(config, "checkpoint_interval_type"),
        interval=config.save_checkpoint_interval,
        logging_growth_ratios=growth,
        run_async=False,
      ),
    )  # Async would race with the next step's buffers.
  if (is_chief or config.log_all_hosts) and writer is not None:
    if config.log_train_data_interval is not None:
      periodic_actions += (
        utils.PeriodicAction(
          writer.write_scalars,
          interval_type=_interval_type(config, "logging_interval_type"),
          interval=config.log_train_data_interval,
          logging_growth_ratios=growth,
          log_all_data=config.log_all_train_data,
          end_step_to_action=config.training_steps,
        ),
      )
  for action in periodic_actions:
    action.update_time(time.time(), state.global_step)

  if (
    is_checkpointer
    and config.save_initial_train_checkpoint
    and not checkpointer.can_be_restored("latest")
  ):
    with utils.log_activity("first checkpoint"):
      checkpointer.save("latest")
  experiment.train_loop(config, state, list(periodic_actions), writer)
  if is_checkpointer:
    with utils.log_activity("final checkpoint"):
      checkpointer.save("latest")
      checkpointer.wait_for_checkpointing_to_finish()
  for action in periodic_actions:
    action.wait_to_finish()
  # Every host joins one collective, so none exits before the chief's save.
  utils.rendezvous()


def _is_better(value: Any, best: float, higher_is_better: bool) -> bool:
  return bool((jnp.greater if higher_is_better else jnp.less)(value, best))


@utils.disable_pmap_jit
def evaluate(
  experiment_class,
  config,
  checkpointer: utils.Checkpointer,
  writer: utils.Writer | None,
  jaxline_mode: str | None = None,
  *,
  stop: threading.Event | None = None,
  poll_interval_secs: float | None = None,
  sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
  """Evaluates new "latest" checkpoints until training is done.

  Args:
    experiment_class: the experiment.
    config: the config.
    checkpointer: reads "latest", writes "best".
    writer: gets each evaluation's scalars.
    jaxline_mode: the experiment's mode string (default --jaxline_mode).
    stop: when set (train_eval_multithreaded: training ended), stop waiting
      for a new checkpoint.
    poll_interval_secs: wait between looks for a new checkpoint (default:
      config.eval_poll_interval_secs if set, else JAXline's 10 s).
    sleep: how to wait (tests pass a fake).

  Returns:
    The scalars of the last evaluation.
  """
  if jaxline_mode is None:
    # --jaxline_mode is defined by `platform`; a driver called alone evaluates.
    jaxline_mode = (
      FLAGS["jaxline_mode"].value if "jaxline_mode" in FLAGS and FLAGS.is_parsed() else "eval"
    )
  if poll_interval_secs is None:
    poll_interval_secs = config.get("eval_poll_interval_secs", 10.0)
  logging.info("Evaluating with config:\n%s", config)
  eval_rng = jax.random.PRNGKey(config.random_seed)
  experiment = _initialize_experiment(
    experiment_class, jaxline_mode, eval_rng, config.experiment_kwargs
  )
  higher = config.best_model_eval_metric_higher_is_better
  save_best = bool(config.best_model_eval_metric) and (
    config.best_checkpoint_all_hosts or leader.is_leader()
  )
  best_state = None
  if save_best:
    best_state = checkpointer.get_experiment_state("best")
    best_state.best_eval_metric_value = float("-inf") if higher else float("inf")
    best_state.best_model_eval_metric = config.best_model_eval_metric
    best_state.experiment_module = experiment
    if checkpointer.can_be_restored("best"):
      with utils.log_activity("best checkpoint restore"):
        checkpointer.restore("best")
  state = checkpointer.get_experiment_state("latest")
  state.global_step = 0
  state.experiment_module = experiment
  state.train_step_rng = None

  eval_rng = jnp.broadcast_to(eval_rng, (jax.local_device_count(),) + eval_rng.shape)
  host_ids = utils.host_id_devices_for_rng(config.random_mode_eval)
  if host_ids is None:
    host_ids = np.zeros([jax.local_device_count()], np.int32)
  eval_rng = jax.pmap(
    functools.partial(
      utils.specialize_rng_host_device, axis_name="i", mode=config.random_mode_eval
    ),
    axis_name="i",
  )(eval_rng, host_ids)

  old_path, initial_done, scalars, waited_since = None, False, {}, None
  while True:
    path = checkpointer.restore_path("latest")
    if config.one_off_evaluate:
      if checkpointer.can_be_restored("latest"):
        with utils.log_activity("one off evaluate checkpoint restore"):
          checkpointer.restore("latest")
      elif config.eval_initial_weights:
        logging.info("Evaluating initial weights for one_off_evaluate.")
      else:
        raise ValueError("Checkpoint invalid and eval_initial_weights set to False")
    elif path is None and config.eval_initial_weights and not initial_done:
      initial_done = True
    elif path in (None, old_path) or not checkpointer.can_be_restored("latest"):
      if stop is not None and stop.is_set():
        logging.info("Training ended without a new checkpoint; the evaluator stops.")
        break
      now = time.monotonic()
      if waited_since is None or now - waited_since >= 60:
        logging.info(
          "Evaluator waiting for a new checkpoint (last evaluated: %s); polling "
          "every %.0fs. This is normal while training runs.",
          "none" if old_path is None else f"global_step {state.global_step}",
          poll_interval_secs,
        )
        waited_since = now
      sleep(poll_interval_secs)
      continue
    else:
      checkpointer.restore("latest")
    waited_since = None
    scalars = utils.evaluate_should_return_dict(experiment.evaluate)(
      global_step=utils.bcast_local_devices(jnp.asarray(state.global_step)),
      rng=eval_rng,
      writer=writer,
    )
    if writer is not None:
      writer.write_scalars(state.global_step, scalars)
    old_path = path
    if save_best:
      metric = config.best_model_eval_metric
      if metric not in scalars:
        raise ValueError(
          f"config.best_model_eval_metric has been specified as {metric}, but "
          f"this key was not returned by the evaluate method. Got: "
          f"{scalars.keys()}"
        )
      value = scalars[metric]
      previous = best_state.best_eval_metric_value
      if _is_better(value, previous, higher):
        logging.info(
          "%s: %s %s %s, saving new best checkpoint.",
          metric,
          value,
          ">" if higher else "<",
          previous,
        )
        best_state.global_step = state.global_step
        best_state.experiment_module = experiment
        best_state.best_eval_metric_value = value
        best_state.train_step_rng = state.train_step_rng
        experiment.on_new_best_model(best_state)
        checkpointer.save("best")
    if config.one_off_evaluate or not experiment.should_run_step(state.global_step, config):
      logging.info("Last checkpoint (iteration %d) evaluated, exiting.", state.global_step)
      break
  checkpointer.wait_for_checkpointing_to_finish()
  return scalars
