"""Pax's `paxml.trainer_lib` names that experiment files import: `RunningMode`.

Pax's early-stopping functions (c4.py's `EarlyStoppingFn`) take the running mode; the step
functions themselves are paxml/trainer.py's here.
"""

import enum
from typing import Any, Callable


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


# Pax's signature of the early-stopping function the trainer calls after each eval/decode:
# (tuning metrics, running mode, global step, is last checkpoint, checkpoint path) -> stop?
# tuning_lib.EarlyStoppingFn is the one `tuning_lib.tune` gives each trial.
EarlyStoppingFn = Callable[[dict[str, float], RunningMode, int, bool, Any], bool]
