"""`TaskConfig` (alias `SingleTask`): the model and training settings an experiment's `task()` returns.

Pax nests these in `SingleTask.train`; this version keeps one flat, frozen record whose field
names are Pax's `train.*` names. A misspelt field is a `TypeError` at construction, which `main`
reports in one line.

The model is any Flax module with the trainer's model interface:
  `model(input_batch) -> (metrics, per_example_out)`, metrics a dict name -> (value, weight)
  with 'total_loss' (the training loss); optionally `model.decode(input_batch) ->
  (metrics, decode_out)`; optionally a `transformer_dims` property (layers, heads, dims per head)
  for the attention term of the FLOPs count. `praxis.transformer_lm.LmModel` is one.
"""

from collections.abc import Sequence
import dataclasses
import flax.linen as nn


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """What to train, on which mesh, how long, and when to save, summarise, evaluate, decode."""

  model: nn.Module
  """The (unbound) model: its fields are the architecture (see the module docstring)."""
  learning_rate: float
  """Adam's peak learning rate, reached after `warmup_steps`."""
  num_train_steps: int
  """Training stops once the train state reaches this step."""
  warmup_steps: int = 0
  """Steps of linear learning-rate warmup from 0; then it stays constant."""
  clip_gradient_norm_to_value: float | None = 5.0
  """Rescales gradients whose global norm exceeds this (Pax's default); None disables."""
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
  eval_interval_steps: int | None = None
  """Evaluate every this many steps: on a training batch (summaries/eval_train) and, with
  --eval_on_test, on each eval dataset; always after the last step. None: only after the last."""
  eval_skip_train: bool = False
  """Skip the evaluation on a training batch (summaries/eval_train)."""
  decode_interval_steps: int | None = None
  """With --decode_during_train, decode every this many steps (and after the last)."""
  random_seed: int = 1234
  """Seeds parameter initialisation and per-step randomness (dropout)."""

  def __post_init__(self):
    for name in ("num_train_steps", "save_interval_steps", "save_max_to_keep",
                 "summary_interval_steps", "num_microbatches"):
      if getattr(self, name) < 1:
        raise ValueError(f"TaskConfig.{name} must be at least 1, got {getattr(self, name)}")
    for name in ("eval_interval_steps", "decode_interval_steps"):
      value = getattr(self, name)
      if value is not None and value < 1:
        raise ValueError(f"TaskConfig.{name} must be None or at least 1, got {value}")
    if self.warmup_steps < 0:
      raise ValueError(f"TaskConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
    if self.learning_rate <= 0:
      raise ValueError(f"TaskConfig.learning_rate must be positive, got {self.learning_rate}")


# Pax's name for the task record.
SingleTask = TaskConfig
