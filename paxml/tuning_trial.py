"""One tuning trial's side of Pax's tuning loop: the early-stopping function the trainer calls
with tuning metrics (`EarlyStoppingFn`), and the trial's log directory name
(`TrialDirectoryNameGenerator`). Both are re-exported by `paxml.tuning_lib` under Pax's names.
"""

import inspect
import math
import re
from typing import Any

from absl import logging
from etils import epath
import jax
from paxml import automl
from paxml import trainer_lib
from praxis import py_utils
import pyglove as pg


class EarlyStoppingFn:
  """Reports one sub-experiment's metrics to its trial and says whether to stop.

  The trainer calls it after evaluating/decoding (and at the last checkpoint) with the flat
  tuning metrics (`tuning_lib.should_early_stop` builds them). On the metric-reporting role it
  turns them into a reward and a measurement at step `tuning_step_start + global_step`; at the
  last checkpoint of the last sub-experiment it adds a final measurement from the cross-step
  aggregator and completes the trial. It returns True when the trial is done or the tuner
  asks it to stop.
  """

  def __init__(
    self,
    feedback: pg.tuning.Feedback,
    sub_experiment_id: str,
    reward_fn: automl.BaseReward | None,
    cross_step_metric_aggregator: automl.CrossStepMetricAggregator,
    is_metric_reporting_role: bool,
    is_last_experiment: bool,
    tuning_step_start: int,
    treats_early_stopped_trials_as_done: bool,
    train_to_end: bool,
  ):
    self._feedback = feedback
    self._sub_experiment_id = sub_experiment_id
    self._reward_fn = reward_fn
    self._aggregator = cross_step_metric_aggregator
    self._is_metric_reporting_role = is_metric_reporting_role
    self._is_last_experiment = is_last_experiment
    self._tuning_step_start = tuning_step_start
    self._early_stopped_is_done = treats_early_stopped_trials_as_done
    self._train_to_end = train_to_end
    self._needs_eval_or_decode = reward_fn is not None and (
      reward_fn.needs_eval or reward_fn.needs_decode
    )

  @property
  def train_to_end(self) -> bool:
    return self._train_to_end

  def __call__(
    self,
    metrics: dict[str, float],
    running_mode: trainer_lib.RunningMode,
    global_step: int,
    is_last_ckpt: bool,
    checkpoint_path: epath.Path | None = None,
  ) -> bool:
    tuning_step = self._tuning_step_start + global_step
    ckpt = str(checkpoint_path)
    if self._is_metric_reporting_role:
      if running_mode.has_eval or running_mode.has_decode:
        self._report_then_sync(metrics, running_mode, tuning_step, is_last_ckpt, ckpt)
      elif is_last_ckpt and self._needs_eval_or_decode:
        # Training ended; the reward needs eval/decode metrics, reported earlier (or never).
        if jax.process_index() == 0:
          if not self._feedback.get_trial().measurements:
            self._feedback.skip(
              "No eval/decode has taken place before training ended. "
              f"(trial={self._feedback.id}, step={global_step})"
            )
          elif self._is_last_experiment:
            self._complete_trial(True, tuning_step + 1, ckpt)
      elif is_last_ckpt:
        # The reward reads training metrics only: report the last step's.
        self._report_then_sync(metrics, running_mode, tuning_step, is_last_ckpt, ckpt)
      else:
        return False
    return self._poll_stop()

  def _report_then_sync(self, metrics, running_mode, tuning_step, is_last_ckpt, ckpt):
    # Reporting may raise (e.g. FloatingPointError on a NaN reward, which the tuning loop turns
    # into an infeasible trial); every host must still reach the same barrier, since
    # checkpointing syncs hosts too and the sequences of barriers must match.
    try:
      if jax.process_index() == 0:
        self._update_metrics(metrics, running_mode, tuning_step, is_last_ckpt, ckpt)
    finally:
      py_utils.sync_global_devices(
        f"Sync on trial {self._feedback.id} after reporting at tuning step {tuning_step}."
      )

  def _poll_stop(self) -> bool:
    if self._feedback.get_trial().status == "COMPLETED":
      stop = True
    elif self._feedback.should_stop_early():
      if jax.process_index() == 0:
        self._done_or_skip()
      stop = True
    else:
      stop = False
    if stop:
      py_utils.sync_global_devices(f"Sync on trial {self._feedback.id} upon completion.")
    return stop

  def _done_or_skip(self, reason: str | None = None) -> None:
    """Ends an early-stopped trial: done when configured so and it has measurements."""
    if self._early_stopped_is_done and self._feedback.get_trial().measurements:
      self._feedback.done()
    elif reason is None:
      self._feedback.skip()
    else:
      self._feedback.skip(reason)

  def _reward(self, metrics: dict[str, float], tuning_step: int) -> float:
    return 0.0 if self._reward_fn is None else self._reward_fn(metrics, tuning_step)

  def _reward_and_used_metrics(self, metrics: dict[str, float], tuning_step: int):
    """The reward and the metrics the reward reads (all of them without a reward)."""
    reward = self._reward(metrics, tuning_step)
    if self._reward_fn is None:
      return reward, metrics
    used = {}
    for metric in self._reward_fn.used_metrics:
      used.update(metric.match_items(metrics))
    return reward, used

  def _update_metrics(self, metrics, running_mode, tuning_step, is_last_ckpt, ckpt):
    if self._sub_experiment_id:
      metrics = {f"{k}:{self._sub_experiment_id}": v for k, v in metrics.items()}
    try:
      reward, used = self._reward_and_used_metrics(metrics, tuning_step)
      if math.isnan(reward):
        raise FloatingPointError("Reward is NaN.")
      self._feedback.add_measurement(reward, metrics=used, step=tuning_step, checkpoint_path=ckpt)
      logging.info(
        "Trial %d (sub-experiment %r) step %d: reward %f (mode=%s, last=%s) %s",
        self._feedback.id,
        self._sub_experiment_id,
        tuning_step,
        reward,
        running_mode,
        is_last_ckpt,
        used,
      )
      if is_last_ckpt and self._is_last_experiment:
        self._complete_trial(True, tuning_step + 1, ckpt)
    except automl.EarlyStoppingError as e:
      if e.skip:
        logging.info(
          "Trial %d stopped early at step %s: %s", self._feedback.id, e.step, e.skip_reason
        )
        self._done_or_skip(e.skip_reason or "Unknown.")
        return
      reward = e.reward
      if reward is None:
        reward = self._reward(e.metrics, e.step)
      self._feedback.add_measurement(
        reward=reward, step=e.step, metrics=e.metrics, checkpoint_path=e.checkpoint
      )
      self._complete_trial(checkpoint_path=ckpt)
      logging.info(
        "Trial %d stopped early at step %s with reward %f.", self._feedback.id, e.step, reward
      )

  def _complete_trial(self, aggregate_metrics=False, global_step=None, checkpoint_path=None):
    """Completes the trial, first adding the cross-step aggregate as its final measurement."""
    if aggregate_metrics:
      across_steps = []
      for m in self._feedback.get_trial().measurements:
        step_metrics = dict(m.metrics)
        step_metrics["reward"] = m.reward
        across_steps.append((m.step, step_metrics))
      final = dict(self._aggregator(across_steps))
      final.pop("reward", None)  # The final reward is recomputed from the final metrics.
      reward, used = self._reward_and_used_metrics(final, global_step)
      self._feedback.add_measurement(
        reward, used, step=global_step, checkpoint_path=checkpoint_path
      )
    self._feedback.done()


