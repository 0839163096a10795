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
  True         False           True    train: an endless stream
  True         False           False   train on one pass; StopIteration ends training
  False        True            False   eval over the whole finite set: `reset()` then `get_next()`
                                       until StopIteration; every host yields the same number of
                                       batches, the short ones padded with zero-weight rows
  False        False           True    rolling eval (the default): each eval takes the next
                                       `eval_loop_num_batches` batches of a repeating stream
  False        False           False   one pass, not reset (reading a set once; as a rolling
                                       eval it runs dry)
  True         True            any     error: `reset_for_eval` is for eval inputs
  False        True            True    error: a repeating input never raises StopIteration

`repeat=None` (the default) picks the valid value: `not reset_for_eval`.

Input checkpointing. Pax's protocol: `get_state()` returns bytes from `_get_state_internal()`
and `set_state(b)` calls `_set_state_internal(b)`; `peek_padded()` looks at the next batch
without consuming it (get_state() then still returns the position before it), and pickling an
input pickles its config and state. This project's own inputs (paxml.data) override
`get_state` / `set_state` with a JSON-serialisable dict of the position in the stream (and the
seed); `set_state(d)` on a freshly built input with the same config continues with the next
batch that was not yet returned, so a resumed run does not see data twice.

Pax's defaults: `batch_size` must be set and `is_training` is False (an experiment marks its
training input with is_training=True). `MultiInput` combines named inputs, and
`DatasetInputSpecsProvider` gives an input's batch specs for model initialization.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import pathlib
import re
from typing import Any, Callable, Sequence

import jax
import numpy as np

from praxis import base_hyperparams
from praxis import pytypes

NestedMap = pytypes.NestedMap
# Pax's name for input specs: a nested map of jax.ShapeDtypeStruct leaves.
NestedShapeDtypeStruct = pytypes.NestedShapeDtypeStruct
instantiate = base_hyperparams.instantiate

# What an input's name may contain (it names summary directories).
_NAME_REGEX = r"[a-zA-Z0-9.:_+-]+"


class InputConfigError(ValueError):
  """A BaseInput was configured with values that cannot work together."""


def _create_input(hparams: Any, state: bytes) -> Any:
  inp = instantiate(hparams)
  inp.set_state(state)
  return inp


def _end_of_input_errors() -> tuple[type[BaseException], ...]:
  """StopIteration, and tf.errors.OutOfRangeError when TensorFlow is loaded."""
  import sys  # pylint: disable=import-outside-toplevel

  tf = sys.modules.get("tensorflow")
  errors = getattr(tf, "errors", None)
  out_of_range = getattr(errors, "OutOfRangeError", None)
  return (StopIteration,) if out_of_range is None else (StopIteration, out_of_range)


