"""`TaskConfig` (alias `SingleTask`): the model and training settings an experiment's `task()` returns.

Pax nests these in `SingleTask.train`; this version keeps one flat, frozen record whose field
names are Pax's `train.*` names. A misspelt field is a `TypeError` at construction, which `main`
reports in one line.

The model is a Flax module with the praxis model interface (`praxis.layers.models`):
  train:  `model.apply(variables, batch, rngs={"dropout": key}, mutable=["aux_loss"])
          -> ((metrics, per_example_out), collections)`, metrics a dict name -> (value, weight)
          with 'total_loss' (the training loss, aux losses included);
  eval:   `model.apply(variables, batch) -> (metrics, per_example_out)`;
  decode: `model.apply(variables, batch, method="decode", ...) -> (metrics, decode_out)`
          (optional). `praxis.layers.models.LanguageModel` is one.

The optimizer is a praxis optimizer config (`praxis.optimizers`: Adam, AdamW, Adafactor, Sgd,
Lion with their learning rate, schedule, gradient clipping, weight decay and EMA), e.g. Pax's
`set_default_adam`:

    optimizers.Adam.HParams.config(
        learning_rate=2.5e-4, beta1=0.9, beta2=0.99, epsilon=1e-6, weight_decay=1e-3,
        clip_gradient_norm_to_value=5.0,
        lr_schedule=schedules.LinearRampupExponentialDecay.HParams.config(
            warmup_steps=4000, decay_start=4001, decay_end=300000, min_ratio=0.1, max=1.0))

A shorthand for small experiments: leave `optimizer` None and give `learning_rate` (plus
`warmup_steps` and `clip_gradient_norm_to_value`); that is Adam with a linear warm-up from 0 and
then a constant rate (`optimizer_config()` spells it out).

Experiments keep their settings as Pax-style UPPERCASE class fields; `task_from_fields(self,
model, **overrides)` builds the TaskConfig from them: each field from the experiment's attribute
of the same name upper-cased (`NUM_TRAIN_STEPS`, `LEARNING_RATE`, `ICI_MESH_SHAPE`, ...), a
keyword override first, TaskConfig's default where the experiment has neither.
"""

from collections.abc import Mapping, Sequence
import dataclasses
import re
from typing import Any

import flax.linen as nn

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


# Pax's name for the task record.
SingleTask = TaskConfig


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