class TrialDirectoryNameGenerator:
  """Names each trial's log directory `<root>/<trial id>/<decisions>`, readable in TensorBoard.

  `<decisions>` is `name=value|name=value...`, or only the values when the decision names
  together are `total_name_length_threshold` characters or longer. Floats print as `%.3e`,
  classes by name, custom decision points as `(CUSTOM)`; other values are stripped of
  characters a path should not hold.
  """

  _NOT_PATH_FRIENDLY = re.compile(r"[^\w\d=_-{}\(\).,\[\]]+")
  _REPLACEMENTS = ((":", "="), ("[", "{"), ("]", "}"), (",", "."))

  def __init__(
    self,
    root_dir: epath.Path,
    search_space: pg.hyper.DynamicEvaluationContext,
    combined_decision_point_names: list[str] | None = None,
    total_name_length_threshold: int = 64,
  ):
    names = list(search_space.hyper_dict.keys())
    if combined_decision_point_names:
      if names != [automl.COMBINED_DECISION_ATTR]:
        raise ValueError(
          f"A parameter sweep over {combined_decision_point_names} must have the one decision "
          f"point {automl.COMBINED_DECISION_ATTR!r}, found {names}."
        )
      names = list(combined_decision_point_names)
    self._root_dir = root_dir
    self._search_space = search_space
    self._names = names
    self._combined = bool(combined_decision_point_names)
    self._include_names = sum(len(n) for n in names) < total_name_length_threshold

  def parameter_values(self) -> list[tuple[str, Any]]:
    """(name, value) of each decision in the current trial (call inside the trial)."""
    params = []
    for name, hyper in self._search_space.hyper_dict.items():
      value = self._search_space.evaluate(hyper)
      if isinstance(hyper, pg.hyper.CustomHyper):
        value = "(CUSTOM)"
      params.append((name, value))
    if self._combined:
      ((_, row),) = params
      params = list(zip(self._names, row))
    return params

  def format_value(self, value: Any) -> str:
    if isinstance(value, float):
      return f"{value:.3e}"
    if isinstance(value, (bool, int)):
      return str(value)
    if inspect.isclass(value):
      return value.__name__
    text = str(value)
    for old, new in self._REPLACEMENTS:
      text = text.replace(old, new)
    return self._NOT_PATH_FRIENDLY.sub("", text)

  def dirname(self, trial_id: int) -> epath.Path:
    pairs = [(k, self.format_value(v)) for k, v in self.parameter_values()]
    items = [f"{k}={v}" for k, v in pairs] if self._include_names else [v for _, v in pairs]
    return self._root_dir / str(trial_id) / "|".join(items)
