"""Pax's `tasks_lib.SingleTask` and the trainer's flat `TaskConfig` derived from it.

Two spellings of a task, one source of truth:

  * Pax's: `task()` returns `pax_fiddle.Config(tasks_lib.SingleTask, name=...)` with `model`
    (a praxis model config, whose `ici_mesh_shape` / `dcn_mesh_shape` are the mesh), `train`
    (`SingleTask.Train`: `learner` (paxml.learners.Learner with its `optimizer`),
    `num_train_steps`, `save_interval_steps`, `summary_interval_steps`, ...), `vn`, `decode`,
    `evaluate`, `infer` and the rest of Pax's fields, with Pax's defaults;
  * the seed's: `task()` returns a `TaskConfig`, one flat frozen record whose field names are
    Pax's `train.*` names (a misspelt field is a TypeError at construction, which `main`
    reports in one line).

The trainer reads only `TaskConfig`; `to_task_config(task)` is the one function that turns
either spelling into it (a TaskConfig passes through). Pax fields this trainer does not apply
are logged by name when set away from their defaults; variational noise, which would change
the training itself, is refused.

The model is a Flax module with the praxis model interface (`praxis.layers.models`):
  train:  `model.apply(variables, batch, rngs={"dropout": key}, mutable=["aux_loss"])
          -> ((metrics, per_example_out), collections)`, metrics a dict name -> (value, weight)
          with 'total_loss' (the training loss, aux losses included);
  eval:   `model.apply(variables, batch) -> (metrics, per_example_out)`;
  decode: `model.apply(variables, batch, method="decode", ...) -> (metrics, decode_out, ...)`
          (optional; Pax's LanguageModel returns (metrics, decode_out, decode_metrics) with a
          samples dim). `praxis.layers.models.LanguageModel` is one.

The optimizer is a praxis optimizer config (`praxis.optimizers`: Adam, AdamW, Adafactor,
ShardedAdafactor, Sgd, Lion with their learning rate, schedule, gradient clipping, weight decay
and EMA), e.g. Pax's `set_default_adam`:

    pax_fiddle.Config(optimizers.Adam,
        learning_rate=2.5e-4, beta1=0.9, beta2=0.99, epsilon=1e-6, weight_decay=1e-3,
        clip_gradient_norm_to_value=5.0,
        lr_schedule=pax_fiddle.Config(schedules.LinearRampupExponentialDecay,
            warmup_steps=4000, decay_start=4001, decay_end=300000, min_ratio=0.1, max=1.0))

A TaskConfig shorthand for small experiments: leave `optimizer` None and give `learning_rate`
(plus `warmup_steps` and `clip_gradient_norm_to_value`); that is Adam with a linear warm-up from
0 and then a constant rate (`optimizer_config()` spells it out).

Seed-style experiments keep their settings as Pax-style UPPERCASE class fields;
`task_from_fields(self, model, **overrides)` builds the TaskConfig from them: each field from
the experiment's attribute of the same name upper-cased (`NUM_TRAIN_STEPS`, `LEARNING_RATE`,
`ICI_MESH_SHAPE`, ...), a keyword override first, TaskConfig's default where the experiment has
neither.
"""

from collections.abc import Mapping, Sequence
import dataclasses
import re
from typing import Any

from absl import logging
import fiddle as fdl
import flax.linen as nn

from paxml import base_task
from paxml import learners
from paxml import task_states
from praxis import base_hyperparams
from praxis import optimizers
from praxis import schedules


