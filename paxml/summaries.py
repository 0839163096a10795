"""TensorBoard summaries via tf.summary: the writers every front door uses.

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
`close`.
"""

from collections.abc import Callable, Iterable, Mapping
import concurrent.futures
import os
import threading
from typing import Any

import jax
import numpy as np
import tensorflow as tf

from paxml import leader

# TensorFlow is here only to write event files. Hide any GPU from it, or a GPU
# build of TF reserves most of the GPU memory that JAX needs.
tf.config.set_visible_devices([], "GPU")


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


class EventFileWriter:
  """Writes summaries to event files in `log_dir`; a no-op when not `enabled`."""

  def __init__(self, log_dir: str, *, enabled: bool = True):
    self.directory = log_dir
    if enabled:
      self._writer = tf.summary.create_file_writer(log_dir)
    else:
      self._writer = tf.summary.create_noop_writer()

  def scalars(self, step: int, values: Mapping[str, float]) -> None:
    """Records each `tag: value` at `step`."""
    with self._writer.as_default(step=int(step)):
      for tag, value in values.items():
        tf.summary.scalar(tag, np.asarray(value))

  def scalar(self, tag: str, value: Any, step: int) -> None:
    self.scalars(step, {tag: value})

  def image(self, tag: str, image: Any, step: int, max_outputs: int = 3) -> None:
    """Records image(s): [H, W], [H, W, C] or [B, H, W, C], floats in [0, 1]."""
    with self._writer.as_default(step=int(step)):
      tf.summary.image(tag, _as_nhwc(image), max_outputs=max_outputs)

  def text(self, tag: str, textdata: str, step: int) -> None:
    with self._writer.as_default(step=int(step)):
      tf.summary.text(tag, str(textdata))

  def histogram(self, tag: str, values: Any, step: int, bins: int | None = None) -> None:
    with self._writer.as_default(step=int(step)):
      tf.summary.histogram(tag, np.asarray(values), buckets=bins)

  def flush(self) -> None:
    """Makes everything written so far visible to readers."""
    self._writer.flush()

  def close(self) -> None:
    """Flushes and closes the event file."""
    self._writer.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()


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
    log_dir = self._dirname(self.root, key)
    if self._threaded:
      return ThreadedSummaryWriter.open(log_dir)
    return EventFileWriter(log_dir)

  def writer_for(self, key: str) -> Any:
    """Returns the writer of `<root>/<key>` (a null writer off the leader)."""
    if key not in self._writers:
      if self._frozen:
        raise KeyError(
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

  def as_result_processor(
    self, method: str | Callable[..., Any] | None = None
  ) -> Callable[[Mapping[str, Any], Any], None]:
    """Returns `fn(results_by_dataset, train_state)` writing each to `<root>/<name>`.

    By default each result's `write_to_tensorboard(train_state, writer)` is
    called (bobbin's `EvalResults`); `method` may name another method or be
    a function `(results, train_state, writer)`.
    """

    def process(results_by_dataset: Mapping[str, Any], train_state: Any) -> None:
      for name, results in results_by_dataset.items():
        writer = self.writer_for(name)
        if callable(method):
          method(results, train_state, writer)
        else:
          getattr(results, method or "write_to_tensorboard")(train_state, writer)

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
