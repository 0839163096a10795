"""Pax's `praxis.py_utils`: NestedMap and the array helpers Pax's layers and tests use.

Only the helpers that code written against Pax's layer API reaches for live here; the trainer's
host/device utilities are in paxml.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import threading
import time
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence, Union

from absl import logging
import flax
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import numpy as np
import optax

from praxis import pytypes

NestedMap = pytypes.NestedMap
JTensor = pytypes.JTensor


def with_sharding_constraint(x: JTensor, spec: jax.sharding.PartitionSpec | None) -> JTensor:
  """`jax.lax.with_sharding_constraint` when a mesh is active, else `x` unchanged.

  Pax only annotates inside a mesh; outside one (a single device, a unit test) the annotation
  would have nothing to refer to.
  """
  if spec is None or not global_mesh_defined():
    return x
  return jax.lax.with_sharding_constraint(x, spec)


def global_mesh_defined() -> bool:
  """True when a mesh with devices is active (`with mesh:` or `jax.set_mesh`)."""
  abstract = jax.sharding.get_abstract_mesh()
  if abstract is not None and not abstract.empty:
    return True
  try:
    from jax.interpreters import pxla  # pylint: disable=import-outside-toplevel

    return not pxla.thread_resources.env.physical_mesh.empty
  except Exception:  # pylint: disable=broad-except
    return False


@contextlib.contextmanager
def logging_verbosity_level(level: str) -> Iterator[None]:
  """Temporarily sets absl's verbosity ('FATAL', 'INFO', ...)."""
  old = logging.get_verbosity()
  logging.set_verbosity(level.lower() if isinstance(level, str) else level)
  try:
    yield
  finally:
    logging.set_verbosity(old)


def get_large_negative_number(dtype: Any) -> JTensor:
  """A large negative number of `dtype`: -0.7 x its max, so that sums of two do not overflow."""
  dtype = jnp.asarray(0, dtype=dtype).dtype  # int64 is int32 without x64: use its limits
  if jnp.issubdtype(dtype, jnp.inexact):
    limit = jnp.finfo(dtype).max
  else:
    limit = jnp.iinfo(dtype).max
  return jnp.asarray(-0.7 * limit, dtype=dtype)


def apply_mask_to_logits(logits: JTensor, mask: JTensor) -> JTensor:
  """Sets logits where `mask` is 0 to a large negative number (mask broadcasts to logits)."""
  min_value = get_large_negative_number(logits.dtype)
  return jnp.where(mask >= 0.5, logits, min_value)


def sequence_mask(lengths: JTensor, maxlen: int, dtype: Any = jnp.bool_) -> JTensor:
  """[B, maxlen] mask: 1 for positions < length."""
  return (jnp.arange(maxlen)[None, :] < jnp.asarray(lengths)[:, None]).astype(dtype)


def sequence_paddings(lengths: JTensor, maxlen: int, dtype: Any = jnp.float32) -> JTensor:
  """[B, maxlen] paddings: 1 for positions >= length (`lengths` an array or a list)."""
  lengths = jnp.asarray(lengths)
  return (jnp.arange(maxlen)[None, :] >= lengths[..., None]).astype(dtype)


def apply_padding(
  inputs: JTensor,
  padding: JTensor,
  pad_value: Any = None,
  use_select: bool = True,
  axis: int | None = None,
) -> JTensor:
  """Puts `pad_value` (default 0) where `padding` is 1; `padding` broadcasts to `inputs`.

  axis: where broadcasting starts: `padding`'s dims from `axis` on are cut or extended with
  1-dims to the rank of `inputs`' dims from `axis` on (e.g. paddings [B, T] for inputs
  [B, T, D] with axis=1 become [B, T, 1]). use_select=False pads arithmetically instead.
  """
  padding = jnp.asarray(padding)
  if axis is not None:
    head, tail = list(padding.shape[:axis]), list(padding.shape[axis:])
    inputs_tail = inputs.ndim - axis
    padding = jnp.reshape(
      padding, head + tail[:inputs_tail] + [1] * max(inputs_tail - len(tail), 0)
    )
  if use_select:
    if pad_value is None:
      pad_value = jnp.zeros([], inputs.dtype)
    mask = padding if padding.dtype == jnp.bool_ else padding > 0
    return jnp.where(mask, pad_value, inputs)
  result = inputs * (1.0 - padding.astype(jnp.float32)).astype(inputs.dtype)
  if pad_value is not None:
    pad_value = jnp.asarray(pad_value)
    result += pad_value * padding.astype(pad_value.dtype)
  return result