@dataclasses.dataclass(frozen=True)
class CheckpointLoadingRules:
  """How to read one source checkpoint into a new run's initial state (paxml/warm_start.py)."""

  load_rules: Sequence[tuple[str, str]]
  """(regex fully matching a target name, source name format filled with the match's groups);
  the first matching rule wins."""
  ignore_rules: Sequence[str] = ()
  """Regexes: target names fully matching one keep their initial values."""
  step: int | None = None
  """Which checkpoint of the source; None: its latest (or the one a checkpoint_%08d path names)."""

  def __post_init__(self):
    if not self.load_rules:
      raise ValueError(
        "CheckpointLoadingRules.load_rules is empty; give at least one "
        "(target regex, source format) pair, e.g. (r'params/(.*)', 'params/{}')"
      )
    for pattern in [p for p, _ in self.load_rules] + list(self.ignore_rules):
      try:
        re.compile(pattern)
      except re.error as e:
        raise ValueError(f"CheckpointLoadingRules: {pattern!r} is not a regex: {e}") from None


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """What to train, on which mesh, how long, and when to save, summarise, evaluate, decode."""

  model: nn.Module
  """The (unbound) model: its fields are the architecture (see the module docstring)."""
  num_train_steps: int
  """Training stops once the train state reaches this step."""
  optimizer: Any = None
  """A praxis optimizer config (module docstring); None: Adam from `learning_rate`."""
  learning_rate: float | None = None
  """Shorthand (only with optimizer=None): Adam's peak learning rate, reached after
  `warmup_steps`."""
  warmup_steps: int = 0
  """Shorthand (only with optimizer=None): steps of linear warm-up from 0; then constant."""
  clip_gradient_norm_to_value: float | None = 5.0
  """Shorthand (only with optimizer=None): clip the gradients' global norm to this (Pax's
  default); None or 0 disables. With `optimizer`, its own field decides."""
  num_microbatches: int = 1
  """Gradient accumulation: each step's batch is split into this many microbatches, run one
  after another, and their gradients combined into one update (same result, less memory)."""
  ici_mesh_shape: Sequence[int] | None = None
  """Devices per (replica, data, mdl) axis within a slice; None: all devices on `data`."""
  dcn_mesh_shape: Sequence[int] | None = None
  """Slices (hosts) per (replica, data, mdl) axis; None: one slice."""
  save_interval_steps: int = 5000
  """A checkpoint every this many steps (plus the first and the last)."""
  save_max_to_keep: int = 10
  """Older checkpoints beyond this many are deleted."""
  save_keep_interval_duration: str | None = None
  """Also keep one checkpoint per this much wall time ('12h', '30m', '90s'), beyond
  `save_max_to_keep` (Pax's default is '12h'); None keeps only the newest."""
  summary_interval_steps: int = 100
  """Scalars and a progress line every this many steps (and at the last)."""
  max_consecutive_skipped_steps: int | None = 20
  """Like Pax, a step whose loss or gradient norm is NaN/Inf is skipped (weights unchanged);
  once this many steps in a row were skipped the run stops with an error. Counted in whole
  summary windows (checked at summary steps), so with a longer `summary_interval_steps` it
  stops after the first window skipped throughout. None: never stop (Pax's behaviour)."""
  eval_interval_steps: int | None = None
  """Evaluate every this many steps: on a training batch (summaries/eval_train) and, with
  --eval_on_test, on each eval dataset; always after the last step. None: only after the last."""
  eval_skip_train: bool = False
  """Skip the evaluation on a training batch (summaries/eval_train)."""
  decode_interval_steps: int | None = None
  """With --decode_during_train, decode every this many steps (and after the last)."""
  random_seed: int = 1234
  """Seeds parameter initialisation and per-step randomness (dropout)."""
  init_from_checkpoint_rules: Mapping[str, CheckpointLoadingRules] = dataclasses.field(
    default_factory=dict
  )
  """Warm start: {another run's job_log_dir or checkpoint directory: which of its arrays to
  load, under which names}, applied when this run has no checkpoint of its own yet
  (paxml/warm_start.py)."""

  def __post_init__(self):
    for name in (
      "num_train_steps",
      "save_interval_steps",
      "save_max_to_keep",
      "summary_interval_steps",
      "num_microbatches",
    ):
      if getattr(self, name) < 1:
        raise ValueError(f"TaskConfig.{name} must be at least 1, got {getattr(self, name)}")
    for name in ("eval_interval_steps", "decode_interval_steps", "max_consecutive_skipped_steps"):
      value = getattr(self, name)
      if value is not None and value < 1:
        raise ValueError(f"TaskConfig.{name} must be None or at least 1, got {value}")
    if self.warmup_steps < 0:
      raise ValueError(f"TaskConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
    if self.optimizer is None:
      if self.learning_rate is None or self.learning_rate <= 0:
        raise ValueError(
          "TaskConfig needs an optimizer: set `optimizer` to a praxis.optimizers config "
          "(e.g. optimizers.Adam.HParams.config(learning_rate=1e-3)) or give a positive "
          f"`learning_rate` for plain Adam; got optimizer=None, learning_rate="
          f"{self.learning_rate}"
        )
    elif self.learning_rate is not None or self.warmup_steps:
      raise ValueError(
        "TaskConfig: `learning_rate` and `warmup_steps` are the shorthand for optimizer=None; "
        "with an optimizer config set its `learning_rate` and `lr_schedule` instead"
      )

  def optimizer_config(self) -> Any:
    """The praxis optimizer config this task trains with (the shorthand spelt out)."""
    if self.optimizer is not None:
      return self.optimizer
    schedule = schedules.Constant.HParams.config(value=1.0, warmup_steps=self.warmup_steps)
    return optimizers.Adam.HParams.config(
      learning_rate=self.learning_rate,
      lr_schedule=schedule,
      clip_gradient_norm_to_value=self.clip_gradient_norm_to_value or 0.0,
      # Plain Adam, as the shorthand promises: no per-tensor update capping.
      clip_threshold=0.0,
    )


def transformer_dims(model: Any) -> tuple[int, int, int] | None:
  """(layers, heads, dims per head) of a praxis LanguageModel's stack, for the attention term of
  the FLOPs count (paxml/progress.py); None for a model without one."""
  lm = getattr(model, "lm_tpl", None)
  stack = getattr(lm, "stacked_transformer_tpl", None)
  if stack is None:
    return None
  layers = 1
  if hasattr(stack, "block"):  # StackedTransformerRepeated: x_times blocks of num_layers.
    layers, stack = stack.x_times, stack.block
  layers *= stack.num_layers
  heads = stack.num_heads
  # TransformerLm sets the stack's model_dims when it builds it; the config may leave it 0.
  return layers, heads, stack.dim_per_head or (stack.model_dims or lm.model_dims) // heads


def task_from_fields(experiment: Any, model: nn.Module, **overrides: Any) -> TaskConfig:
  """A `TaskConfig` for `model` from the experiment's Pax-style UPPERCASE class fields.

  Each TaskConfig field other than `model` takes, in this order: the keyword in `overrides`;
  else the experiment's attribute named by the field upper-cased (`num_train_steps` <-
  `NUM_TRAIN_STEPS`, `ici_mesh_shape` <- `ICI_MESH_SHAPE`); else TaskConfig's default. The
  names come from `dataclasses.fields(TaskConfig)`, so a field added there is read here with no
  change. Other UPPERCASE attributes (architecture, data, names Pax uses elsewhere) are the
  experiment's own business and are ignored; values are checked by TaskConfig itself (a bad
  one is its ValueError), and a keyword that is no TaskConfig field is a TypeError.

    def task(self):
      return tasks_lib.task_from_fields(self, self.model())
  """
  names = {field.name for field in dataclasses.fields(TaskConfig)} - {"model"}
  unknown = sorted(set(overrides) - names)
  if unknown:
    raise TypeError(
      f"task_from_fields: {', '.join(unknown)} is not a TaskConfig field; "
      f"the fields are {', '.join(sorted(names))}"
    )
  values = {
    name: getattr(experiment, name.upper()) for name in names if hasattr(experiment, name.upper())
  }
  values.update(overrides)
  return TaskConfig(model=model, **values)


# The collections Pax lets a step mutate (base_layer's AUX_LOSS, SUMMARIES, NON_TRAINABLE, ...).
_TRAIN_MUTABLE = ["aux_loss", "summaries", "non_trainable", "params_axes", "intermediates"]
_EVAL_MUTABLE = ["aux_loss", "summaries", "non_trainable", "params_axes", "intermediates"]
_DECODE_MUTABLE = ["decoder_cache", "summaries"]


def _list(values: list[str]) -> Any:
  return dataclasses.field(default_factory=lambda: list(values))


class SingleTask(base_task.BaseTask):
  """Pax's task: a model and how to train, evaluate, decode and infer it (module docstring).

  Attributes:
    model: the model config (praxis.layers.models.LanguageModel, ...); its `ici_mesh_shape`
      and `dcn_mesh_shape` are the experiment's mesh.
    train: `SingleTask.Train`.
    decode: `SingleTask.Decode`.
    evaluate: `SingleTask.Evaluate`.
    infer: `SingleTask.Infer`.
    metrics: Pax's metrics aggregator (not applied here: metrics are averaged by weight).
    loss_aggregator: Pax's loss aggregator (not applied here).
    vn: `SingleTask.VariationalNoise` (refused when vn_scale > 0).
    infer_writer: Pax's inference writer (not applied here).
    early_stopping_fn: Pax's early-stopping callable (not applied here).
    summary_verbosity: Pax's summary verbosity (not applied here).
  """

  @dataclasses.dataclass(frozen=True, kw_only=True)
  class InferWriter(base_hyperparams.HParamsMixin):
    """Pax's inference-writer settings (`--mode=infer` writes through eval_lib instead)."""

    restore_checkpoint_dir: str = ""
    restore_checkpoint_step: int | None = None
    inference_runner: Any = None
    output_format: str = "TFRECORD"
    output_num_shards: int = 32

  @dataclasses.dataclass(frozen=True, kw_only=True)
  class VariationalNoise(base_hyperparams.HParamsMixin):
    """Gaussian noise of scale `vn_scale` on the weights matching `vn_regex` from `vn_start_step`."""

    vn_scale: float = 0.0
    vn_regex: str = ""
    vn_start_step: int = 0

  @dataclasses.dataclass(frozen=True, kw_only=True)
  class Train(base_hyperparams.HParamsMixin):
    """Pax's training settings; `to_task_config` lists which reach the trainer.

    Attributes (applied here):
      learner: the paxml.learners.Learner config (its optimizer).
      num_train_steps: training stops once the train state reaches this step.
      save_interval_steps: a checkpoint every this many steps.
      save_keep_interval_duration: also keep one checkpoint per this much time ('12h').
      save_max_to_keep: older checkpoints beyond this many are deleted.
      summary_interval_steps: train summaries every this many steps.
      eval_interval_steps: evaluate every this many steps.
      eval_skip_train: skip the eval on a training batch.
      init_from_checkpoint_rules: warm start, {checkpoint dir: CheckpointLoadingRules}.
      decode_interval_steps: decode every this many steps (with --decode_during_train).
      random_seed: seeds initialisation and per-step randomness.
      inputs_split_mapping, variable_norm_summary, max_inflight_steps, async_summary_writing,
      compute_steps_per_sec_interval_steps, profiler_*, apply_mutable_list: the partitioner,
      the summaries and the profiler of this trainer decide these (set by Pax's helpers; no
      warning).
    The rest are Pax's and logged when set away from the default.
    """

    learner: Any = base_hyperparams.template_field(learners.Learner)
    num_train_steps: float = 1e7
    save_interval_steps: int = 5000
    save_keep_interval_duration: str | None = "12h"
    save_max_to_keep: int = 10
    max_inflight_steps: int = 2
    summary_interval_steps: int = 100
    log_train_output_interval_steps: int | None = None
    summary_accumulate_interval_steps: int | None = None
    async_summary_writing: bool = True
    variable_norm_summary: bool = True
    eval_interval_steps: int = 100
    eval_skip_train: bool = False
    eval_use_ema_states: bool = False
    inputs_split_mapping: Any = None
    init_from_checkpoint_rules: dict[str, CheckpointLoadingRules] = dataclasses.field(
      default_factory=dict
    )
    decode_interval_steps: int | None = None
    decode_start_after_n_steps: int = 0
    decode_use_ema_states: bool = False
    compute_steps_per_sec_interval_steps: int = 10
    profiler_num_steps: int = 2
    profiler_min_duration_sec: float = 1.0
    profiler_capture_step: int | None = None
    profiler_max_num_hosts: int | None = None
    profiler_capture_host_profile: bool = False
    always_use_train_for_model_init: bool = True
    enforce_input_specs: bool = True
    random_seed: int = 1234
    apply_mutable_list: list[str] = _list(_TRAIN_MUTABLE)
    tensorstore_metadata_key: str | None = None
    enable_input_checkpointing: bool | None = False
    restore_transformations: dict[str, Any] | None = None
    external_checkpoint_path: Any = None
    external_checkpoint_handler: Any = None
    report_progress_hook: bool = False
    gc_interval_steps: int = 0

  @dataclasses.dataclass(frozen=True, kw_only=True)
  class Decode(base_hyperparams.HParamsMixin):
    """Pax's decode settings (this trainer seeds decoding from train.random_seed)."""

    prng_key_fold_with_batch_index: bool = False
    random_seed: int = 1234
    profiler_num_steps: int = 0
    profiler_min_duration_sec: float = 1.0
    profiler_capture_step: int = 1
    profiler_max_num_hosts: int | None = None
    apply_mutable_list: list[str] = _list(_DECODE_MUTABLE)
    metrics_prefix: str = "Metrics/"

  @dataclasses.dataclass(frozen=True, kw_only=True)
  class Evaluate(base_hyperparams.HParamsMixin):
    """Pax's eval settings (this trainer seeds evaluation from train.random_seed)."""

    random_seed: int = 1234
    apply_mutable_list: list[str] = _list(_EVAL_MUTABLE)

  @dataclasses.dataclass(frozen=True, kw_only=True)
  class Infer(base_hyperparams.HParamsMixin):
    """Pax's inference settings."""

    random_seed: int = 1234

  # Pax's names for configs of the nested settings (isinstance(task_p.train, TrainHParams)).
  TrainHParams = Train.HParams
  DecodeHParams = Decode.HParams
  EvaluateHParams = Evaluate.HParams
  InferHParams = Infer.HParams
  VariationalNoiseHParams = VariationalNoise.HParams
  InferWriterHParams = InferWriter.HParams

  model: Any = None
  train: Any = base_hyperparams.template_field(Train)
  decode: Any = base_hyperparams.template_field(Decode)
  evaluate: Any = base_hyperparams.template_field(Evaluate)
  infer: Any = base_hyperparams.template_field(Infer)
  metrics: Any = None
  loss_aggregator: Any = None
  vn: Any = base_hyperparams.template_field(VariationalNoise)
  infer_writer: Any = None
  early_stopping_fn: Any = None
  summary_verbosity: int = 3

  def __post_init__(self):
    super().__post_init__()
    # Built from a config, fiddle hands the model over built; a task constructed directly
    # (`tasks_lib.SingleTask(name=..., model=pax_fiddle.Config(...))`, as scripts on Pax do)
    # gets its model built here, as Pax's SingleTask does.
    if isinstance(self.model, fdl.Buildable):
      object.__setattr__(self, "model", base_hyperparams.instantiate(self.model))

  # Pax's train-state API (paxml/task_states.py): the state of this task's model and learners.

  @property
  def learners(self) -> list[learners.Learner]:
    """The task's learners (one: `train.learner`), built."""
    return [base_hyperparams.instantiate(self.train.learner)]

  @property
  def has_ema_decay(self) -> bool:
    opt = self.learners[0].optimizer
    return bool(opt is not None and (opt.ema_decay or 0.0) > 0)

  def create_opt_states(self, mdl_vars: Any, var_weight_hparams: Any) -> list[Any]:
    return task_states._create_opt_states(mdl_vars, var_weight_hparams, self.learners)  # noqa: SLF001

  def create_train_state(self, mdl_vars, var_weight_hparams, discard_opt_states=False):
    return task_states.create_state(mdl_vars, var_weight_hparams, discard_opt_states, self.learners)

  def create_train_state_unpadded_shapes(self, var_weight_hparams, discard_opt_states=False):
    return task_states.create_state_unpadded_shapes(
      var_weight_hparams, discard_opt_states, self.learners
    )

  def create_train_state_padded_shapes(self, var_weight_hparams, discard_opt_states=False):
    return task_states.create_state_padded_shapes(
      var_weight_hparams,
      self.model.mesh_shape,
      self.model.mesh_axis_names,
      discard_opt_states,
      self.learners,
    )

  def create_train_state_partition_specs(self, var_weight_hparams, discard_opt_states=False):
    """PartitionSpecs of the train state, or None when the model has no mesh (as in Pax)."""
    if self.model.mesh_shape is None:
      return None
    shapes = self.create_train_state_unpadded_shapes(var_weight_hparams, discard_opt_states)
    return task_states.create_state_partition_specs(
      var_weight_hparams,
      self.model.mesh_shape,
      self.model.mesh_axis_names,
      discard_opt_states,
      self.learners,
      shapes.opt_states,
    )


# Train fields that reach TaskConfig under the same name.
_TRAIN_TO_TASK = (
  "save_interval_steps",
  "save_keep_interval_duration",
  "save_max_to_keep",
  "summary_interval_steps",
  "eval_interval_steps",
  "eval_skip_train",
  "decode_interval_steps",
  "random_seed",
  "init_from_checkpoint_rules",
)
# Train fields whose work this trainer does its own way; Pax's helpers set them, so no warning.
_TRAIN_OWN_WAY = frozenset(
  {
    "learner",
    "num_train_steps",
    "inputs_split_mapping",
    "variable_norm_summary",
    "max_inflight_steps",
    "async_summary_writing",
    "compute_steps_per_sec_interval_steps",
    "profiler_num_steps",
    "profiler_min_duration_sec",
    "profiler_capture_step",
    "profiler_max_num_hosts",
    "profiler_capture_host_profile",
    "apply_mutable_list",
    "always_use_train_for_model_init",
    "enforce_input_specs",
  }
)


def _set_fields(cfg: Any) -> dict[str, Any]:
  """The fields a config (or dataclass instance) holds away from its class defaults."""
  if cfg is None:
    return {}
  if isinstance(cfg, fdl.Buildable):
    cls = fdl.get_callable(cfg)
    values = dict(cfg.__arguments__)
  else:
    cls = type(cfg)
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.init}
  changed = {}
  for field in dataclasses.fields(cls):
    if field.name not in values:
      continue
    if field.default is not dataclasses.MISSING:
      default = field.default
    elif field.default_factory is not dataclasses.MISSING:
      default = field.default_factory()
    else:
      default = dataclasses.MISSING
    value = values[field.name]
    if isinstance(value, fdl.Buildable) or isinstance(default, fdl.Buildable):
      if isinstance(value, fdl.Buildable) and isinstance(default, fdl.Buildable):
        if value == default:
          continue
      changed[field.name] = value
    elif value != default:
      changed[field.name] = value
  return changed


