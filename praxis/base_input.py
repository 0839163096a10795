"""`BaseInput`: the contract every input of an experiment follows (Pax's, field for field).

An input is configured like a layer, `MyInput.HParams(batch_size=8, ...)` gives a Fiddle config,
and `cfg.Instantiate()` builds it, so a notebook can inspect batches:

    inp = SyntheticLmData.HParams(batch_size=2, seq_len=8).Instantiate()
    batch = inp.get_next()            # NestedMap of numpy arrays, [batch_size, ...] each

Sizes. `batch_size` is per host (per infeed host, one per JAX process); the global batch is
`batch_size * num_infeed_hosts`. The trainer sets them as Pax does (`Partitioner.
preprocess_input_config`): `num_infeed_hosts=0` (the default) becomes `jax.process_count()`, and
`infeed_host_index` becomes `jax.process_index()` unless the config sets it. Inputs with different
`infeed_host_index` never emit the same example: each host reads its own slice of the data.

Training vs eval. The fields `is_training`, `reset_for_eval` and `repeat` must form one of the rows
below; any other combination raises at construction with the reason:

  is_training  reset_for_eval  repeat  behaviour
  True         False           True    train: an endless stream (the default)
  True         False           False   train on one pass; StopIteration ends training
  False        True            False   eval over the whole finite set: `reset()` then `get_next()`
                                       until StopIteration; every host yields the same number of
                                       batches, the short ones padded with zero-weight rows
  False        False           True    rolling eval: each eval takes the next
                                       `eval_loop_num_batches` batches of a repeating stream
  True         True            any     error: `reset_for_eval` is for eval inputs
  False        True            True    error: a repeating input never raises StopIteration
  False        False           False   error: a rolling eval on a one-pass input runs dry

`repeat=None` (the default) picks the valid value: `not reset_for_eval`.

Input checkpointing. `get_state()` returns a JSON-serialisable dict of the position in the stream
(and the seed); `set_state(d)` on a freshly built input with the same config continues with the
next batch that was not yet returned, so a resumed run does not see data twice.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Sequence

import numpy as np

from praxis import base_hyperparams
from praxis import pytypes

NestedMap = pytypes.NestedMap


class InputConfigError(ValueError):
  """A BaseInput was configured with values that cannot work together."""


@dataclasses.dataclass
class BaseInput(base_hyperparams.HParamsMixin, abc.ABC):
  """Base class of every input. Subclasses are dataclasses and implement `get_next`.

  Attributes:
    batch_size: examples per batch on this host.
    num_infeed_hosts: number of hosts that feed data; 0 (Pax's default) lets the trainer use
      jax.process_count(), and an input built outside the trainer reads it as 1.
    infeed_host_index: this host's index in [0, num_infeed_hosts) (jax.process_index()).
    input_random_seed: seed of shuffling and random generation. None draws a fresh one per
      instance, as training data should (Pax's advice: a fixed seed replays the same order after
      every restart); `get_state` records it so a restore continues the same stream.
    reset_for_eval: eval reads one whole finite epoch per eval run (see the module table).
    eval_loop_num_batches: batches per eval run when `reset_for_eval` is False; ignored when it
      is True (the epoch decides the count).
    is_training: whether the trainer trains on this input.
    repeat: whether the stream restarts after the last example; None picks `not reset_for_eval`.
    name: the input's name in summaries (eval_test_<name>).
  """

  batch_size: int = 1
  num_infeed_hosts: int = 0
  infeed_host_index: int = 0
  input_random_seed: int | None = None
  reset_for_eval: bool = False
  eval_loop_num_batches: int = 1
  is_training: bool = True
  repeat: bool | None = None
  name: str = "input"

  def __post_init__(self):
    if self.repeat is None:
      self.repeat = not self.reset_for_eval
    if self.num_infeed_hosts == 0:
      self.num_infeed_hosts = 1
    _check_sizes(self)
    _check_eval_table(self)
    if self.input_random_seed is None:
      # 63 bits of fresh entropy; an int so that get_state stays JSON-serialisable.
      self.input_random_seed = int(np.random.SeedSequence().entropy % (2**63))

  @abc.abstractmethod
  def get_next(self) -> NestedMap:
    """Returns the next batch: host-local numpy arrays, each with a leading batch_size dim.

    Raises StopIteration at the end of a finite (non-repeating) input.
    """

  def reset(self) -> None:
    """Goes back to the first batch. The trainer calls it before each eval when `reset_for_eval`."""
    self.set_state({**self.get_state(), "num_batches": 0})

  def get_global_batch_size(self) -> int:
    """Examples per step over all hosts."""
    return self.batch_size * self.num_infeed_hosts

  def ids_to_strings(self, ids: np.ndarray, lengths: Sequence[int] | np.ndarray) -> list[str]:
    """Turns token ids [B, T] with valid lengths [B] into B strings (for decode outputs)."""
    raise NotImplementedError(
      f"{type(self).__name__} has no vocabulary, so it cannot turn ids into strings; use an "
      "input with a tokenizer (paxml.data.TextInput) for decoding."
    )

  @abc.abstractmethod
  def get_state(self) -> dict[str, Any]:
    """Position in the stream as a JSON-serialisable dict (saved with each checkpoint)."""

  @abc.abstractmethod
  def set_state(self, state: dict[str, Any]) -> None:
    """Moves to a position returned by `get_state` of an input with the same config."""

  def __iter__(self):
    while True:
      try:
        yield self.get_next()
      except StopIteration:
        return


def _check_sizes(p: BaseInput) -> None:
  if p.batch_size < 1:
    raise InputConfigError(f"{p.name}: batch_size must be >= 1, got {p.batch_size}.")
  if p.num_infeed_hosts < 0:
    raise InputConfigError(
      f"{p.name}: num_infeed_hosts must be >= 0 (0: one per JAX process), got {p.num_infeed_hosts}."
    )
  if not 0 <= p.infeed_host_index < p.num_infeed_hosts:
    raise InputConfigError(
      f"{p.name}: infeed_host_index must lie in [0, num_infeed_hosts) = "
      f"[0, {p.num_infeed_hosts}), got {p.infeed_host_index}. The trainer sets both from "
      "jax.process_index() and jax.process_count()."
    )
  if p.eval_loop_num_batches < 1:
    raise InputConfigError(
      f"{p.name}: eval_loop_num_batches must be >= 1, got {p.eval_loop_num_batches}."
    )


def _check_eval_table(p: BaseInput) -> None:
  """Rejects the combinations the module docstring's table marks as errors."""
  where = (
    f"{p.name}: is_training={p.is_training}, reset_for_eval={p.reset_for_eval}, repeat={p.repeat}"
  )
  if p.is_training and p.reset_for_eval:
    raise InputConfigError(
      f"{where}: reset_for_eval is for eval inputs, which the trainer resets before each eval "
      "run; a training input is never reset. Set is_training=False for an eval input, or "
      "reset_for_eval=False for training."
    )
  if p.reset_for_eval and p.repeat:
    raise InputConfigError(
      f"{where}: an eval with reset_for_eval reads until StopIteration, which a repeating "
      "input never raises. Set repeat=False (or leave it None), or set reset_for_eval=False "
      "and eval_loop_num_batches for a rolling eval."
    )
  if not p.is_training and not p.reset_for_eval and not p.repeat:
    raise InputConfigError(
      f"{where}: without reset_for_eval each eval takes the next eval_loop_num_batches "
      "batches of a rolling stream, which a one-pass input runs out of. Set repeat=True, or "
      "reset_for_eval=True to evaluate the whole finite set each time."
    )


@dataclasses.dataclass
class LingvoInputAdaptor(BaseInput):
  """Pax's adaptor around a Lingvo input generator, here around any input config.

  Pax's lm_cloud experiments write

      pax_fiddle.Config(base_input.LingvoInputAdaptor,
                        input=input_generator.SyntheticLmData.HParams(batch_size=8, seq_len=1024),
                        is_training=True, num_infeed_hosts=jax.process_count())

  Lingvo is not used here: `input` is the config of a BaseInput (such as
  `paxml.tasks.lm.input_generator.SyntheticLmData`), built with the adaptor's host fields
  (`num_infeed_hosts`, `infeed_host_index`, `is_training`, `reset_for_eval`, `name`, the seed)
  and its own `batch_size`; the adaptor's `batch_size` is taken from it, as Pax's is.

  Attributes:
    input: the wrapped input's config.
  """

  input: Any = None

  def __post_init__(self):
    if self.input is None:
      raise InputConfigError(
        f"{self.name}: LingvoInputAdaptor needs `input`, the config of the input it wraps "
        "(e.g. input_generator.SyntheticLmData.HParams(batch_size=8, seq_len=1024))."
      )
    self.batch_size = self.input.batch_size
    super().__post_init__()
    config = self.input.clone() if hasattr(self.input, "clone") else self.input
    for field in ("num_infeed_hosts", "infeed_host_index", "is_training", "reset_for_eval", "name"):
      setattr(config, field, getattr(self, field))
    config.input_random_seed = self.input_random_seed
    self._wrapped = base_hyperparams.instantiate(config)

  def get_next(self) -> NestedMap:
    return self._wrapped.get_next()

  def reset(self) -> None:
    self._wrapped.reset()

  def ids_to_strings(self, ids: np.ndarray, lengths: Sequence[int] | np.ndarray) -> list[str]:
    return self._wrapped.ids_to_strings(ids, lengths)

  def get_state(self) -> dict[str, Any]:
    return self._wrapped.get_state()

  def set_state(self, state: dict[str, Any]) -> None:
    self._wrapped.set_state(state)
