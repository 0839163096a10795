"""`TaskConfig`: the model and training settings an experiment's `task()` returns.

Pax nests these in `SingleTask.train`; this first version keeps one flat,
frozen record and grows as the trainer learns new tricks.
"""

import dataclasses

from praxis import transformer_lm


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """What to train and how long; read once by `trainer.train_and_evaluate`."""

  model: transformer_lm.TransformerLm
  """The (unbound) model: its fields are the architecture."""
  learning_rate: float
  """Adam's peak learning rate, reached after `warmup_steps`."""
  num_train_steps: int
  """Training stops once the train state reaches this step."""
  warmup_steps: int = 0
  """Steps of linear learning-rate warmup from 0; then it stays constant."""
  clip_gradient_norm_to_value: float | None = 5.0
  """Rescales gradients whose global norm exceeds this (Pax's default); None disables."""
  save_interval_steps: int = 5000
  """A checkpoint every this many steps (plus the first and the last)."""
  save_max_to_keep: int = 10
  """Older checkpoints beyond this many are deleted."""
  summary_interval_steps: int = 100
  """Scalars and a progress line every this many steps (and at the last)."""
  random_seed: int = 1234
  """Seeds parameter initialisation and per-step randomness (dropout)."""

  def __post_init__(self):
    for name in ("num_train_steps", "save_interval_steps", "save_max_to_keep",
                 "summary_interval_steps"):
      if getattr(self, name) < 1:
        raise ValueError(f"TaskConfig.{name} must be at least 1, got {getattr(self, name)}")
    if self.warmup_steps < 0:
      raise ValueError(f"TaskConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
    if self.learning_rate <= 0:
      raise ValueError(f"TaskConfig.learning_rate must be positive, got {self.learning_rate}")
