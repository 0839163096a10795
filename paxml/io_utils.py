"""Pax's output and progress files of eval/decode jobs (`paxml.io_utils`).

write_key_value_pairs   decode/eval outputs as `<name>.pickle` (all pairs) and `<name>.jsonl`
                        (one JSON value per line; arrays, tensors, bytes and dataclasses
                        converted by `JnpEncoder`)
load_outputs            reads `<prefix>_out_<step>_shard_<i>.pickle` files back, all shards
ShardedParallelWriter   round-robin TFRecord shards written by a thread pool
checkpoint_progress /   an eval or decode job notes which checkpoint step it is working on, so
get_checkpoint_step     after a preemption it finishes that step before moving to the newest
"""

import collections
import concurrent.futures
import contextlib
import dataclasses
import enum
import json
import os
import pickle
import re
import threading
from typing import Any, Iterable, Iterator, Sequence

from absl import flags
from absl import logging
from etils import epath
import jax
import numpy as np

from paxml import checkpoint_paths
from paxml import checkpoint_types

_PROGRESS_CKPT_STEP_KEY = "restore_checkpoint_step"
_INTERNAL_ARTIFACTS_SUBDIR = "_internal_artifacts"
_SHARD_FILE = re.compile(r"(eval|decoder)_out_(\d*)_shard_(\d*)\.pickle")


def _tf():
  from hostenv import quiet_tensorflow  # pylint: disable=g-import-not-at-top

  return quiet_tensorflow.import_tensorflow()


class EvaluationMode(str, enum.Enum):
  """Which job keeps a progress file: eval or decode."""

  EVAL = "eval"
  DECODE = "decoder"

  @property
  def progress_filename(self) -> str:
    """`_<mode>_progress.json` (with the XManager id when an `--xm_xid` flag is set)."""
    xid = flags.FLAGS["xm_xid"].value if "xm_xid" in flags.FLAGS else 0
    if xid and xid > 0:
      return f"_{self.value}_{xid}_progress.json"
    return f"_{self.value}_progress.json"


class OutputFormatType(enum.Enum):
  """Container formats of `ShardedParallelWriter` (the name, lower-cased, is the file suffix)."""

  TFRECORD = enum.auto()


class ShardedParallelWriter:
  """Writes chunks of serialized records to `num_shards` files, one chunk per shard in turn.

  Files are `<fq_filename>.tfrecord-%05d-of-%05d`. Writes run on a thread pool (`write` returns
  at once); an error of an earlier write is raised by the next `write`. Use one writer per
  output (on one process): shards are not shared, and a closed writer cannot be reopened.
  """

  def __init__(
    self,
    fq_filename: epath.PathLike,
    num_shards: int,
    output_format: OutputFormatType = OutputFormatType.TFRECORD,
  ):
    if output_format != OutputFormatType.TFRECORD:
      raise NotImplementedError(f"{output_format} is not supported; use OutputFormatType.TFRECORD")
    suffix = output_format.name.lower()
    self._num_shards = num_shards
    self._filenames = [
      f"{fq_filename}.{suffix}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)
    ]
    tf = _tf()
    self._writers = [tf.io.TFRecordWriter(name) for name in self._filenames]
    self._locks = [threading.Lock() for _ in range(num_shards)]
    self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=num_shards)
    self._futures: list[concurrent.futures.Future] = []
    self._next_shard = 0

  def _write_to_shard(self, shard: int, chunk: Sequence[bytes]) -> None:
    with self._locks[shard]:
      for record in chunk:
        self._writers[shard].write(record)

  def _raise_earlier_errors(self) -> None:
    running = []
    for future in self._futures:
      if future.done():
        future.result()  # Raises the write's error, if any.
      else:
        running.append(future)
    if len(running) >= self._num_shards:
      logging.warning(
        "ShardedParallelWriter: %d writes pending; the writers fall behind (more shards help)",
        len(running),
      )
    self._futures = running

  def write(self, chunk: Sequence[bytes]) -> None:
    """Queues `chunk` (a list of serialized records) for the next shard."""
    self._raise_earlier_errors()
    self._futures.append(self._pool.submit(self._write_to_shard, self._next_shard, chunk))
    self._next_shard = (self._next_shard + 1) % self._num_shards

  def close(self) -> None:
    """Waits for every queued write, then closes the files."""
    self._pool.shutdown(wait=True)
    for future in self._futures:
      future.result()
    for writer in self._writers:
      writer.close()


def _to_ndarray(x: Any) -> Any:
  """A device array (or anything with an ndarray `_value`) as a plain ndarray, so the pickle
  loads without JAX."""
  value = getattr(x, "_value", None)
  return value if isinstance(value, np.ndarray) else x


class JnpEncoder(json.JSONEncoder):
  """JSON for arrays (as lists), NumPy scalars, TF tensors, bytes (UTF-8) and dataclasses."""

  def default(self, o: Any) -> Any:
    if isinstance(o, jax.Array):
      return np.asarray(o).tolist()
    if isinstance(o, np.bool_):
      return bool(o)
    if isinstance(o, np.integer):
      return int(o)
    if isinstance(o, np.floating):
      return float(o)
    if isinstance(o, np.ndarray):
      return o.tolist()
    if isinstance(o, bytes):
      return o.decode("utf-8")
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
      return dataclasses.asdict(o)
    if type(o).__module__.startswith("tensorflow") and hasattr(o, "numpy"):
      return o.numpy().tolist()
    return super().default(o)


