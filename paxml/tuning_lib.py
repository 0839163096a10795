"""Pax's tuning loop: `tune` runs an experiment's trials with PyGlove, `get_search_space`
collects its decision points, `should_early_stop` is what the trainer calls to report tuning
metrics, `is_last_checkpoint` says when a trial's last report is due.

A trial function `trial_fn(experiment, work_unit, job_log_dir, early_stopping_fn)` trains one
configuration; inside it every decision point (`pg.oneof`, class-level attributes, ...) reads
the trial's choice. Without a Vizier service (OSS Pax), a study named 'local...' runs in this
process and its results are read back with `pg.tuning.poll_result(study)`.
"""

import base64
import copy
import dataclasses
import lzma
import os
from typing import Any, Callable, NamedTuple, Sequence, Type

from absl import logging
from clu import platform
from etils import epath
import jax
from paxml import automl
from paxml import base_experiment
from paxml import metric_utils
from paxml import trainer_lib
from paxml import tuning_trial
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import py_utils
import pyglove as pg

instantiate = base_hyperparams.instantiate
EarlyStoppingFn = tuning_trial.EarlyStoppingFn
TrialDirectoryNameGenerator = tuning_trial.TrialDirectoryNameGenerator
TrialFn = Callable[
  [base_experiment.BaseExperiment, platform.WorkUnit, epath.Path, trainer_lib.EarlyStoppingFn],
  None,
]

# Pax's name for automl.SUB_EXPERIMENT_STEP_OFFSET (the step range of each sub-experiment).
SUB_EXPERIMENT_STEP_INTERVAL = automl.SUB_EXPERIMENT_STEP_OFFSET


def _search_param(experiment_config, param_name: str, default: Any = None) -> Any:
  """A field of the experiment's `search()`, or `default` when it has none."""
  try:
    return getattr(experiment_config.search(), param_name)
  except NotImplementedError:
    return default


@py_utils.benchmark("[PAX STATUS]: ")
def get_search_space(
  experiment_config: base_experiment.BaseExperiment,
) -> pg.hyper.DynamicEvaluationContext:
  """Traces the experiment's config methods and returns the decision points they read.

  `task()` always; with `enable_dataset_tuning` the training inputs are also instantiated (a
  SeqIO mixture's weights are decided only when it is built) and `decode_datasets()` read;
  the partitioner and train programs only when their `enable_*_tuning` is set. Every decision
  point needs a name.
  """

  def inspect_search_space() -> None:
    if _search_param(experiment_config, "enable_partitioner_tuning", False):
      experiment_config.partitioner()
    if _search_param(experiment_config, "enable_train_programs_tuning", False):
      experiment_config.train_programs()
    experiment_config.task()
    if _search_param(experiment_config, "enable_dataset_tuning", False):
      for dataset in experiment_config.datasets():
        if dataset.is_training:
          instantiate(dataset)
      experiment_config.decode_datasets()

  search_space = pg.hyper.trace(inspect_search_space, require_hyper_name=True)
  names = list(search_space.hyper_dict)
  if automl.COMBINED_DECISION_ATTR in names and len(names) != 1:
    swept = getattr(experiment_config, automl.COMBINED_DECISION_POINT_NAMES)
    extra = [n for n in names if n != automl.COMBINED_DECISION_ATTR]
    raise ValueError(
      f"Found extra tuning parameters ({extra}) beyond the parameters ({swept}) specified in "
      f"`automl.parameter_sweep`. Experiment class: {experiment_config.__class__}. Make them "
      "columns of the sweep or fixed values."
    )
  return search_space


def _warm_start_rules(task_p, checkpoint_path: str, input_specs_provider_p) -> Any:
  """Rules loading everything from `checkpoint_path` (step restarting at 0, optimizer states
  kept), in whichever of Pax's fields our `CheckpointLoadingRules` has."""
  from paxml import tasks_lib  # pylint: disable=import-outside-toplevel

  wanted = dict(
    task_p=task_p,
    load_rules=[(r"(.*)", "{}")],
    load_step=False,
    load_opt_states=True,
    input_specs_provider_p=input_specs_provider_p,
  )
  known = {f.name for f in dataclasses.fields(tasks_lib.CheckpointLoadingRules)}
  return tasks_lib.CheckpointLoadingRules(**{k: v for k, v in wanted.items() if k in known})


