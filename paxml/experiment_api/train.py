"""The drivers: `train` (the training job) and `evaluate` (the evaluator).

train: seed, build the experiment, restore "latest" if there is one, run
  `experiment.train_loop` with the periodic actions (absl log line, "latest"
  checkpoint, writer scalars; the last step is always written), then a final
  "latest" save, wait for it, and a cross-process rendezvous so no host
  exits before the chief's checkpoint is on disk.
evaluate: watch "latest": evaluate each new checkpoint (only the newest at
  poll time; older unevaluated ones are skipped), track the "best" series
  (restored first after a restart), stop after the final step
  (`should_run_step` False) or after one pass with `one_off_evaluate`.
"""

from collections.abc import Callable
import inspect
import threading
import time
from typing import Any

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from paxml.experiment_api import checkpointer as checkpointer_lib
from paxml.experiment_api import periodic
from paxml.experiment_api import rng as rng_lib


def _make_experiment(experiment_class, mode: str, init_rng, config):
  kwargs = dict(config.experiment_kwargs) if config.get("experiment_kwargs") else {}
  if "init_rng" in inspect.signature(experiment_class.__init__).parameters:
    return experiment_class(mode, init_rng=init_rng, **kwargs)
  logging.warning("%s.__init__ takes no init_rng; accepting it is recommended: "
                  "__init__(self, mode, init_rng, ...).", experiment_class.__name__)
  return experiment_class(mode, **kwargs)


def _interval_type(config, override_name: str) -> str:
  override = config.get(override_name)
  return override if override is not None else config.interval_type


def _seed_keys(config) -> tuple[jax.Array, jax.Array]:
  """Returns (train_step_rng, init_rng)."""
  rng = jax.random.PRNGKey(config.random_seed)
  if config.legacy_random_seed_behavior:
    return rng, rng
  train_rng, init_rng = jax.random.split(rng)
  return train_rng, init_rng