def write_key_value_pairs(
  filename: epath.PathLike,
  key_value_pairs: Sequence[tuple[str | None, Any]],
  cast_to_ndarray: bool = True,
  write_pickle: bool = True,
) -> None:
  """Writes the pairs to `<filename>.pickle` (unless not `write_pickle`) and their values to
  `<filename>.jsonl`, one per line (the suffix of `filename` is replaced)."""
  filename = epath.Path(filename)
  if cast_to_ndarray:
    key_value_pairs = jax.tree.map(_to_ndarray, key_value_pairs)
  if write_pickle:
    with filename.with_suffix(".pickle").open("wb") as f:
      pickle.dump(key_value_pairs, f, protocol=pickle.HIGHEST_PROTOCOL)
  with filename.with_suffix(".jsonl").open("w") as f:
    for _, value in key_value_pairs:
      f.write(json.dumps(value, cls=JnpEncoder) + "\n")


def _validate_filenames(
  filenames: Iterable[epath.PathLike], step: int | None = None
) -> tuple[int, int]:
  """(step, number of shards) of output shard files `<eval|decoder>_out_<step>_shard_<i>.pickle`.

  Raises:
    ValueError: no files; a name of another form; several steps and no `step`; `step` absent;
      or a shard of the step missing (shards must be 0..n-1).
  """
  names = [os.path.basename(os.fspath(f)) for f in filenames]
  if not names:
    raise ValueError("Expecting at least one output shard file; found none.")
  shards_by_step: dict[int, set[int]] = collections.defaultdict(set)
  for name in names:
    match = _SHARD_FILE.fullmatch(name)
    if match is None:
      raise ValueError(
        f"output file {name} is not named <eval|decoder>_out_<step>_shard_<index>.pickle"
      )
    shards_by_step[int(match.group(2))].add(int(match.group(3)))
  steps = ", ".join(str(s) for s in sorted(shards_by_step))
  if step is None:
    if len(shards_by_step) > 1:
      raise ValueError(f"outputs of several steps ({steps}) are there; pass step= to pick one")
    (step,) = shards_by_step
  if step not in shards_by_step:
    raise ValueError(f"no outputs of step={step}; the steps there are {steps}")
  num_shards = len(shards_by_step[step])
  missing = set(range(num_shards)) - shards_by_step[step]
  if missing:
    raise ValueError(f"step={step} is missing output shards {sorted(missing)}")
  return step, num_shards


def load_outputs(
  basedir: epath.PathLike, pname: str, fname_prefix: str, step: int | None = None
) -> list[Any]:
  """The outputs an eval (`fname_prefix='eval'`) or decode ('decoder') job wrote for dataset
  `pname` under `basedir` (a job_log_dir, or its `1/` subdirectory as Pax's jobs lay it out),
  all shards of `step` (may be left out when only one step is there) in shard order."""
  basedir = epath.Path(basedir)
  root = basedir if basedir.name == "1" else basedir / "1"
  directory = root / f"{fname_prefix}_out" / pname
  try:
    step, num_shards = _validate_filenames(directory.glob(f"{fname_prefix}_out_*.pickle"), step)
  except ValueError as e:
    raise ValueError(f'Failed to read outputs under "{basedir}": {e}') from e
  outputs: list[Any] = []
  for shard in range(num_shards):
    with (directory / f"{fname_prefix}_out_{step}_shard_{shard}.pickle").open("rb") as f:
      outputs.extend(pickle.load(f))
  return outputs


@contextlib.contextmanager
def checkpoint_progress(
  job_log_dir: epath.PathLike, checkpoint_step: int, mode: EvaluationMode
) -> Iterator[None]:
  """While the block runs, `<job_log_dir>/_internal_artifacts/<progress file>` names the step
  being evaluated (process 0 only). A file left by a preempted run is kept (its step is resumed);
  the file is removed when the block ends."""
  if jax.process_index() != 0:
    yield
    return
  path = epath.Path(job_log_dir) / _INTERNAL_ARTIFACTS_SUBDIR / mode.progress_filename
  path.parent.mkdir(parents=True, exist_ok=True)
  if not path.exists():
    path.write_text(json.dumps({_PROGRESS_CKPT_STEP_KEY: checkpoint_step}))
  try:
    yield
  finally:
    path.unlink(missing_ok=True)


def get_checkpoint_step(
  job_log_dir: epath.PathLike,
  restore_checkpoint_dir: epath.PathLike,
  mode: EvaluationMode,
  checkpoint_type: checkpoint_types.CheckpointType | None = None,
) -> int:
  """The step to evaluate: the one a progress file names if its checkpoint still exists (a
  preempted job finishes it), else the newest checkpoint in `restore_checkpoint_dir`."""
  checkpoint_type = checkpoint_type or checkpoint_types.CheckpointType.UNSPECIFIED
  path = epath.Path(job_log_dir) / _INTERNAL_ARTIFACTS_SUBDIR / mode.progress_filename
  if path.exists():
    step = json.loads(path.read_text())[_PROGRESS_CKPT_STEP_KEY]
    step_dir = checkpoint_paths.make_checkpoint_step_dir(
      epath.Path(restore_checkpoint_dir), step, checkpoint_type
    )
    if step_dir.exists():
      logging.info("Resuming %s of step %d.", mode.value, step)
      return step
    logging.info("%s progress names step %d, which is gone; using the newest.", mode.value, step)
  return checkpoint_paths.retrieve_latest_checkpoint_step(epath.Path(restore_checkpoint_dir))