def _maybe_override_for_warm_start(
  sub_experiment_cls: Type[base_experiment.BaseExperiment], feedback: pg.tuning.Feedback
) -> Type[base_experiment.BaseExperiment]:
  """Subclass whose task starts from the checkpoint the tuner chose for this trial, if any."""
  checkpoint_path = feedback.checkpoint_to_warm_start_from

  class OverriddenExperiment(sub_experiment_cls):
    def task(self):
      task_p = super().task()
      task_copy = copy.deepcopy(task_p)
      if checkpoint_path:
        logging.info("Trial %s warm-starts from %s", feedback.id, checkpoint_path)
        specs = None
        if hasattr(self, "get_input_specs_provider_params"):
          specs = self.get_input_specs_provider_params()
        task_copy.train.init_from_checkpoint_rules = {
          checkpoint_path: _warm_start_rules(task_p, checkpoint_path, specs)
        }
      return task_copy

  return OverriddenExperiment


def _write_file_once(file_path: epath.Path, content: str) -> None:
  """Debug files: every worker writes the same content, so any one write is enough."""
  if file_path.exists():
    return
  try:
    file_path.write_text(content)
  except OSError:
    logging.warning("Could not write %s (another worker may be writing it).", file_path)


def tune(
  trial_fn: TrialFn,
  experiment_config: base_experiment.BaseExperiment,
  work_unit: platform.WorkUnit,
  job_log_dir: epath.Path,
  study: str | None = None,
  pythia_port: int | None = None,
  is_metric_reporting_role: bool = True,
  tuner_group: str | None = None,
  max_num_trials: int | None = None,
  controller_mode: str = "auto",
  running_mode: str = "train",
) -> None:
  """Runs the experiment's search: samples trials and calls `trial_fn` on each.

  study: the study name ('local...' runs an in-process study readable by
  `pg.tuning.poll_result`). tuner_group: processes sharing it work on the same trial (train,
  eval, decode of one configuration); only the `is_metric_reporting_role` one reports.
  max_num_trials overrides `search().max_num_trials`. controller_mode 'primary' (a dedicated
  controller) needs Google's Vizier service and raises here. running_mode: this worker's role
  ('train', 'eval', 'decode', ...), checked against the metrics the reward needs.
  """
  del pythia_port  # Only Google's Vizier service uses it.
  search_hparams = experiment_config.search()
  reward_fn = instantiate(search_hparams.search_reward) if search_hparams.search_reward else None
  _verify_running_mode(reward_fn, running_mode, is_metric_reporting_role)

  search_algorithm = instantiate(search_hparams.search_algorithm)()
  max_num_trials = max_num_trials or search_hparams.max_num_trials
  errors_to_skip = search_hparams.errors_to_skip or []
  aggregator = instantiate(
    search_hparams.cross_step_metric_aggregator
    or pax_fiddle.Config(automl.LastReportedMetricValues)
  )
  early_stopping_policy = None
  if search_hparams.early_stopping is not None:
    early_stopping_policy = instantiate(search_hparams.early_stopping)()

  search_space = get_search_space(experiment_config)
  if search_space.dna_spec.is_constant:
    raise ValueError(
      f"Aborting tuning: there are no tunable parameters in experiment "
      f"{experiment_config.__class__.__name__!r}."
    )
  # pg.floatv and custom decision points make the space infinite (size -1).
  if search_space.dna_spec.space_size != -1:
    max_num_trials = min(max_num_trials, search_space.dna_spec.space_size)

  job_log_dir.mkdir(parents=True, exist_ok=True)
  debug_files = [
    ("search_space.txt", search_space.dna_spec, "search_space"),
    ("search_algorithm.txt", search_algorithm, "search_algorithm"),
  ]
  if early_stopping_policy is not None:
    debug_files.append(
      ("early_stopping_policy_debug_file.txt", early_stopping_policy, "early_stopping_policy")
    )
  for filename, obj, artifact in debug_files:
    logging.info("%s: %s", artifact, obj)
    _write_file_once(job_log_dir / filename, str(obj))
    work_unit.create_artifact(platform.ArtifactType.FILE, str(job_log_dir / filename), artifact)

  if controller_mode == "primary":
    _run_dedicated_controller(
      study, search_space.dna_spec, search_algorithm, early_stopping_policy, max_num_trials
    )
    return

  sub_experiments = experiment_config.sub_experiments()
  dirnames = TrialDirectoryNameGenerator(
    job_log_dir,
    search_space,
    getattr(experiment_config, automl.COMBINED_DECISION_POINT_NAMES, None),
  )
  for example, feedback in pg.sample(
    search_space,
    search_algorithm,
    max_num_trials,
    early_stopping_policy=early_stopping_policy,
    group=tuner_group,
    name=study if study and study.startswith("local") else None,
    is_chief=None if controller_mode == "auto" else False,
  ):
    logging.info("Start working on trial %d (group=%r)...", feedback.id, tuner_group)
    with example():
      trial_dir = dirnames.dirname(feedback.id)
      if (
        search_hparams.add_experiment_config_to_metadata
        and is_metric_reporting_role
        and jax.process_index() == 0
      ):
        _record_experiment_config(sub_experiments, feedback)
      for i, (sub_id, sub_cls) in enumerate(sub_experiments.items()):
        early_stopping_fn = EarlyStoppingFn(
          feedback=feedback,
          sub_experiment_id=sub_id,
          reward_fn=reward_fn,
          cross_step_metric_aggregator=aggregator,
          is_metric_reporting_role=is_metric_reporting_role,
          is_last_experiment=(i == len(sub_experiments) - 1),
          tuning_step_start=i * automl.SUB_EXPERIMENT_STEP_OFFSET,
          treats_early_stopped_trials_as_done=search_hparams.treats_early_stopped_trials_as_done,
          train_to_end=search_hparams.train_to_end,
        )
        # A NaN reward (FloatingPointError) or a listed error makes the trial infeasible.
        with feedback.skip_on_exceptions([FloatingPointError] + list(errors_to_skip)):
          experiment = _maybe_override_for_warm_start(sub_cls, feedback)()
          trial_fn(experiment, work_unit, trial_dir, early_stopping_fn)
        # A completed (or skipped) trial runs no further sub-experiments.
        if feedback.get_trial().status == "COMPLETED":
          break
      logging.info("Trial %d is now completed.", feedback.id)
  logging.info("Completed with all trials for study %r", study)