class BaseInput(base_hyperparams.FiddleBaseParameterizable):
  """Base class of every input (Pax's): subclasses implement `get_next` (and `reset`).

  Subclasses are keyword-only dataclasses by inheritance, as in Pax: annotated class
  attributes are their fields.

  Attributes:
    batch_size: examples per batch on this host (required).
    num_infeed_hosts: number of hosts that feed data; 0 (Pax's default) lets the trainer use
      jax.process_count(), and an input built outside the trainer reads it as 1.
    infeed_host_index: this host's index in [0, num_infeed_hosts) (jax.process_index()).
    input_random_seed: seed of shuffling and random generation. None draws a fresh one per
      instance, as training data should; `get_state` of our inputs records it.
    reset_for_eval: eval reads one whole finite epoch per eval run (see the module table).
    eval_loop_num_batches: batches per eval run when `reset_for_eval` is False; -1: all.
    is_training: whether the trainer trains on this input.
    experimental_remote_input, tf_data_service_address: Pax's; kept for configs (no remote
      input here).
    batch_padding_size: rows of zeros appended by `get_next_padded`.
    custom_device_order: logical device ids in the order `reshard_for_spmd` places the rows.
    input_checkpointing_enabled: set by the trainer when the input's state is checkpointed.
    repeat: ours: whether the stream restarts after the last example; None picks
      `not reset_for_eval`.
    name: the input's name in summaries (eval_test_<name>); empty: 'train' or 'input'.
  """

  _VALIDATE_BATCH_SIZE_NOT_NONE = True

  batch_size: int | None = None
  num_infeed_hosts: int = 0
  infeed_host_index: int = 0
  input_random_seed: int | None = None
  reset_for_eval: bool = False
  eval_loop_num_batches: int = 1
  is_training: bool = False
  experimental_remote_input: bool = False
  batch_padding_size: int = 0
  custom_device_order: Sequence[int] | None = None
  input_checkpointing_enabled: bool = False
  tf_data_service_address: str | None = None
  repeat: bool | None = None
  dataset: Any = dataclasses.field(default=None, init=False, repr=False)
  _peek: Any = dataclasses.field(default=None, init=False, repr=False)
  _state_before_peek: Any = dataclasses.field(default=None, init=False, repr=False)

  def __post_init__(self):
    parent = getattr(super(), "__post_init__", None)
    if parent is not None:
      parent()
    if self._VALIDATE_BATCH_SIZE_NOT_NONE and self.batch_size is None:
      raise ValueError(
        f"{type(self).__name__}: Must specify self.batch_size (examples per batch on this host)."
      )
    if not self.name:
      self.name = "train" if self.is_training else "input"
    if re.fullmatch(_NAME_REGEX, self.name) is None:
      raise ValueError(
        f'Input params self.name string invalid: "{self.name}" does not fully match '
        f'"{_NAME_REGEX}".'
      )
    if self.repeat is None:
      self.repeat = not self.reset_for_eval
    if self.num_infeed_hosts == 0:
      self.num_infeed_hosts = 1
    _check_sizes(self)
    _check_eval_table(self)
    if self.experimental_remote_input and jax.process_count() > 1:
      raise NotImplementedError("Remote input is not supported with several JAX processes.")
    if self.input_random_seed is None:
      # 63 bits of fresh entropy; an int so that a JSON state can hold it.
      self.input_random_seed = int(np.random.SeedSequence().entropy % (2**63))
    self._peek = None
    self._state_before_peek = None

  # -- sizes (Pax's classmethods: they take a config or an input) ------------------------------

  @classmethod
  def get_batch_size(cls, params: Any) -> int:
    if params.batch_size is None:
      raise ValueError(f"{cls.__name__}: batch_size is not set.")
    return params.batch_size

  @classmethod
  def get_global_batch_size(cls, params: Any) -> int:
    """Examples per step over all hosts: batch_size * num_infeed_hosts."""
    return cls.get_batch_size(params) * (params.num_infeed_hosts or 1)

  # -- reading ---------------------------------------------------------------------------------

  def get_next(self) -> NestedMap:
    """The next batch: host-local arrays with a leading batch_size dim. A finite input raises
    StopIteration (or tf.errors.OutOfRangeError) at its end."""
    raise NotImplementedError(f"{type(self).__name__} must implement get_next().")

  def get_child(self, input_name: str) -> Any:
    raise NotImplementedError(f"{type(self).__name__} has no child inputs ({input_name!r}).")

  def get_next_padded(self) -> NestedMap:
    """The next batch with `batch_padding_size` zero rows appended; a peeked batch first."""
    if self._peek is not None:
      batch, self._peek, self._state_before_peek = self._peek, None, None
      return batch
    batch = self.get_next()
    if not self.batch_padding_size:
      return batch
    pad = self.batch_padding_size
    return jax.tree.map(lambda x: np.pad(x, [(0, pad)] + [(0, 0)] * (np.ndim(x) - 1)), batch)

  def peek_padded(self) -> NestedMap | None:
    """The batch the next get_next_padded() returns, without consuming it (None at the end)."""
    if self._peek is not None:
      return self._peek
    try:
      try:
        self._state_before_peek = self._get_state_internal()
      except NotImplementedError:
        pass
      self._peek = self.get_next_padded()
    except _end_of_input_errors():
      logging.warning("Peek failed: input %s out of range.", self.name)
      self._peek, self._state_before_peek = None, None
    return self._peek

  def reset(self) -> None:
    """Back to the first batch (the trainer calls it before each eval with reset_for_eval).

    Drops a peeked batch. Our inputs whose `get_state` is a dict with a `num_batches` position
    are rewound through set_state; other subclasses rewind their data in their own reset().
    """
    self._peek, self._state_before_peek = None, None
    if type(self).get_state is not BaseInput.get_state:
      state = self.get_state()
      if isinstance(state, dict) and "num_batches" in state:
        self.set_state({**state, "num_batches": 0})

  def ids_to_strings(self, ids: np.ndarray, lengths: Any, key: str | None = None) -> Sequence[str]:
    """Turns token ids [B, T] with valid lengths [B] into B strings (for decode outputs)."""
    raise NotImplementedError(
      f"{type(self).__name__} has no vocabulary, so it cannot turn ids into strings; use an "
      "input with a tokenizer (paxml.data.TextInput) for decoding."
    )

  def __iter__(self):
    while True:
      try:
        yield self.get_next()
      except StopIteration:
        return

  # -- state (Pax's bytes protocol; our own inputs override get_state/set_state with dicts) -----

  def get_state(self) -> Any:
    """The serialized position in the stream (before a peeked batch, if any)."""
    if self._peek is not None:
      if not self._state_before_peek:
        raise ValueError(
          "get_state() after peek_padded() needs _get_state_internal(): without it the "
          "peeked batch's position is lost. Implement _get_state_internal/_set_state_internal."
        )
      return self._state_before_peek
    return self._get_state_internal()

  def _get_state_internal(self) -> bytes:
    raise NotImplementedError(f"{type(self).__name__} does not implement _get_state_internal().")

  def set_state(self, state: Any) -> None:
    """Moves to a position returned by `get_state` of an input with the same config."""
    self._peek, self._state_before_peek = None, None
    self._set_state_internal(state)

  def _set_state_internal(self, state: bytes) -> None:
    raise NotImplementedError(f"{type(self).__name__} does not implement _set_state_internal().")

  def save(self, checkpoint_path: Any) -> None:
    pathlib.Path(checkpoint_path).write_bytes(self.get_state())

  def restore(self, checkpoint_path: Any) -> None:
    self.set_state(pathlib.Path(checkpoint_path).read_bytes())

  def __reduce__(self) -> tuple[Callable[[Any, bytes], Any], tuple[Any, bytes]]:
    """Pickles as (config, state): unpickling rebuilds the input at the same position."""
    config = base_hyperparams.Config(
      type(self), **{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
    )
    return _create_input, (config, self.get_state())

  # -- placing batches on devices --------------------------------------------------------------

  def reshard_for_pmap(self, arrays: Any) -> Any:
    """[B, ...] -> [local devices, B / devices, ...] for pmap."""
    if self.custom_device_order is not None:
      raise ValueError("custom_device_order is for reshard_for_spmd, not pmap.")
    n = jax.local_device_count()
    return jax.tree.map(lambda x: np.reshape(x, (n, -1) + np.shape(x)[1:]), arrays)

  def reshard_for_spmd(self, arrays: Any, global_mesh: Any, pspecs: Any) -> Any:
    """Host-local batches -> global jax.Arrays sharded by `pspecs` on `global_mesh`."""

    def one(x, spec):
      sharding = jax.sharding.NamedSharding(global_mesh, spec)
      if self.custom_device_order is None:
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))
      order = list(self.custom_device_order)
      if len(order) != jax.device_count():
        raise ValueError(
          f"custom_device_order has {len(order)} ids for {jax.device_count()} devices."
        )
      devices = list(global_mesh.devices.flat)
      shards = np.split(np.asarray(x), len(global_mesh.local_devices))
      placed = [jax.device_put(s, devices[order[i]]) for i, s in enumerate(shards)]
      shape = (np.shape(x)[0] * jax.process_count(),) + np.shape(x)[1:]
      flat = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array([devices[i] for i in order]), ("d",)),
        jax.sharding.PartitionSpec("d"),
      )
      return jax.make_array_from_single_device_arrays(shape, flat, placed)

    return jax.tree.map(one, arrays, pspecs)


