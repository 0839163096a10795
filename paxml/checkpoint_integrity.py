"""Checksums that make a damaged checkpoint fail loudly instead of restoring wrong numbers.

Each `checkpoint_%08d` directory gets a manifest, `checksums.json`, written after Orbax has
finished the step (so it is the last file of a checkpoint to appear) and renamed into place
atomically. It holds:

  files   the SHA-256 and size of every file in the step directory, read back from disk after
          the save: array data, Orbax's `_METADATA` files and the input position JSON alike.
  arrays  per array of the saved tree (by path, e.g. `params/lm/softmax/w`): its shape, dtype
          and a 64-bit checksum of its values, computed on the device from the array that was
          handed to the save. It does not depend on the sharding, so it is checked again after a
          restore onto another mesh.

From the oldest step of a directory that has a manifest on, a step without a readable one is
incomplete (killed between Orbax's commit and the manifest) or damaged. Steps older than that (or
all, when none has one) were written before checkpoints had checksums: they are read unverified,
with one warning.
"""

import hashlib
import json
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

MANIFEST = "checksums.json"
_FORMAT = 1
_CHUNK = 4 << 20


class CorruptCheckpointError(Exception):
  """A checkpoint whose files or values do not match its manifest; `reason` says how."""

  def __init__(self, step: int, reason: str):
    super().__init__(f"checkpoint step {step} is corrupt: {reason}")
    self.step = step
    self.reason = reason


class UnfinishedCheckpointError(CorruptCheckpointError):
  """A checkpoint without its manifest: the save was interrupted (a kill between Orbax's commit
  and checksums.json) or the manifest was removed. Not known to be damaged, but unverifiable."""

  def __init__(self, step: int, reason: str):
    Exception.__init__(self, f"checkpoint step {step} is unfinished: {reason}")
    self.step = step
    self.reason = reason


def _write_atomically(path: str, text: str) -> None:
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()


def file_checksums(step_dir: str) -> dict[str, dict[str, Any]]:
  """{relative path: {size, sha256}} for every file under `step_dir` but the manifest."""
  files = {}
  for root, _, names in os.walk(step_dir):
    for name in names:
      path = os.path.join(root, name)
      rel = os.path.relpath(path, step_dir)
      if rel == MANIFEST or rel.startswith(MANIFEST + ".tmp"):
        continue
      files[rel] = {"size": os.path.getsize(path), "sha256": _sha256(path)}
  return files


def _leaf_key(path) -> str:
  return jax.tree_util.keystr(path, simple=True, separator="/")