def total_num_vars(variables: Any) -> int:
  """The number of scalars in a tree of arrays."""
  return sum(int(np.prod(np.shape(x))) for x in jax.tree.leaves(variables))


def merge_dict(dict1: dict[str, Any], dict2: dict[str, Any]) -> dict[str, Any]:
  """Merges two nested dicts; raises on a key present in both at a leaf."""
  out = dict(dict1)
  for key, value in dict2.items():
    if key in out:
      if isinstance(out[key], dict) and isinstance(value, dict):
        out[key] = merge_dict(out[key], value)
      else:
        raise ValueError(f"merge_dict: key {key!r} is in both dicts; rename one of them.")
    else:
      out[key] = value
  return out


def tree_unstack(tree: Any, axis: int) -> Sequence[Any]:
  """Splits every leaf along `axis` into a list of trees."""
  leaves, treedef = jax.tree.flatten(tree)
  if not leaves:
    return []
  n = leaves[0].shape[axis]

  def take(x: Any, i: int) -> Any:
    # NumPy leaves stay NumPy (object arrays of strings or bytes cannot become jax arrays).
    return np.take(x, i, axis=axis) if isinstance(x, np.ndarray) else jnp.take(x, i, axis=axis)

  return [treedef.unflatten([take(x, i) for x in leaves]) for i in range(n)]