def not_applied(task: Any) -> list[str]:
  """`SingleTask` fields set away from Pax's defaults that this trainer does not apply."""
  notes = []
  for name in _set_fields(task):
    if name not in ("name", "model", "train", "vn", "decode", "evaluate", "infer"):
      notes.append(name)
  train = task.train
  for name in _set_fields(train):
    if name not in _TRAIN_TO_TASK and name not in _TRAIN_OWN_WAY:
      notes.append(f"train.{name}")
  for name in _set_fields(train.learner):
    if name not in learners.HONOURED:
      notes.append(f"train.learner.{name}")
  for part in ("decode", "evaluate", "infer"):
    notes.extend(f"{part}.{name}" for name in _set_fields(getattr(task, part)))
  return notes


def to_task_config(task: Any) -> TaskConfig:
  """What the trainer runs from, for whatever an experiment's `task()` returns.

  A `TaskConfig` passes through. A `SingleTask` (its config, or the object built from it) gives
  the TaskConfig of its model (built), its learner's optimizer, Pax's mesh (the model's
  `ici_mesh_shape` / `dcn_mesh_shape`) and the `train` fields of the same names. Fields this
  trainer does not apply are logged; variational noise and a loss other than total_loss raise.
  """
  if isinstance(task, TaskConfig):
    return task
  is_config = isinstance(task, fdl.Buildable)
  target = fdl.get_callable(task) if is_config else type(task)
  if not (isinstance(target, type) and issubclass(target, SingleTask)):
    raise TypeError(
      f"task() must return a tasks_lib.SingleTask config (pax_fiddle.Config(tasks_lib."
      f"SingleTask, name=..., model=...)) or a tasks_lib.TaskConfig; got {target!r}"
    )
  name = getattr(task, "name", "") or "task"
  if task.model is None:
    raise ValueError(f"SingleTask {name!r} has no model: set task_p.model to a model config")
  if task.vn.vn_scale:
    raise NotImplementedError(
      f"SingleTask {name!r}: variational noise (vn.vn_scale={task.vn.vn_scale}) is not "
      "implemented by this trainer; set vn.vn_scale = 0"
    )
  learner = task.train.learner
  if learner.loss_name not in (None, "total_loss"):
    raise ValueError(
      f"SingleTask {name!r}: train.learner.loss_name={learner.loss_name!r}; this trainer "
      "minimises the model's 'total_loss' (set loss_name='total_loss' or leave it None)"
    )
  if learner.optimizer is None:
    raise ValueError(
      f"SingleTask {name!r} has no optimizer: set task_p.train.learner.optimizer, e.g. "
      "model_params.set_default_adam(task_p, learning_rate, weight_decay)"
    )
  skipped = not_applied(task)
  if skipped:
    logging.warning(
      "SingleTask %r: these Pax fields are set but not applied by this trainer: %s",
      name,
      ", ".join(skipped),
    )
  model_cfg = task.model
  model = base_hyperparams.instantiate(model_cfg) if is_config else model_cfg
  train = task.train
  values = {field: getattr(train, field) for field in _TRAIN_TO_TASK}
  return TaskConfig(
    model=model,
    num_train_steps=int(train.num_train_steps),
    optimizer=learner.optimizer,
    # Pax checks for NaN/Inf steps only when asked; this trainer's skip counter is its own.
    ici_mesh_shape=_mesh(model_cfg, "ici_mesh_shape"),
    dcn_mesh_shape=_mesh(model_cfg, "dcn_mesh_shape"),
    **values,
  )


def _mesh(model: Any, field: str) -> Sequence[int] | None:
  value = getattr(model, field, None)
  return None if value is None else tuple(value)


# Pax's tasks_lib state functions (paxml/task_states.py).
create_state = task_states.create_state
create_state_unpadded_shapes = task_states.create_state_unpadded_shapes
create_state_padded_shapes = task_states.create_state_padded_shapes
create_state_partition_specs = task_states.create_state_partition_specs
get_excluded_var_mask_for_grad_or_opt = task_states.get_excluded_var_mask_for_grad_or_opt
get_excluded_var_mask_for_grad = task_states.get_excluded_var_mask_for_grad
get_excluded_var_mask_for_opt = task_states.get_excluded_var_mask_for_opt
filter_vars_for_grad_or_opt = task_states.filter_vars_for_grad_or_opt