def _words(x: jax.Array) -> jax.Array:
  """The array's bytes as a flat vector of uint32 (one per element of 1, 2 or 4 bytes)."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
  return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32).ravel()


def _checksum(x: jax.Array) -> jax.Array:
  """Two wrapping uint32 sums: of the words, and of word * (2 * position + 1). Sums do not
  depend on the order of reduction (so not on the sharding); the second one also catches
  swapped elements."""
  words = _words(x)
  odd = jnp.arange(words.size, dtype=jnp.uint32) * 2 + 1
  return jnp.stack([jnp.sum(words, dtype=jnp.uint32), jnp.sum(words * odd, dtype=jnp.uint32)])


_checksums_jit = jax.jit(lambda leaves: [_checksum(x) for x in leaves])


def _array_leaves(tree: Any) -> list[tuple[str, Any]]:
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return [
    (_leaf_key(p), x)
    for p, x in flat
    if isinstance(x, (jax.Array, np.ndarray, np.generic)) and np.size(x) > 0
  ]


def compile_array_checksums(abstract_tree: Any) -> Any:
  """The checksum program for trees of arrays shaped (and sharded) like `abstract_tree`, whose
  leaves are `jax.ShapeDtypeStruct`s, compiled ahead of time. Compiling it inside the first
  save would stall the train loop for the compile (0.2-1 s measured); `start_array_checksums`
  runs it when the arrays match and otherwise falls back to the jitted program."""
  flat = jax.tree_util.tree_leaves(abstract_tree)
  leaves = [x for x in flat if isinstance(x, jax.ShapeDtypeStruct) and math.prod(x.shape) > 0]
  return _checksums_jit.lower(leaves).compile()


def start_array_checksums(
  tree: Any, program: Any = None
) -> list[tuple[str, tuple, str, jax.Array]]:
  """Starts the checksums of `tree`'s arrays on their devices; `finish_array_checksums` reads
  them. `program` is `compile_array_checksums`'s, or None. Every process of a multi-process job
  must call it (the sums are collectives)."""
  leaves = _array_leaves(tree)
  arrays = [x if isinstance(x, jax.Array) else jnp.asarray(x) for _, x in leaves]
  sums = None
  if program is not None:
    try:
      sums = program(arrays)
    except (TypeError, ValueError):  # Other shapes, dtypes or shardings than it was built for.
      sums = None
  if sums is None:
    sums = _checksums_jit(arrays)
  return [
    (
      k,
      tuple(np.shape(x)),
      str(np.asarray(x).dtype if not isinstance(x, jax.Array) else x.dtype),
      s,
    )
    for (k, x), s in zip(leaves, sums)
  ]


def finish_array_checksums(started) -> dict[str, dict[str, Any]]:
  def value(s):
    # Replicated: every process holds the whole (2,) result.
    local = s.addressable_data(0) if isinstance(s, jax.Array) else s
    return [int(v) for v in np.asarray(local)]

  return {
    k: {"shape": list(shape), "dtype": dtype, "sum": value(s)} for k, shape, dtype, s in started
  }


def write_manifest(step_dir: str, step: int, arrays: dict[str, dict[str, Any]]) -> int:
  """Checksums every file of the finished step and writes the manifest; returns bytes hashed."""
  files = file_checksums(step_dir)
  manifest = {
    "format": _FORMAT,
    "step": step,
    "saved_at": time.time(),
    "files": files,
    "arrays": arrays,
  }
  _write_atomically(os.path.join(step_dir, MANIFEST), json.dumps(manifest, indent=0))
  return sum(f["size"] for f in files.values())


def read_manifest(step_dir: str, step: int) -> dict[str, Any]:
  path = os.path.join(step_dir, MANIFEST)
  try:
    with open(path) as f:
      manifest = json.load(f)
  except FileNotFoundError:
    raise UnfinishedCheckpointError(
      step, f"no {MANIFEST} (the save did not finish, or the file was removed)"
    ) from None
  except (OSError, ValueError) as e:
    raise CorruptCheckpointError(step, f"unreadable {MANIFEST}: {e}") from None
  if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
    raise CorruptCheckpointError(step, f"{MANIFEST} is not a format-{_FORMAT} manifest")
  return manifest


def verify_files(step_dir: str, step: int, only: str | None = None) -> dict[str, Any]:
  """Checks every file (or those under the subdirectory `only`) against the manifest; returns
  the manifest, else raises CorruptCheckpointError naming the first file that is missing,
  resized or changed."""
  manifest = read_manifest(step_dir, step)
  for rel, expected in sorted(manifest["files"].items()):
    if only is not None and not rel.startswith(only + os.sep):
      continue
    path = os.path.join(step_dir, rel)
    try:
      size = os.path.getsize(path)
    except OSError:
      raise CorruptCheckpointError(step, f"{rel} is missing") from None
    if size != expected["size"]:
      raise CorruptCheckpointError(step, f"{rel} has {size} bytes, {expected['size']} written")
    if _sha256(path) != expected["sha256"]:
      raise CorruptCheckpointError(step, f"{rel} does not match its checksum (changed on disk)")
  return manifest


def verify_arrays(manifest: dict[str, Any], tree: Any, step: int, program: Any = None) -> None:
  """Checks the restored arrays of `tree` against the manifest's checksums (with `program`, as
  `start_array_checksums`). Arrays restored with another shape or dtype than saved (a cast on
  restore) are not comparable and skipped."""
  saved = manifest.get("arrays", {})
  restored = finish_array_checksums(start_array_checksums(tree, program))
  for key, value in restored.items():
    expected = saved.get(key)
    if (
      expected is None
      or expected["shape"] != value["shape"]
      or (expected["dtype"] != value["dtype"])
    ):
      continue
    if expected["sum"] != value["sum"]:
      raise CorruptCheckpointError(step, f"array {key} read back differs from the one saved")