def rendezvous() -> None:
  """Waits until every process gets here (a no-op with one process)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices("paxml.experiment_api.train: end of training")


def train(experiment_class, config, checkpointer, writer, periodic_actions=(),
          *, mode: str = "train") -> None:
  """Trains until `should_run_step` is False; see the module docstring."""
  logging.info("Training with config:\n%s", config)
  is_chief = jax.process_index() == 0
  is_checkpointer = config.train_checkpoint_all_hosts or is_chief
  train_rng, init_rng = _seed_keys(config)
  experiment = _make_experiment(experiment_class, mode, init_rng, config)

  state = checkpointer.get_experiment_state("latest")
  state.global_step = 0
  state.experiment_module = experiment
  state.train_step_rng = experiment.initialize_train_step_rng(train_rng)
  restored = checkpointer.can_be_restored("latest")
  if restored:
    checkpointer.restore("latest")

  now = time.time()
  growth = config.get("periodic_action_growth_ratios")
  actions = list(periodic_actions)
  actions.append(periodic.PeriodicAction(
      periodic.log_scalars, _interval_type(config, "logging_interval_type"),
      config.log_tensors_interval, start_time=now, start_step=state.global_step,
      run_async=config.log_async, logging_growth_ratios=growth,
      end_step_to_action=config.training_steps))
  if is_checkpointer and config.save_checkpoint_interval > 0:
    # Never async: a save races with the next step's buffers otherwise.
    actions.append(periodic.PeriodicAction(
        lambda t, step, scalars: checkpointer.save("latest"),
        _interval_type(config, "checkpoint_interval_type"),
        config.save_checkpoint_interval, start_time=now, start_step=state.global_step,
        logging_growth_ratios=growth))
  if (is_chief or config.log_all_hosts) and config.log_train_data_interval is not None:
    actions.append(periodic.PeriodicAction(
        lambda t, step, scalars: writer.write_scalars(step, scalars),
        _interval_type(config, "logging_interval_type"), config.log_train_data_interval,
        start_time=now, start_step=state.global_step, log_all_data=config.log_all_train_data,
        logging_growth_ratios=growth, end_step_to_action=config.training_steps))

  if config.save_initial_train_checkpoint and not restored and is_checkpointer:
    checkpointer.save("latest")
  experiment.train_loop(config, state, actions, writer)
  if is_checkpointer:
    checkpointer.save("latest")
    checkpointer.wait_for_checkpointing_to_finish()
  for action in actions:
    if hasattr(action, "wait_to_finish"):
      action.wait_to_finish()
  rendezvous()
  logging.info("Training finished at global_step %d", state.global_step)


def evaluate(experiment_class, config, checkpointer, writer, jaxline_mode: str | None = None,
             *, poll_interval_secs: float | None = None,
             sleep: Callable[[float], None] = time.sleep,
             stop: threading.Event | None = None) -> dict[str, Any]:
  """Evaluates new "latest" checkpoints until training is done.

  Args:
    jaxline_mode: the mode string given to the experiment (default 'eval').
    poll_interval_secs: wait between looks for a new checkpoint (default:
      config.eval_poll_interval_secs if set, else JAXline's 10 s).
    sleep: how to wait (tests pass a fake).
    stop: when set (e.g. the training thread failed), stop waiting.

  Returns:
    The scalars of the last evaluation.
  """
  mode = jaxline_mode or "eval"
  if poll_interval_secs is None:
    poll_interval_secs = config.get("eval_poll_interval_secs", 10.0)
  is_chief = jax.process_index() == 0
  experiment = _make_experiment(
      experiment_class, mode, jax.random.PRNGKey(config.random_seed), config)
  state = checkpointer.get_experiment_state("latest")
  state.global_step = 0
  state.experiment_module = experiment
  eval_rng = rng_lib.make_eval_rng(config.random_seed, config.random_mode_eval)

  metric = config.best_model_eval_metric
  higher = config.best_model_eval_metric_higher_is_better
  track_best = bool(metric) and (is_chief or config.best_checkpoint_all_hosts)
  best_state = None
  if track_best:
    best_state = checkpointer.get_experiment_state("best")
    best_state.best_eval_metric_value = checkpointer_lib.worst_value(higher)
    best_state.experiment_module = experiment
    # Before "latest": a restarted evaluator must not forget the best value.
    if checkpointer.can_be_restored("best"):
      checkpointer.restore("best")
      logging.info("Best %s so far: %s", metric, best_state.best_eval_metric_value)

  last_path, evaluated_initial, last_scalars = None, False, {}
  waited_since = None
  while True:
    path = checkpointer.restore_path("latest")
    if path is None and config.eval_initial_weights and not evaluated_initial:
      logging.info("Evaluating the initial weights (no checkpoint yet)")
      evaluated_initial = True
    elif path is None or path == last_path or not checkpointer.can_be_restored("latest"):
      if stop is not None and stop.is_set():
        logging.info("Stopping the evaluator: training ended without a new checkpoint.")
        break
      now = time.monotonic()
      if waited_since is None or now - waited_since >= 60:
        # Once a minute at most, and clearly not an error.
        logging.info(
            "Evaluator idle: waiting for a new checkpoint (last evaluated: %s); it polls "
            "every %.0fs. This is normal while training runs.",
            "none yet" if last_path is None else f"global_step {state.global_step}",
            poll_interval_secs)
        waited_since = now
      sleep(poll_interval_secs)
      continue
    else:
      checkpointer.restore("latest")
      last_path = path
    waited_since = None
    global_step = int(state.global_step)
    scalars = experiment.evaluate(
        global_step=rng_lib.bcast_local_devices(np.int32(global_step)), rng=eval_rng,
        writer=writer)
    if scalars is None:
      logging.log_first_n(logging.WARNING, "evaluate() returned None; return a dict of "
                          "scalars (treated as {}).", 1)
      scalars = {}
    scalars = {k: np.asarray(jax.device_get(v)) for k, v in scalars.items()}
    last_scalars = scalars
    logging.info("Evaluated global_step %d: %s", global_step, scalars)
    if writer is not None and (is_chief or config.log_all_hosts):
      writer.write_scalars(global_step, scalars)
    if track_best:
      if metric not in scalars:
        raise ValueError(f"best_model_eval_metric={metric!r} is not among the evaluate() "
                         f"outputs {sorted(scalars)}.")
      value = float(scalars[metric])
      if checkpointer_lib.is_better(value, best_state.best_eval_metric_value, higher):
        logging.info("%s: %s beats %s; saving a new best checkpoint.", metric, value,
                     best_state.best_eval_metric_value)
        experiment.on_new_best_model(best_state)
        best_state.best_eval_metric_value = value
        best_state.global_step = global_step
        checkpointer.save("best")
    if config.one_off_evaluate:
      break
    if not experiment.should_run_step(global_step, config):
      logging.info("Evaluated the final step %d; the evaluator is done.", global_step)
      break
  checkpointer.wait_for_checkpointing_to_finish()
  return last_scalars
