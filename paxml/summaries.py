"""TensorBoard summaries: the writers every front door uses.

  SummaryWriter(job_log_dir, name): Pax's `<job_log_dir>/summaries/<name>/`
    (train scalars in `summaries/train`, eval ones in `summaries/eval_train`,
    `summaries/eval_test_<name>`; `tensorboard --logdir=<job_log_dir>/summaries`
    shows them side by side).
  EventFileWriter(log_dir): the same writer for any directory.
  NullSummaryWriter: accepts every call and writes nothing (non-leader
    processes keep the same code path).
  ThreadedSummaryWriter(base): copies device arrays to host memory before
    returning, then writes in a background thread, so the train loop never
    waits on disk and no device buffer is held by a pending write.
  MultiDirectorySummaryWriter(root): routes tag `dev/accuracy` to the writer
    of `<root>/dev` as tag `accuracy`; only the leader process writes.

Every writer has the same methods: `scalars(step, values)` (Pax), bobbin's
(flax's) `scalar(tag, value, step)`, `image(tag, image, step)`,
`text(tag, text, step)`, `histogram(tag, values, step)`, plus `flush` and
`close`. The null, threaded and multi-directory writers also pass on flax's
`audio`, `write` and `hparams` to writers that have them (paxml.toolkit's
flax-API SummaryWriter): these three classes are the only implementation of
each, and the bobbin face (paxml/toolkit/tensorboard.py) only gives them
bobbin's constructor arguments.

The event files are the ones tf.summary writes (TF2 tensor summaries, same
tags, plugin metadata and file names), built with TensorBoard's pure-Python
protos and record framing: a process that feeds no data through tf.data never
imports TensorFlow (seconds of start-up per process). Images are PNG-encoded
with Pillow.
"""

from collections.abc import Callable, Iterable, Mapping
import concurrent.futures
import io
import itertools
import os
import socket
import threading
import time
from typing import Any

from etils import epath
import jax
import numpy as np
from PIL import Image
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.histogram import summary_v2 as histogram_summary
from tensorboard.plugins.image import metadata as image_metadata
from tensorboard.plugins.scalar import summary_v2 as scalar_summary
from tensorboard.plugins.text import summary_v2 as text_summary
from tensorboard.summary.writer import record_writer
from tensorboard.util import tensor_util

from paxml import leader

# Several writers of one process may open files in the same second (and directory).
_file_numbers = itertools.count()


def summary_dir(job_log_dir: str, name: str) -> str:
  """Returns the event-file directory for summaries called `name` (e.g. 'train')."""
  return os.path.join(job_log_dir, "summaries", name)


def _as_nhwc(image: Any) -> np.ndarray:
  """Returns `image` as [B, H, W, C] from [H, W], [H, W, C] or [B, H, W, C]."""
  image = np.asarray(image)
  if image.ndim == 2:
    image = image[None, :, :, None]
  elif image.ndim == 3:
    image = image[None]
  if image.ndim != 4 or image.shape[-1] not in (1, 3, 4):
    raise ValueError(
      f"An image must be [H, W], [H, W, C] or [B, H, W, C] with C in (1, 3, 4); "
      f"got shape {image.shape}."
    )
  return image


def _as_uint8(images: np.ndarray) -> np.ndarray:
  """tf.image.convert_image_dtype(saturate=True)'s rule: floats in [0, 1] times 255.5, clipped."""
  if images.dtype == np.uint8:
    return images
  if images.dtype.kind != "f":
    raise ValueError(
      f"Image values must be floats in [0, 1] or uint8; got dtype {images.dtype}. Convert "
      "them first (e.g. divide integers by their maximum)."
    )
  return np.clip(images.astype(np.float64) * 255.5, 0, 255).astype(np.uint8)


def _image_summary(tag: str, images: np.ndarray, max_outputs: int) -> summary_pb2.Summary:
  """tf.summary.image's summary: a string tensor [width, height, png, ...]."""
  images = _as_uint8(images[:max_outputs])
  encoded = []
  for image in images:
    buffer = io.BytesIO()
    Image.fromarray(image[:, :, 0] if image.shape[-1] == 1 else image).save(buffer, format="PNG")
    encoded.append(buffer.getvalue())
  height, width = images.shape[1:3]
  tensor = np.array([str(width).encode(), str(height).encode()] + encoded, dtype=object)
  summary = summary_pb2.Summary()
  summary.value.add(
    tag=tag,
    metadata=image_metadata.create_summary_metadata(display_name=None, description=None),
    tensor=tensor_util.make_tensor_proto(tensor),
  )
  return summary