def _record_experiment_config(
  sub_experiments: dict[str, Type[base_experiment.BaseExperiment]], feedback: pg.tuning.Feedback
) -> None:
  """Stores each sub-experiment's datasets, decode datasets and task (as text, compressed) in
  the trial's metadata, under `experiment_config:<datasets|decode_datasets|task>`."""
  configs = {"datasets": {}, "decode_datasets": {}, "task": {}}
  to_text = base_hyperparams.nested_struct_to_text
  for sub_id, sub_cls in sub_experiments.items():
    experiment = sub_cls()
    configs["datasets"][sub_id] = [to_text(d) for d in experiment.datasets()]
    configs["decode_datasets"][sub_id] = [to_text(d) for d in experiment.decode_datasets()]
    configs["task"][sub_id] = to_text(experiment.task())
  for key, value in configs.items():
    feedback.set_metadata(
      f"experiment_config:{key}",
      {"format_version": 2.0, "source": "pax", "config": compressed(value)},
      per_trial=True,
    )


def compressed(value: Any) -> str:
  """A JSON-convertible value as base64 of its LZMA-compressed JSON text."""
  return base64.b64encode(lzma.compress(pg.to_json_str(value).encode("utf-8"))).decode("ascii")


def uncompressed(str_compressed: str) -> str:
  """The JSON text `compressed` packed."""
  return lzma.decompress(base64.b64decode(str_compressed)).decode("utf-8")


def _run_dedicated_controller(study, dna_spec, algorithm, early_stopping_policy, max_num_trials):
  raise NotImplementedError(
    "controller_mode='primary' needs a Vizier service (Google-internal in Pax too); use "
    "controller_mode='auto' with a 'local...' study."
  )


def _verify_running_mode(reward_fn, running_mode: str, is_metric_reporting_role: bool) -> None:
  """Raises when the reporting worker cannot see the metrics the reward needs."""
  if reward_fn is None or not is_metric_reporting_role:
    return
  if reward_fn.needs_train and running_mode != "train":
    raise ValueError(
      f"Tuning uses training metrics but the reporting role is {running_mode!r}; report from "
      "the training job (running_mode='train')."
    )
  if reward_fn.needs_decode and running_mode not in ("train", "decode"):
    raise ValueError(
      f"Tuning uses decode metrics but the reporting role is {running_mode!r}; report from "
      "the train or decode job."
    )


class EvalMetrics(NamedTuple):
  """An eval step's metrics, one dict per eval input (`input_names`)."""

  metrics_list: Sequence[dict[str, float] | None] | None = None
  scoring_metrics_list: Sequence[dict[str, float] | None] | None = None
  steps_per_sec: float | None = None
  input_names: Sequence[str] | None = None


class DecodeMetrics(NamedTuple):
  """A decode step's metrics, one dict per decode input (`input_names`)."""

  metrics_list: Sequence[dict[str, float] | None] | None = None
  processed_metrics_list: Sequence[dict[str, float] | None] | None = None
  seqio_metrics_list: Sequence[dict[str, float] | None] | None = None
  steps_per_sec: float | None = None
  input_names: Sequence[str] | None = None


def _unreplicated(tree: Any) -> Any:
  """Arrays replicated on several devices as one host copy (their first shard)."""

  def first_copy(x):
    if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1 and x.is_fully_replicated:
      return x.addressable_data(0)
    return x

  return jax.tree_util.tree_map(first_copy, tree)


