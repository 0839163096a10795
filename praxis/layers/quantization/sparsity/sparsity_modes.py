"""Pax's sparsity schedule modes: when a layer recomputes its pruning mask.

Every mode answers two questions the sparsifier asks on each forward pass:
`update_cond(step, mask_update_times)` (a traced bool: recompute the mask
now?) and `get_num_shots()` (stored in the layer's `num_shots` variable:
-1 = unbounded, 0 = never, k = at most k updates).
"""

from __future__ import annotations

import abc
import dataclasses

from jax import numpy as jnp
from praxis import pytypes

JTensor = pytypes.JTensor


@dataclasses.dataclass
class BaseSparsityScheduleMode(abc.ABC):
  """Interface of a sparsity schedule (see the module docstring)."""

  @abc.abstractmethod
  def update_cond(self, step: int, mask_update_times: int) -> JTensor:
    """True when the mask should be recomputed at `step`."""

  @abc.abstractmethod
  def get_num_shots(self) -> int:
    """How many mask updates this mode allows (-1: no limit)."""


@dataclasses.dataclass
class TrainingMode(BaseSparsityScheduleMode):
  """Sparsity-aware training: the mask follows the weights from `target_step` on."""

  target_step: int = 0

  def update_cond(self, step: int, mask_update_times: int) -> JTensor:
    del mask_update_times  # Every step from target_step on updates.
    return jnp.greater_equal(step, self.target_step)

  def get_num_shots(self) -> int:
    return -1


@dataclasses.dataclass
class OneShotMode(BaseSparsityScheduleMode):
  """Prune once, exactly at `target_step`; the mask is frozen afterwards."""

  target_step: int = 0

  def update_cond(self, step: int, mask_update_times: int) -> JTensor:
    not_yet_pruned = jnp.less(mask_update_times, 1)
    return jnp.logical_and(jnp.equal(step, self.target_step), not_yet_pruned)

  def get_num_shots(self) -> int:
    return 1


@dataclasses.dataclass
class MaterializeMode(BaseSparsityScheduleMode):
  """The mask variable is given (e.g. restored); it is applied but never recomputed."""

  def update_cond(self, step: int, mask_update_times: int) -> JTensor:
    del step, mask_update_times
    return jnp.bool_(False)

  def get_num_shots(self) -> int:
    return -1


@dataclasses.dataclass
class InferenceMode(BaseSparsityScheduleMode):
  """Serving: weights are already sparse, no mask variables exist, nothing is applied."""

  def update_cond(self, step: int, mask_update_times: int) -> JTensor:
    del step, mask_update_times
    return jnp.bool_(False)

  def get_num_shots(self) -> int:
    return 0


@dataclasses.dataclass
class FewShotMode(BaseSparsityScheduleMode):
  """Prune `num_shots` times: at target_step, then every mask_update_interval steps.

  Attributes:
    num_shots: How many mask updates (must be > 1; use OneShotMode for one).
    mask_update_interval: Steps between two consecutive updates.
    target_step: Step of the first update.
    next_target_step: Step of the next update; the sparsifier advances it with
      increment_target_step(mask_update_count) before asking update_cond.
  """

  num_shots: int = 0
  mask_update_interval: int = 1
  target_step: int = 0
  next_target_step: int = 0

  def __post_init__(self):
    if self.num_shots <= 1:
      raise AssertionError(
        f"FewShotMode needs num_shots > 1 (got {self.num_shots}); set num_shots, "
        "or use OneShotMode for a single pruning step."
      )
    self.next_target_step = self.target_step

  def update_cond(self, step: int, mask_update_times: int) -> JTensor:
    shots_left = jnp.less(mask_update_times, self.num_shots)
    return jnp.logical_and(jnp.equal(step, self.next_target_step), shots_left)

  def increment_target_step(self, mask_update_times: int) -> None:
    """The k-th update (k = mask_update_times) happens k intervals after target_step."""
    self.next_target_step = self.target_step + mask_update_times * self.mask_update_interval

  def get_num_shots(self) -> int:
    return self.num_shots