class EventFileWriter:
  """Writes summaries to an event file in `log_dir`; a no-op when not `enabled`.

  Each call reaches the operating system before it returns (a reader sees it); `flush` and
  `close` also fsync a local file, as TensorFlow's writer does.
  """

  def __init__(self, log_dir: str, *, enabled: bool = True):
    self.directory = log_dir
    self._lock = threading.Lock()
    self._file = None
    self._closed = False
    if not enabled:
      return
    # epath: a local directory through `os`; gs:// and other remote paths as etils reaches them
    # (through TensorFlow's gfile when it is installed, as tf.summary's writer did).
    directory = epath.Path(log_dir)
    directory.mkdir(parents=True, exist_ok=True)
    # TensorBoard finds the files by "tfevents" in the name; this is tf.summary's pattern.
    name = "events.out.tfevents.%010d.%s.%d.%d.v2" % (
      time.time(),
      socket.gethostname(),
      os.getpid(),
      next(_file_numbers),
    )
    self._file = (directory / name).open("wb")
    self._records = record_writer.RecordWriter(self._file)
    self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

  def _write(self, event: event_pb2.Event) -> None:
    with self._lock:
      self._records.write(event.SerializeToString())
      self._records.flush()

  def _write_summary(self, step: int, summary: summary_pb2.Summary) -> None:
    if self._file is not None:
      self._write(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

  def scalars(self, step: int, values: Mapping[str, float]) -> None:
    """Records each `tag: value` at `step`."""
    for tag, value in values.items():  # One event per tag, as tf.summary.scalar writes.
      self._write_summary(step, scalar_summary.scalar_pb(tag, np.asarray(value)))

  def scalar(self, tag: str, value: Any, step: int) -> None:
    self.scalars(step, {tag: value})

  def image(self, tag: str, image: Any, step: int, max_outputs: int = 3) -> None:
    """Records image(s): [H, W], [H, W, C] or [B, H, W, C], floats in [0, 1] (or uint8)."""
    images = _as_nhwc(image)
    if self._file is not None:
      self._write_summary(step, _image_summary(tag, images, max_outputs))

  def text(self, tag: str, textdata: str, step: int) -> None:
    if self._file is not None:
      self._write_summary(step, text_summary.text_pb(tag, str(textdata)))

  def histogram(self, tag: str, values: Any, step: int, bins: int | None = None) -> None:
    if self._file is not None:
      summary = histogram_summary.histogram_pb(tag, np.asarray(values), buckets=bins)
      self._write_summary(step, summary)

  def flush(self) -> None:
    """Makes everything written so far visible to readers, and durable."""
    if self._file is None:
      return
    with self._lock:
      if not self._closed:
        self._file.flush()
        if hasattr(self._file, "fileno"):  # A local file; remote ones are durable once flushed.
          os.fsync(self._file.fileno())

  def close(self) -> None:
    """Flushes and closes the event file (a second close does nothing)."""
    self.flush()
    if self._file is not None:
      with self._lock:
        if not self._closed:
          self._file.close()
          self._closed = True

  def __enter__(self):
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def __del__(self):
    # A writer dropped without close() (bobbin's examples never close theirs) closes its file, as
    # tf.summary's writer does, instead of leaving it to the file's finalizer (ResourceWarning).
    try:
      if self._file is not None and not self._closed:
        with self._lock:
          self._file.close()
          self._closed = True
    except Exception:  # pylint: disable=broad-except  # Interpreter shutdown: nothing to do.
      pass


class SummaryWriter(EventFileWriter):
  """Writes to `<job_log_dir>/summaries/<name>`; a no-op when `enabled` is False.

  Only one process of a multi-host job should write (Pax: process 0); the
  others pass `enabled=False` and keep the same code path.
  """

  def __init__(self, job_log_dir: str, name: str, *, enabled: bool = True):
    super().__init__(summary_dir(job_log_dir, name), enabled=enabled)


class NullSummaryWriter:
  """Accepts every writer call and does nothing."""

  def scalars(self, step, values) -> None:
    del step, values

  def scalar(self, tag, value, step) -> None:
    del tag, value, step

  def image(self, tag, image, step, max_outputs=3) -> None:
    del tag, image, step, max_outputs

  def text(self, tag, textdata, step) -> None:
    del tag, textdata, step

  def histogram(self, tag, values, step, bins=None) -> None:
    del tag, values, step, bins

  def audio(self, tag, audiodata, step, sample_rate=44100, max_outputs=3) -> None:
    del tag, audiodata, step, sample_rate, max_outputs

  def write(self, tag, tensor, step, metadata=None) -> None:
    del tag, tensor, step, metadata

  def hparams(self, hparams) -> None:
    del hparams

  def as_result_processor(self, *args, **kwargs) -> Callable[..., None]:
    """A result processor (MultiDirectorySummaryWriter's) that writes nothing."""
    del args, kwargs
    return lambda *args, **kwargs: None

  def flush(self) -> None:
    pass

  def close(self) -> None:
    pass

  def __enter__(self):
    return self

  def __exit__(self, *exc_info) -> None:
    pass


class ThreadedSummaryWriter:
  """Forwards writes to `base` from a background thread, in call order.

  Each call first copies its arguments to host memory (`jax.device_get`), so
  the device buffers are free (or may be donated) once the call returns;
  only the file I/O happens later. An exception raised by a background write
  is re-raised by the next call (or by `flush`/`close`).
  """

  def __init__(self, base: Any, *, max_workers: int = 1, wait_on_flush: bool = True):
    self.base = base
    self._wait_on_flush = wait_on_flush
    # One worker keeps the writes in order; more only for order-free writers.
    self._pool = concurrent.futures.ThreadPoolExecutor(
      max_workers=max_workers, thread_name_prefix="summary_writer"
    )
    self._pending: list[concurrent.futures.Future] = []
    self._lock = threading.Lock()

  @classmethod
  def open(cls, log_dir: str, **kwargs) -> "ThreadedSummaryWriter":
    """Returns a threaded writer over an `EventFileWriter(log_dir)`."""
    return cls(EventFileWriter(log_dir), **kwargs)

  def _raise_finished_errors(self) -> None:
    with self._lock:
      done = [f for f in self._pending if f.done()]
      self._pending = [f for f in self._pending if not f.done()]
    for f in done:
      f.result()  # Re-raises a failed write here, in the caller's thread.

  def _submit(self, method: str, *args: Any) -> None:
    self._raise_finished_errors()
    host_args = jax.device_get(args)
    future = self._pool.submit(getattr(self.base, method), *host_args)
    with self._lock:
      self._pending.append(future)

  def scalars(self, step, values) -> None:
    self._submit("scalars", step, dict(values))

  def scalar(self, tag, value, step) -> None:
    self._submit("scalar", tag, value, step)

  def image(self, tag, image, step, max_outputs=3) -> None:
    self._submit("image", tag, image, step, max_outputs)

  def text(self, tag, textdata, step) -> None:
    self._submit("text", tag, textdata, step)

  def histogram(self, tag, values, step, bins=None) -> None:
    self._submit("histogram", tag, values, step, bins)

  def audio(self, tag, audiodata, step, sample_rate=44100, max_outputs=3) -> None:
    self._submit("audio", tag, audiodata, step, sample_rate, max_outputs)

  def write(self, tag, tensor, step, metadata=None) -> None:
    self._submit("write", tag, tensor, step, metadata)

  def hparams(self, hparams) -> None:
    self._submit("hparams", hparams)

  def wait(self) -> None:
    """Blocks until every submitted write is done; re-raises a failed one."""
    with self._lock:
      pending, self._pending = self._pending, []
    for f in pending:
      f.result()

  def flush(self, wait: bool | None = None) -> None:
    """Flushes the base writer after the writes submitted so far."""
    self._submit("flush")
    if self._wait_on_flush if wait is None else wait:
      self.wait()

  def close(self) -> None:
    """Finishes every write, closes the base writer, stops the thread."""
    try:
      self.wait()
      self.base.close()
    finally:
      self._pool.shutdown(wait=True)

  def __enter__(self):
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()


class UnknownSummaryKeyError(KeyError, ValueError):
  """A sub-directory a MultiDirectorySummaryWriter built with fixed `keys` does not have.

  Both a KeyError (Pax's writer) and a ValueError (bobbin's raises that)."""

  def __str__(self) -> str:
    return str(self.args[0])  # KeyError would quote the message.


def _default_tag_to_key(tag: str) -> tuple[str, str]:
  key, sep, rest = tag.partition("/")
  if not sep or not key or not rest:
    raise ValueError(
      f"Tag {tag!r} names no sub-directory; MultiDirectorySummaryWriter expects "
      "'<key>/<tag>' such as 'dev/accuracy' (written to <root>/dev as 'accuracy')."
    )
  return key, rest


class MultiDirectorySummaryWriter:
  """One writer per sub-directory of `root`, chosen by the tag's first part.

  `scalar("dev/accuracy", 0.9, step)` writes tag `accuracy` to `<root>/dev`,
  so TensorBoard overlays `accuracy` of `dev`, `test`, `train` runs. With
  `keys`, only those sub-directories are allowed (a typo fails at once);
  otherwise they are created on first use. With `only_from_leader_process`
  (default), processes other than 0 write nothing and create no directory.
  """

  def __init__(
    self,
    root: str,
    keys: Iterable[str] = (),
    *,
    only_from_leader_process: bool = True,
    tag_to_key: Callable[[str], tuple[str, str]] = _default_tag_to_key,
    dirname: Callable[[str, str], str] = os.path.join,
    use_threaded_writer: bool = True,
  ):
    self.root = root
    self._tag_to_key = tag_to_key
    self._dirname = dirname
    self._threaded = use_threaded_writer
    self._enabled = leader.is_leader() or not only_from_leader_process
    self._frozen = bool(tuple(keys))
    self._writers: dict[str, Any] = {}
    for key in keys:
      self._writers[key] = self._make(key)

  def _make(self, key: str) -> Any:
    if not self._enabled:
      return NullSummaryWriter()
    return self._open(self._dirname(self.root, key))

  def _open(self, log_dir: Any) -> Any:
    """A sub-writer of `log_dir` (the bobbin face opens flax-API writers instead)."""
    if self._threaded:
      return ThreadedSummaryWriter.open(log_dir)
    return EventFileWriter(log_dir)

  def writer_for(self, key: str) -> Any:
    """Returns the writer of `<root>/<key>` (a null writer off the leader)."""
    if key not in self._writers:
      if self._frozen:
        raise UnknownSummaryKeyError(
          f"No summary sub-directory {key!r}; this writer was built with keys "
          f"{sorted(self._writers)}. Add it to keys=, or build without keys."
        )
      self._writers[key] = self._make(key)
    return self._writers[key]

  @property
  def keys(self) -> list[str]:
    return sorted(self._writers)

  def scalars(self, step, values) -> None:
    for tag, value in values.items():
      self.scalar(tag, value, step)

  def scalar(self, tag, value, step) -> None:
    key, rest = self._tag_to_key(tag)
    self.writer_for(key).scalar(rest, value, step)

  def image(self, tag, image, step, max_outputs=3) -> None:
    key, rest = self._tag_to_key(tag)
    self.writer_for(key).image(rest, image, step, max_outputs)

  def text(self, tag, textdata, step) -> None:
    key, rest = self._tag_to_key(tag)
    self.writer_for(key).text(rest, textdata, step)

  def histogram(self, tag, values, step, bins=None) -> None:
    key, rest = self._tag_to_key(tag)
    self.writer_for(key).histogram(rest, values, step, bins)

  def audio(self, tag, audiodata, step, sample_rate=44100, max_outputs=3) -> None:
    key, rest = self._tag_to_key(tag)
    self.writer_for(key).audio(rest, audiodata, step, sample_rate, max_outputs)

  def write(self, tag, tensor, step, metadata=None) -> None:
    key, rest = self._tag_to_key(tag)
    self.writer_for(key).write(rest, tensor, step, metadata)

  def hparams(self, hparams) -> None:
    """The same hyperparameters in every sub-directory opened so far."""
    for writer in self._writers.values():
      writer.hparams(hparams)

  def as_result_processor(
    self, method: str | Callable[..., Any] | None = None
  ) -> Callable[[Mapping[str, Any], Any], None]:
    """Returns `fn(results_by_dataset, train_state)` writing each to `<root>/<name>`.

    By default each result's `write_to_tensorboard(train_state, writer)` is
    called (bobbin's `EvalResults`); `method` may name another method or be
    a function `(results, train_state, writer)`. Each sub-writer is flushed
    after its dataset, so TensorBoard shows an evaluation as soon as it ends.
    """

    def process(results_by_dataset: Mapping[str, Any], train_state: Any) -> None:
      for name, results in results_by_dataset.items():
        writer = self.writer_for(name)
        if callable(method):
          method(results, train_state, writer)
        else:
          getattr(results, method or "write_to_tensorboard")(train_state, writer)
        writer.flush()

    return process

  def flush(self) -> None:
    for writer in self._writers.values():
      writer.flush()

  def close(self) -> None:
    for writer in self._writers.values():
      writer.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()
