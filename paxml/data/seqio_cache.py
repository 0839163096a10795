"""A SeqIO task's training rows in ArrayRecord shards, read by index with Grain (issue 33).

SeqIOInput's tf.data pipeline cannot seek: a bare position costs a read of every batch before it.
For a training input over a `seqio.Task` whose split fits the size limit, SeqIOInput instead
materializes the split once into this cache, after the task's preprocessors AND the feature
converter (so packing runs once, over the split in its stored order, and stays deterministic),
and then computes batch i from i:

  rows      Grain `MapDataset` over the ArrayRecord shards; shuffled per epoch with Grain's
            index shuffle seeded by (seed, epoch) when the input shuffles; repeated forever.
  batches   consecutive `batch_size` rows; global batch g is host (g mod H)'s batch g div H, so
            hosts (infeed_host_index of num_infeed_hosts) read disjoint rows of one global stream.

Position N therefore maps to rows directly: a restore or a peek costs the same at any N.

Where: `$PAXML_SEQIO_CACHE_DIR`, else `$XDG_CACHE_HOME/paxml-monorepo/seqio` (`~/.cache` when
unset), in a directory named after a fingerprint of what makes the rows: the task's name, split,
source files (paths, sizes, modification times), preprocessors and vocabularies (their names and
arguments), the feature lengths and the converter's settings. A task whose source is not files
(a FunctionDataSource, ...) cannot be fingerprinted: its rows go to a directory of this process,
built once per process and removed at exit. A lock file beside each directory makes concurrent
processes (hosts, runs) build it once; its `summary.json` is written last.

Too large: more than `$PAXML_SEQIO_CACHE_MAX_BYTES` (default 4 GiB) of rows stops the build,
records that in the directory (so other processes do not retry) and SeqIOInput keeps the tf.data
pipeline with its saved-iterator restore. Where SeqIO knows the split's example count (TFDS
sources, a task's offline cache) a split that cannot fit is told at its first row; otherwise only
when the limit is reached while writing (at the build's rate, ~1,000 rows/s for the KJV task on
this machine, 4 GiB of 128-token LM rows would take ~25 minutes to find out: set the limit lower
or PAXML_SEQIO_CACHE=off for such a task). `PAXML_SEQIO_CACHE=off` turns the cache off.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from typing import Any, Callable, Iterable, Mapping

from absl import logging
import numpy as np

ENV_MODE = "PAXML_SEQIO_CACHE"
ENV_DIR = "PAXML_SEQIO_CACHE_DIR"
ENV_MAX_BYTES = "PAXML_SEQIO_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
ROWS_PER_SHARD = 1 << 16
_VERSION = 1
_SUMMARY = "summary.json"
_TOO_LARGE = "too_large.json"
_SEP = "/"  # Joins nested feature names (SequenceModelFeatures' src/tgt) into one key.

# Per-process caches (sources without a fingerprint): key -> (directory, task kept alive so its
# id is not reused).
_PROCESS_DIRS: dict[str, tuple[str, Any]] = {}


def enabled() -> bool:
  """Whether SeqIOInput may use the cache: not turned off, and Grain importable (a stack without
  it, e.g. an older install of the pinned packages, keeps tf.data with a warning)."""
  if os.environ.get(ENV_MODE, "auto").lower() in ("off", "0", "false", "no"):
    return False
  try:
    import grain.python  # pylint: disable=g-import-not-at-top,unused-import  # noqa: F401
  except ImportError as e:
    logging.log_first_n(
      logging.WARNING,
      "SeqIO row cache off: Grain is not installed (%s); install the pinned `grain` "
      "(third_party/py/requirements_lock.txt) for O(1) input positions.",
      1,
      e,
    )
    return False
  return True


def _max_bytes() -> int:
  return int(os.environ.get(ENV_MAX_BYTES, DEFAULT_MAX_BYTES))


def cache_root() -> str:
  root = os.environ.get(ENV_DIR)
  if root:
    return root
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "paxml-monorepo", "seqio")


# -- the fingerprint ---------------------------------------------------------------------------


def _describe(obj: Any) -> str:
  """A repr without object addresses (which differ between processes)."""
  func = getattr(obj, "func", None)
  if func is not None and hasattr(obj, "keywords"):  # functools.partial
    return f"partial({_describe(func)}, {obj.args!r}, {sorted(obj.keywords.items())!r})"
  name = getattr(obj, "__qualname__", None)
  if name is not None:
    return f"{getattr(obj, '__module__', '')}.{name}"
  return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj))


def _file_stat(path: str) -> list[Any]:
  try:
    st = os.stat(path)
    return [path, st.st_size, st.st_mtime_ns]
  except OSError:
    return [path, None, None]


def fingerprint(task: Any, split: str, settings: Mapping[str, Any]) -> str | None:
  """A key of the rows `task`'s `split` gives under `settings`; None when the task's source is
  not files (nothing to tell a changed source by)."""
  import seqio  # pylint: disable=g-import-not-at-top

  source = task.source
  if not isinstance(source, seqio.FileDataSource):
    return None
  vocabs = []
  for name, feature in sorted(task.output_features.items()):
    vocab = feature.vocabulary
    model_file = getattr(vocab, "sentencepiece_model_file", None)
    vocabs.append([name, _describe(vocab), _file_stat(model_file) if model_file else None])
  key = {
    "version": _VERSION,
    "task": task.name,
    "split": split,
    "files": [_file_stat(f) for f in sorted(source.list_shards(split))],
    "preprocessors": [_describe(p) for p in task.preprocessors],
    "vocabularies": vocabs,
    "settings": {k: _describe(v) for k, v in sorted(settings.items())},
  }
  return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


# -- building ------------------------------------------------------------------------------------


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
  out = {}
  for k, v in tree.items():
    if isinstance(v, Mapping):
      out.update(_flatten(v, f"{prefix}{k}{_SEP}"))
    else:
      out[f"{prefix}{k}"] = np.asarray(v)
  return out


class _TooLarge(Exception):
  pass


class _Ragged(Exception):
  pass


def _write(
  rows: Iterable[Mapping[str, Any]],
  directory: str,
  max_bytes: int,
  expected_rows: int | None = None,
) -> dict[str, Any]:
  """Writes the rows into ArrayRecord shards under `directory`; returns the summary.

  `expected_rows` (the split's example count, when SeqIO knows it: an upper bound of the rows,
  which packing makes fewer) stops a split that cannot fit at its first row instead of after
  `max_bytes` of writing.
  """
  from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top

  start = time.perf_counter()
  spec, shards, writer, num_rows, num_bytes = None, [], None, 0, 0
  try:
    for row in rows:
      flat = _flatten(row)
      if spec is None:
        spec = [[k, flat[k].dtype.str, list(flat[k].shape)] for k in sorted(flat)]
      elif [[k, flat[k].dtype.str, list(flat[k].shape)] for k in sorted(flat)] != spec:
        raise _Ragged(f"row {num_rows} has other fields or shapes than row 0 ({spec})")
      record = b"".join(flat[k].tobytes() for k, _, _ in spec)
      num_bytes += len(record)
      if num_rows == 0 and expected_rows and expected_rows * len(record) > max_bytes:
        raise _TooLarge(
          f"{expected_rows:,} examples of {len(record):,} bytes would exceed {max_bytes:,} bytes"
        )
      if num_bytes > max_bytes:
        raise _TooLarge(f"over {max_bytes:,} bytes after {num_rows:,} rows")
      if num_rows % ROWS_PER_SHARD == 0:
        if writer is not None:
          writer.close()
        shards.append(f"rows-{len(shards):05d}.array_record")
        # group_size:1 makes every record its own chunk: a random read decodes one row.
        writer = array_record_module.ArrayRecordWriter(
          os.path.join(directory, shards[-1]), "group_size:1"
        )
      writer.write(record)
      num_rows += 1
  finally:
    if writer is not None:
      writer.close()
  if not num_rows:
    raise _Ragged("the split has no rows")
  return {
    "spec": spec,
    "shards": shards,
    "num_rows": num_rows,
    "num_bytes": num_bytes,
    "build_seconds": round(time.perf_counter() - start, 3),
  }


def ensure(
  key: str | None,
  name: str,
  make_rows: Callable[[], Iterable[Mapping[str, Any]]],
  owner: Any,
  expected_rows: int | None = None,
) -> dict[str, Any] | None:
  """The cache's summary (with its "directory"), built from `make_rows()` if missing; None when
  the rows cannot be cached (too large, ragged or empty): the caller keeps tf.data."""
  if key is None:  # No fingerprint: one directory per process.
    return _ensure_dir(_process_dir(name, owner), name, make_rows, expected_rows)
  root = cache_root()
  directory = os.path.join(root, f"{_safe(name)}-{key}")
  try:
    os.makedirs(root, exist_ok=True)
    lock = open(directory + ".lock", "w")  # noqa: SIM115 (held for the build below)
  except OSError as e:  # A read-only home (a sandbox): cache for this process only.
    logging.warning(
      "SeqIO row cache: %s is not writable (%s); caching %s in a temporary directory for this "
      "process. Set $%s to a writable directory to keep it.",
      root,
      e,
      name,
      ENV_DIR,
    )
    return _ensure_dir(_process_dir(name, owner), name, make_rows, expected_rows)
  with lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # Other processes wait here while one builds.
    return _ensure_dir(directory, name, make_rows, expected_rows)


def _process_dir(name: str, owner: Any) -> str:
  """A temporary cache directory for this process (removed at exit), one per input."""
  process_key = f"{name}-{id(owner)}"
  if process_key not in _PROCESS_DIRS:
    directory = tempfile.mkdtemp(prefix=f"paxml-seqio-{_safe(name)}-")
    atexit.register(shutil.rmtree, directory, True)
    _PROCESS_DIRS[process_key] = (directory, owner)
  return _PROCESS_DIRS[process_key][0]


def _safe(name: str) -> str:
  return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _ensure_dir(directory, name, make_rows, expected_rows) -> dict[str, Any] | None:
  summary_path = os.path.join(directory, _SUMMARY)
  if os.path.exists(os.path.join(directory, _TOO_LARGE)):
    return None
  if not os.path.exists(summary_path):
    os.makedirs(directory, exist_ok=True)
    for stale in os.listdir(directory):  # An interrupted build's shards.
      os.remove(os.path.join(directory, stale))
    try:
      summary = _write(make_rows(), directory, _max_bytes(), expected_rows)
    except (_TooLarge, _Ragged) as e:
      for partial in os.listdir(directory):
        os.remove(os.path.join(directory, partial))
      with open(os.path.join(directory, _TOO_LARGE), "w") as f:
        json.dump({"reason": str(e)}, f)
      logging.warning(
        "SeqIO row cache %s: not cached (%s); the input reads through tf.data, whose restore "
        "replays batches when its saved iterator is missing. Remove %s to retry.",
        name,
        e,
        directory,
      )
      return None
    with open(summary_path + ".tmp", "w") as f:
      json.dump(summary, f)
    os.replace(summary_path + ".tmp", summary_path)  # Last: its presence means complete.
    logging.info(
      "SeqIO row cache %s: %d rows, %.1f MB in %.1f s into %s",
      name,
      summary["num_rows"],
      summary["num_bytes"] / 1e6,
      summary["build_seconds"],
      directory,
    )
  with open(summary_path) as f:
    return {**json.load(f), "directory": directory}


# -- reading -------------------------------------------------------------------------------------


class RowReader:
  """Batch i of one host, computed from i (module docstring)."""

  def __init__(
    self,
    summary: Mapping[str, Any],
    *,
    batch_size: int,
    host_index: int,
    num_hosts: int,
    shuffle: bool,
    seed: int,
  ):
    import grain.python as grain  # pylint: disable=g-import-not-at-top

    self.summary = summary
    self.num_rows = int(summary["num_rows"])
    self._spec = [(k, np.dtype(d), tuple(s)) for k, d, s in summary["spec"]]
    paths = [os.path.join(summary["directory"], s) for s in summary["shards"]]
    rows = grain.MapDataset.source(grain.ArrayRecordDataSource(paths))
    if shuffle:
      # Grain's index shuffle: a permutation per epoch (seeded by seed and epoch) computed for
      # one index at a time, so row j costs the same at any j.
      # Grain takes a 32-bit seed; Pax's input seeds may be 64-bit (the trainer derives them).
      rows = rows.shuffle(seed=int(seed) % (1 << 32))
    rows = rows.repeat().map(self._decode)  # Unbounded: epochs run end to end.
    self._batches = rows.batch(batch_size, drop_remainder=True)[host_index::num_hosts]

  def _decode(self, record: bytes) -> dict[str, np.ndarray]:
    out, offset = {}, 0
    for key, dtype, shape in self._spec:
      size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
      out[key] = np.frombuffer(record, dtype, count=size // dtype.itemsize, offset=offset).reshape(
        shape
      )
      offset += size
    return out

  def batch(self, index: int) -> dict[str, Any]:
    """This host's batch `index` as a nested dict of numpy arrays [batch_size, ...]."""
    flat = self._batches[index]
    nested: dict[str, Any] = {}
    for key, value in flat.items():
      *parents, leaf = key.split(_SEP)
      node = nested
      for p in parents:
        node = node.setdefault(p, {})
      node[leaf] = np.array(value)  # Writable, owned (not a view of a record's bytes).
    return nested