def assert_same_shape_and_dtype(x: Any, y: Any) -> None:
  """Raises unless every array of tree `x` has the shape and dtype of its match in tree `y`."""

  def check(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
      raise ValueError(
        f"Expected the same shape and dtype, got {a.shape}/{a.dtype} and {b.shape}/{b.dtype}."
      )

  jax.tree.map(check, x, y)


def l2_normalize(x: JTensor, axis: Any = -1, epsilon: float = 1e-12) -> JTensor:
  """x / max(||x||_2, sqrt(epsilon)) along `axis` (TF's tf.math.l2_normalize)."""
  norm_sq = jnp.sum(x * x, axis=axis, keepdims=True)
  return x * jax.lax.rsqrt(jnp.maximum(norm_sq, epsilon))


def pad_or_trim_to(x: JTensor | None, shape: Sequence[int], pad_val: Any = 0) -> JTensor | None:
  """x cut to `shape` where it is longer and padded with pad_val at the end where shorter
  (same rank as x; None stays None)."""
  if x is None:
    return None
  if len(shape) != x.ndim:
    raise ValueError(f"pad_or_trim_to: shape {tuple(shape)} must have x's rank {x.ndim}.")
  x = x[tuple(slice(0, n) for n in shape)]
  padding = [(0, n - size) for size, n in zip(x.shape, shape)]
  return jnp.pad(x, padding, constant_values=pad_val)


Nested = pytypes.Nested
Patterns = Union[str, re.Pattern, Iterable[Union[re.Pattern, str]]]
# The keys seqio's provenance adds to each example, which `get_enumeration_id` reads.
PROVENANCE_PREFIX = "_seqio_provenance"
INDEX_WITHIN_SHARD_KEY = PROVENANCE_PREFIX + "/index_within_shard"
SHARD_INDEX_KEY = PROVENANCE_PREFIX + "/shard_index"
NUM_SHARDS_KEY = PROVENANCE_PREFIX + "/num_shards"
ENUM_PROVENANCE_KEYS = (INDEX_WITHIN_SHARD_KEY, SHARD_INDEX_KEY, NUM_SHARDS_KEY)


class ThreadLocalStack(threading.local):
  """A list (`.stack`) of its own in each thread."""

  def __init__(self):
    super().__init__()
    self.stack = []


# NestedMaps serialize (flax.serialization, checkpoints) as the dicts they are.
try:
  flax.serialization.register_serialization_state(
    NestedMap,
    lambda m: flax.serialization.to_state_dict(dict(m)),
    lambda m, state: NestedMap(flax.serialization.from_state_dict(dict(m), state)),
  )
except ValueError:  # registered already (module reloaded)
  pass


# ---- Sequences [B, T, ...] with paddings [B, T] (1 = padded), no leading padding. ----


@jax.vmap
def flip_sequence(inputs: JTensor, lengths: JTensor) -> JTensor:
  """Per row: the first `length` positions in reverse order, then the rest (also reversed)."""
  max_length = inputs.shape[0]
  return jnp.flip(jnp.roll(inputs, max_length - lengths, axis=0), axis=0)


def concat_sequences_with_padding(
  input0: JTensor, paddings0: JTensor, input1: JTensor, paddings1: JTensor
) -> tuple[JTensor, JTensor]:
  """Row by row, input0's valid positions followed by all of input1 (its padding included);
  returns ([B, T0 + T1, ...], paddings [B, T0 + T1]) with the padding at the end."""
  if input0.shape[0] != input1.shape[0] or input0.shape[2:] != input1.shape[2:]:
    raise ValueError(
      f"concat_sequences_with_padding: inputs {input0.shape} and {input1.shape} must agree in "
      "every dim but the time dim (1)."
    )
  for x, p in ((input0, paddings0), (input1, paddings1)):
    if x.shape[:2] != p.shape[:2]:
      raise ValueError(f"concat_sequences_with_padding: paddings {p.shape} do not match {x.shape}.")
  batch = input0.shape[0]
  len0 = (1 - paddings0).sum(-1).astype(jnp.int32)  # [B]
  len1 = (1 - paddings1).sum(-1).astype(jnp.int32)  # [B]
  full0 = jnp.full([batch], paddings0.shape[1], jnp.int32)
  full1 = jnp.full([batch], paddings1.shape[1], jnp.int32)
  # Reversed, input0's valid part ends the row; after it comes reversed input1: flipping the
  # joint row by len0 + T1 puts input0's valid part first, input1 right behind it.
  joined = jnp.concatenate([flip_sequence(input1, full1), flip_sequence(input0, len0)], axis=1)
  inputs = flip_sequence(joined, len0 + full1)
  joined_pad = jnp.concatenate([flip_sequence(paddings0, full0), paddings1], axis=1)
  paddings = flip_sequence(joined_pad, full0 + len1)
  return inputs, paddings


def append_eos(
  x: JTensor, paddings: JTensor, eos_id: int, extend_if_overflow: bool = True
) -> tuple[JTensor, JTensor]:
  """Ends every row of ids `x` [B, T] with `eos_id` (unless it ends so already); padded
  positions become eos_id. A full row without eos grows the output to [B, T + 1] when
  `extend_if_overflow`, else keeps its last token."""
  b, t = x.shape
  lengths = (1 - paddings).astype(jnp.int32).sum(-1)  # [B]
  reversed_x = flip_sequence(x, lengths)  # last valid token first
  with_eos = jnp.concatenate([jnp.full([b, 1], eos_id, x.dtype), reversed_x], axis=1)  # [B, T+1]
  out = flip_sequence(with_eos, lengths + 1)
  needs_eos = jnp.logical_or(lengths == 0, reversed_x[:, 0] != eos_id)  # [B]
  out_lengths = lengths + needs_eos.astype(jnp.int32)
  out_paddings = sequence_paddings(out_lengths, t + 1, x.dtype)  # [B, T+1]
  out = out * (1 - out_paddings) + eos_id * out_paddings
  keep = t + 1 if (extend_if_overflow and not bool(jnp.all(out_lengths <= t))) else t
  return out[:, :keep], out_paddings.astype(paddings.dtype)[:, :keep]


# ---- Trees ----


def extract_prefixed_keys_from_nested_map(
  node: Any,
  prefix: str = "",
  key_separator: str = "/",
  left_separator: str = "[",
  right_separator: str = "]",
  is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
  """A tree shaped like `node` whose leaves are their path names: dict keys and NamedTuple /
  registered-dataclass fields joined by `key_separator`, sequence indices as `[i]`
  ('a/b[0]'). A PartitionSpec is a leaf; leaves where `is_leaf` holds become None."""
  keys = functools.partial(
    extract_prefixed_keys_from_nested_map,
    key_separator=key_separator,
    left_separator=left_separator,
    right_separator=right_separator,
    is_leaf=is_leaf,
  )

  def join(name):
    return f"{prefix}{key_separator}{name}" if prefix else f"{name}"

  if is_leaf is not None and is_leaf(node):
    return None
  if isinstance(node, dict):
    return type(node)({k: keys(v, join(k)) for k, v in node.items()})
  if isinstance(node, jax.sharding.PartitionSpec):
    return prefix
  if isinstance(node, (list, tuple)):
    if hasattr(node, "_fields"):  # a NamedTuple
      return type(node)(**{f: keys(getattr(node, f), join(f)) for f in node._fields})
    return type(node)(
      keys(v, f"{prefix}{left_separator}{i}{right_separator}") for i, v in enumerate(node)
    )
  if dataclasses.is_dataclass(node) and type(node) in flax.serialization._STATE_DICT_REGISTRY:  # pylint: disable=protected-access
    fields = node.__dict__ if hasattr(node, "__dict__") else flax.serialization.to_state_dict(node)
    return type(node)(**{k: keys(v, join(k)) for k, v in fields.items()})
  return prefix or None


def extract_keys(n, p, key_separator, left_separator, right_separator, is_leaf):
  """extract_prefixed_keys_from_nested_map with every argument given (Pax's shorthand)."""
  return extract_prefixed_keys_from_nested_map(
    n,
    p,
    key_separator=key_separator,
    left_separator=left_separator,
    right_separator=right_separator,
    is_leaf=is_leaf,
  )


def select_nodes_by_indices(indices: Any, *trees: Any) -> Any:
  """A tree like `indices` whose leaf at each place is `trees[index]`'s leaf there."""
  return jax.tree.map(lambda idx, *leaves: leaves[idx], indices, *trees)


def match_variable_names(
  tree: Any, patterns: Patterns, is_leaf: Callable[..., bool] | None = None
) -> Any:
  """A tree of bools: whether each variable's path ('a/b') fully matches one of `patterns`."""
  from praxis import trees  # pylint: disable=import-outside-toplevel

  return trees.fullmatch_path(tree, patterns, is_leaf=is_leaf)


def update_matched_variables(
  old_tree: Any, new_tree: Any, patterns: Patterns, invert: bool = False
) -> Any:
  """`old_tree` with the variables whose paths match `patterns` (or, with `invert`, those that
  do not) taken from `new_tree` (same structure)."""
  mask = match_variable_names(old_tree, patterns)
  if invert:
    mask = jax.tree.map(lambda m: not m, mask)
  names = jax.tree.leaves(extract_prefixed_keys_from_nested_map(old_tree))
  for name, take in zip(names, jax.tree.leaves(mask)):
    logging.info("Bprop %s var: %s", "included" if take else "excluded", name)
  return select_nodes_by_indices(jax.tree.map(int, mask), old_tree, new_tree)


def concat_nested_maps(map_list: list[NestedMap], axis: int) -> NestedMap:
  """The first map with each array that the second map also has (and that has a dim `axis`)
  concatenated over all maps along `axis`, recursing into nested maps; the rest as in the
  first map."""
  if len(map_list) < 2:
    return map_list[0]
  first, second = map_list[0], map_list[1]
  out = NestedMap()
  for k, v in first.items():
    out[k] = v
    if k not in second:
      continue
    if isinstance(v, jax.Array) and v.ndim > axis:
      out[k] = jnp.concatenate([m[k] for m in map_list], axis=axis)
    elif isinstance(v, dict):
      out[k] = concat_nested_maps([m[k] for m in map_list], axis=axis)
  return out


def filter_by_matching_keys(batch: dict[str, Any], prefixes: Sequence[str]):
  """(entries whose key starts with one of `prefixes`, the others), as NestedMaps."""
  matching, other = NestedMap(), NestedMap()
  for k, v in batch.items():
    (matching if any(k.startswith(p) for p in prefixes) else other)[k] = v
  return matching, other


class BpropMaskedNode(NamedTuple):
  """Stands in the gradient / optimizer trees for a variable that is excluded from bprop."""


def is_bprop_masked_node(x: Any) -> bool:
  return isinstance(x, BpropMaskedNode)


def is_optax_masked_node(x: Any) -> bool:
  return isinstance(x, optax.MaskedNode)


def get_enumeration_id(example: dict[str, Any], pop: bool = False) -> str | None:
  """'<index key>=i/<shard key>=s/<num shards key>=n' from seqio's provenance fields of an
  example (None without them); `pop` removes those fields from `example`."""
  if not all(k in example for k in ENUM_PROVENANCE_KEYS):
    return None
  read = example.pop if pop else example.get
  return "/".join(f"{k}={int(np.asarray(read(k)).item())}" for k in ENUM_PROVENANCE_KEYS)


# ---- Hosts and devices ----


def reshard(array: Any) -> np.ndarray:
  """[B, ...] -> [local devices, B / local devices, ...] (pmap's layout)."""
  devices = jax.local_device_count()
  return np.reshape(array, (devices, array.shape[0] // devices) + tuple(array.shape[1:]))


def _first_local_shard(x: Any) -> Any:
  """One copy of a replicated array: the first local shard (pmap's leading device axis
  dropped); scalars, host values and single-device arrays pass through."""
  if not isinstance(x, jax.Array) or x.ndim == 0:
    return x
  if isinstance(x.sharding, jax.sharding.SingleDeviceSharding):
    return x
  if len(jax.local_devices()) == 1:
    return x[0]  # pmap over one device: [1, ...]
  if x.sharding.is_fully_replicated:
    return x.addressable_shards[0].data
  shard = x.addressable_shards[0].data
  # A pmap output's shard is [1, ...]; an SPMD batch shard keeps its rows.
  return shard.squeeze(0) if shard.shape and shard.shape[0] == 1 else shard


def maybe_unreplicate_for_fully_replicated(data: Any) -> Any:
  """Pax's: one copy of data that is identical on every device (pmap-replicated weights,
  metrics synchronised across replicas): each array's first local shard."""
  return jax.tree.map(_first_local_shard, data)


def maybe_unreplicate_for_first_shard(data: Any) -> Any:
  """Pax's: the first local shard of each array, whether or not the devices agree."""
  return jax.tree.map(_first_local_shard, data)


def is_tpu() -> bool:
  return jax.local_devices()[0].platform == "tpu"


def is_mock_tpu_backend() -> bool:
  """Whether a mock TPU backend is in use (never, here)."""
  return False


def sync_global_devices(name: str) -> None:
  """Waits until every host reaches this point (a no-op with one process)."""
  logging.info("sync_global_devices %s across %d devices", name, jax.device_count())
  multihost_utils.sync_global_devices(name)


def sharded_file_pattern_to_glob(file_pattern: str) -> str:
  """'path@N' -> 'path-?????-of-0000N' ('path@*' -> 'path-?????-of-*'); others unchanged."""
  if "," in file_pattern:
    raise ValueError(f"sharded_file_pattern_to_glob takes one pattern, got {file_pattern!r}.")
  if "@" not in file_pattern:
    return file_pattern
  path, shards = file_pattern.split("@")
  return f"{path}-?????-of-*" if shards == "*" else f"{path}-?????-of-{int(shards):05}"


# ---- Timing ----


@dataclasses.dataclass
class RunningPeriod:
  """A timed interval: `elapsed` seconds (so far, while `end` is None), at least min_elapsed."""

  start: float
  end: float | None = None
  min_elapsed: float = 0

  @property
  def elapsed(self) -> float:
    stop = time.time() if self.end is None else self.end
    return max(stop - self.start, self.min_elapsed)


@contextlib.contextmanager
def timeit(min_elapsed: float = 1e-6) -> Iterator[RunningPeriod]:
  """`with timeit() as period: ...` then `period.elapsed` is the block's wall time."""
  period = RunningPeriod(start=time.time(), min_elapsed=min_elapsed)
  try:
    yield period
  finally:
    period.end = time.time()


def benchmark(prefix: str = "", first_n: int | None = None):
  """Decorator logging the wall time of each call (of the first `first_n` calls, when given)."""

  def decorator(func):
    calls = 0

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
      nonlocal calls
      calls += 1
      if first_n is not None and calls > first_n:
        return func(*args, **kwargs)
      start = time.time()
      result = func(*args, **kwargs)
      logging.info(
        "%sElapsed time for <%s>: %.02f seconds", prefix, func.__name__, time.time() - start
      )
      return result

    return wrapper

  return decorator