def should_early_stop(
  early_stop_fn: trainer_lib.EarlyStoppingFn | None,
  global_step: int,
  is_last_ckpt: bool,
  train_weighted_scalars: Any = None,
  eval_train_metrics: dict[str, float] | None = None,
  eval_metrics: EvalMetrics | None = None,
  decode_metrics: DecodeMetrics | None = None,
  num_params: float | None = None,
  train_steps_per_sec: float | None = None,
  checkpoint_path: epath.Path | None = None,
) -> bool:
  """Reports this step's metrics to `early_stop_fn` (if any); True when training should stop.

  Train weighted scalars are reduced only at the last checkpoint or an eval/decode step (they
  come every step), or always with PAXML_EARLY_STOP_ALWAYS_AGGREGATE_TRAIN_METRICS=true.
  """
  if early_stop_fn is None:
    return False
  running_mode = trainer_lib.RunningMode.detect(
    has_train_metrics=train_steps_per_sec is not None,
    has_eval_metrics=bool(eval_metrics),
    has_decode_metrics=bool(decode_metrics),
  )
  train_metrics = None
  always = os.getenv("PAXML_EARLY_STOP_ALWAYS_AGGREGATE_TRAIN_METRICS", "") == "true"
  if train_weighted_scalars is not None and (
    is_last_ckpt or running_mode.has_eval or running_mode.has_decode or always
  ):
    train_metrics = metric_utils.as_float_dict(_unreplicated(train_weighted_scalars))
  tuning_metrics = _aggregate_metrics(
    train_metrics,
    eval_train_metrics,
    eval_metrics,
    decode_metrics,
    num_params,
    train_steps_per_sec,
  )
  return early_stop_fn(tuning_metrics, running_mode, global_step, is_last_ckpt, checkpoint_path)


def _per_input_metrics(input_names, metrics_list, prefix_format: str) -> dict[str, float]:
  """`{prefix_format.format(input)/key: value}` over the inputs' metric dicts."""
  merged = {}
  if input_names is None or metrics_list is None:
    return merged
  if len(input_names) != len(metrics_list):
    raise ValueError(f"{len(input_names)} input names for {len(metrics_list)} metric dicts.")
  for name, metrics in zip(input_names, metrics_list):
    if metrics is not None:
      metric_utils.update_float_dict(merged, metrics, prefix_format.format(name))
  return merged


def _aggregate_metrics(
  train_metrics=None,
  eval_train_metrics=None,
  eval_metrics=None,
  decode_metrics=None,
  num_params=None,
  train_steps_per_sec=None,
) -> dict[str, float | None]:
  """The flat tuning metric dict, keyed as `automl.Metric` patterns expect."""
  metrics = {}
  if train_metrics is not None:
    metric_utils.update_float_dict(metrics, train_metrics, "train")
  if eval_train_metrics is not None:
    metric_utils.update_float_dict(metrics, eval_train_metrics, "eval_train/metrics")
  if eval_metrics:
    names = eval_metrics.input_names
    metrics.update(_per_input_metrics(names, eval_metrics.metrics_list, "eval_test_{}/metrics"))
    metrics.update(
      _per_input_metrics(names, eval_metrics.scoring_metrics_list, "eval_test_{}/scoring_eval")
    )
  if decode_metrics:
    names = decode_metrics.input_names
    for metrics_list in (
      decode_metrics.metrics_list,
      decode_metrics.processed_metrics_list,
      decode_metrics.seqio_metrics_list,
    ):
      metrics.update(_per_input_metrics(names, metrics_list, "decode_test_{}"))
  if train_steps_per_sec is not None:
    metrics["train_steps_per_sec"] = train_steps_per_sec
  if eval_metrics is not None:
    metrics["eval_steps_per_sec"] = eval_metrics.steps_per_sec
  if decode_metrics is not None:
    metrics["decode_steps_per_sec"] = decode_metrics.steps_per_sec
  if num_params is not None:
    metrics["num_params"] = num_params
  return metrics


def is_last_checkpoint(
  running_mode: trainer_lib.RunningMode,
  global_step: int,
  num_train_steps: int,
  eval_interval_steps: int,
  decode_interval_steps: int,
  save_interval_steps: int,
  train_to_end: bool = False,
) -> bool:
  """Whether this step's report is the trial's last one.

  True at `num_train_steps`; before that (unless `train_to_end`) when no further eval or decode
  can happen: fewer steps remain than max(interval, save interval). A job that also trains
  evaluates the weights in memory, so checkpoint saves don't gate it.
  """
  if running_mode.has_train:
    save_interval_steps = 0
  remaining = num_train_steps - global_step
  if remaining == 0:
    return True
  if train_to_end:
    return False
  last_eval = running_mode.has_eval and remaining < max(eval_interval_steps, save_interval_steps)
  last_decode = running_mode.has_decode and remaining < max(
    decode_interval_steps, save_interval_steps
  )
  return bool(last_eval or last_decode)