def _check_sizes(p: BaseInput) -> None:
  if p.batch_size is not None and p.batch_size < 1:
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
  if p.eval_loop_num_batches is not None and (
    p.eval_loop_num_batches < 1 and p.eval_loop_num_batches != -1
  ):
    raise InputConfigError(
      f"{p.name}: eval_loop_num_batches must be >= 1 or -1 (all), got {p.eval_loop_num_batches}."
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

  _VALIDATE_BATCH_SIZE_NOT_NONE = False

  input: Any = None

  @classmethod
  def get_batch_size(cls, params: Any) -> int:
    return params.input.batch_size

  def __post_init__(self):
    if self.input is None:
      raise InputConfigError(
        f"{self.name}: LingvoInputAdaptor needs `input`, the config of the input it wraps "
        "(e.g. input_generator.SyntheticLmData.HParams(batch_size=8, seq_len=1024))."
      )
    if self.batch_size is not None and self.batch_size != self.input.batch_size:
      raise ValueError(
        "LingvoInputAdaptor takes its batch size from `input`: leave self.batch_size unset and "
        "set input.batch_size."
      )
    built = isinstance(self.input, BaseInput)  # fdl.build of the adaptor's config built it
    if not built and not hasattr(self.input, "clone"):
      raise InputConfigError(
        f"{self.name}: LingvoInputAdaptor wraps a praxis input config here (Lingvo input "
        f"generators are not part of this stack); got {type(self.input).__name__}."
      )
    self.batch_size = self.input.batch_size
    super().__post_init__()
    host_fields = ("num_infeed_hosts", "infeed_host_index", "is_training", "reset_for_eval", "name")
    overrides = {f: getattr(self, f) for f in host_fields}
    overrides["input_random_seed"] = self.input_random_seed
    if built:
      # Rebuilt with the adaptor's host fields (the first build had the input's own).
      self._wrapped = dataclasses.replace(self.input, **overrides)
      return
    config = self.input.clone()
    for field, value in overrides.items():
      setattr(config, field, value)
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


class MultiInput(BaseInput):
  """Named inputs read together: each batch is NestedMap(name=that input's batch).

  The children share this input's host fields (num_infeed_hosts, infeed_host_index,
  is_training, reset_for_eval, eval_loop_num_batches) and are named `<name>_<child>`. Every array
  is reshaped to [outer, child_batch / outer, ...] with outer the gcd of the children's batch
  sizes, so that all arrays share the leading (sharded) batch dim; the model folds it back.

  Attributes:
    input_to_params: child name -> input config (each sets its own batch_size).
    default_input: the child whose ids_to_strings is used by default.
  """

  _VALIDATE_BATCH_SIZE_NOT_NONE = False

  input_to_params: dict[str, Any] | None = None
  default_input: str | None = None
  _inputs: Any = dataclasses.field(default=None, init=False, repr=False)

  def __post_init__(self):
    if self.batch_size is not None:
      raise ValueError(
        "MultiInput does not support self.batch_size: set the batch size on each child input."
      )
    super().__post_init__()
    if not self.input_to_params:
      raise ValueError("MultiInput: set input_to_params, the child inputs' configs by name.")
    if self.reset_for_eval and len(self.input_to_params) > 1:
      raise ValueError("MultiInput: only one child input can be used with reset_for_eval.")
    self._inputs = {}
    for child, config in self.input_to_params.items():
      config = config.clone()
      config.num_infeed_hosts = self.num_infeed_hosts
      config.infeed_host_index = self.infeed_host_index
      config.is_training = self.is_training
      config.reset_for_eval = self.reset_for_eval
      config.eval_loop_num_batches = self.eval_loop_num_batches
      config.name = f"{self.name}_{child}"
      self._inputs[child] = instantiate(config)

  @classmethod
  def get_batch_size(cls, params: Any) -> int:
    """The outer batch size: the gcd of the children's batch sizes."""
    if not params.input_to_params:
      raise ValueError("MultiInput: input_to_params is empty.")
    sizes = [
      c.__fn_or_cls__.get_batch_size(c)
      if hasattr(c, "__fn_or_cls__")
      else type(c).get_batch_size(c)
      for c in params.input_to_params.values()
    ]
    return math.gcd(*sizes)

  def get_next(self) -> NestedMap:
    outer = self.get_batch_size(self)
    batch = NestedMap({name: inp.get_next() for name, inp in self._inputs.items()})
    return jax.tree.map(lambda x: np.reshape(x, (outer, -1) + np.shape(x)[1:]), batch)

  def get_child(self, input_name: str) -> BaseInput:
    return self._inputs[input_name]

  def reset(self) -> None:
    super().reset()
    for inp in self._inputs.values():
      inp.reset()

  def ids_to_strings(self, ids, lengths, key=None, input_name: str | None = None):
    name = input_name or self.default_input
    if name is None:
      raise ValueError("MultiInput.ids_to_strings: pass input_name or set default_input.")
    return self._inputs[name].ids_to_strings(ids, lengths, key)


class BaseInputSpecsProvider(base_hyperparams.FiddleBaseParameterizable):
  """Gives the (per-host, unpadded) batch specs a model is initialized with."""

  def get_input_specs(self) -> Any:
    raise NotImplementedError(f"{type(self).__name__} must implement get_input_specs().")


class DatasetInputSpecsProvider(BaseInputSpecsProvider):
  """The specs of an input's batches: from its tf.data `dataset` when every shape is known,
  else from its first padded batch.

  Attributes:
    input_p: the input's config.
  """

  input_p: Any = None
  _input_specs: Any = dataclasses.field(default=None, init=False, repr=False)

  def __post_init__(self):
    parent = getattr(super(), "__post_init__", None)
    if parent is not None:
      parent()
    if self.input_p is None:
      raise ValueError("DatasetInputSpecsProvider: set input_p, the input's config.")
    inp = instantiate(self.input_p)
    spec = getattr(inp.dataset, "element_spec", None)
    if spec is not None and all(
      s.shape.is_fully_defined() for s in jax.tree_util.tree_leaves(spec)
    ):
      self._input_specs = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(tuple(s.shape), s.dtype.as_numpy_dtype), spec
      )
      return
    logging.warning(
      "Input specs of %s come from its first batch; an explicit input specs provider is more "
      "deterministic.",
      self.input_p,
    )
    self._input_specs = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), inp.get_next_padded()
    )

  def get_input_specs(self) -> Any:
    return self._input_specs
