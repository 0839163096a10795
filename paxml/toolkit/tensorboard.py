"""TensorBoard writers and the summaries models sow (bobbin's `tensorboard`).

Writers, all with flax's `flax.metrics.tensorboard.SummaryWriter` API
(scalar, image, audio, histogram, text, write, hparams, flush, close):
  summary_writer.SummaryWriter(log_dir): flax's writer without TensorFlow.
  NullSummaryWriter: writes nothing (processes other than the leader).
  ThreadedSummaryWriter(base): copies values to host memory at once (so
    device memory is freed), then writes in a worker thread.
  MultiDirectorySummaryWriter(root): routes tag "dev/accuracy" to the
    sub-writer `root/dev` as "accuracy"; `as_result_processor()` plugs it
    into `RunEval`.

A model records a summary by sowing a `PublishableSummary` into the
"tensorboard" collection, e.g.
  self.sow("tensorboard", "logits_mean", ScalarSummary(logits.mean()))
and `PublishTrainingProgress` writes it as `summary/<module path>/<name>/0`
(the index is that of the sown tuple, so two layers never share a tag).
"""

import abc
import concurrent.futures
import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any

from etils import epath
import flax.struct
import jax
import numpy as np

from paxml import leader
from paxml.toolkit import pmap_util
from paxml.toolkit import summary_writer
from paxml.toolkit import var_util

EvalResultProcessorFn = Callable[[dict[str, Any], Any], Any]
WriteEvalResultsFn = Callable[[Any, Any, Any], None]


class NullSummaryWriter:
  """A SummaryWriter that writes nothing."""

  def close(self):
    pass

  def flush(self):
    pass

  def scalar(self, *args, **kwargs):
    pass

  def image(self, *args, **kwargs):
    pass

  def audio(self, *args, **kwargs):
    pass

  def histogram(self, *args, **kwargs):
    pass

  def text(self, *args, **kwargs):
    pass

  def write(self, *args, **kwargs):
    pass

  def hparams(self, *args, **kwargs):
    pass

  def as_result_processor(self, *args, **kwargs) -> EvalResultProcessorFn:
    del args, kwargs
    return lambda *a, **k: None


def _to_host(tree: Any) -> Any:
  return jax.tree.map(np.asarray, tree)


class ThreadedSummaryWriter(summary_writer.SummaryWriter):
  """Writes through `base_writer` in worker threads.

  The device-to-host copy happens in the caller's thread, so device memory is
  released when the call returns; only the file write is deferred.
  """

  def __init__(self, base_writer: Any, max_workers: int = 1, wait_on_flush: bool = False):
    """Wraps `base_writer`.

    Args:
      base_writer: a SummaryWriter (or compatible object).
      max_workers: the number of writer threads.
      wait_on_flush: True makes `flush` wait for every pending write; False
        (default) queues the flush too.
    """
    # SummaryWriter's __init__ opens a file; this writer owns none.
    self._writer = base_writer
    self._max_workers = max_workers
    self._wait_on_flush = wait_on_flush
    self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers)

  @classmethod
  def open(cls, log_dir: Any, auto_flush: bool = True) -> "ThreadedSummaryWriter":
    """A ThreadedSummaryWriter over a new SummaryWriter at `log_dir`."""
    return cls(summary_writer.SummaryWriter(log_dir, auto_flush=auto_flush))

  def _drain_then(self, f: Callable[[], Any]) -> None:
    self._executor.shutdown(wait=True)
    f()
    self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=self._max_workers)

  def close(self):
    self._drain_then(self._writer.close)

  def flush(self):
    if self._wait_on_flush:
      self._drain_then(self._writer.flush)
    else:
      self._executor.submit(self._writer.flush)

  def scalar(self, tag, value, step):
    step, value = _to_host((step, value))
    self._executor.submit(self._writer.scalar, tag, value, step)

  def image(self, tag, image, step, max_outputs=3):
    step, image = _to_host((step, image))
    self._executor.submit(self._writer.image, tag, image, step, max_outputs)

  def audio(self, tag, audiodata, step, sample_rate=44100, max_outputs=3):
    step, audiodata = _to_host((step, audiodata))
    self._executor.submit(self._writer.audio, tag, audiodata, step, sample_rate, max_outputs)

  def histogram(self, tag, values, step, bins=None):
    step, values = _to_host((step, values))
    self._executor.submit(self._writer.histogram, tag, values, step, bins)

  def text(self, tag, textdata, step):
    self._executor.submit(self._writer.text, tag, textdata, np.asarray(step))

  def write(self, tag, tensor, step, metadata=None):
    step, tensor = _to_host((step, tensor))
    self._executor.submit(self._writer.write, tag, tensor, step, metadata)

  def hparams(self, hparams):
    self._executor.submit(self._writer.hparams, hparams)


def _default_key_from_tag(tag: str) -> tuple[str, str]:
  key, rest = tag.split("/", maxsplit=1)
  return key, rest


class MultiDirectorySummaryWriter(summary_writer.SummaryWriter):
  """A writer whose tag prefix picks the sub-directory (sub-writer)."""

  def __init__(
    self,
    log_dir_root: Any,
    *,
    keys: Iterable[str] = (),
    allow_new_keys: bool = True,
    only_from_leader_process: bool = True,
    auto_flush: bool = True,
    tag_to_key: Callable[[str], tuple[str, str]] = _default_key_from_tag,
    dirname: Callable[[str], str] = lambda key: key,
    use_threaded_writer: bool = True,
  ):
    """Creates the sub-writers for `keys`.

    Args:
      log_dir_root: the root directory (anything `epath.Path` takes).
      keys: the sub-writers; when given, no other key may be used later.
      allow_new_keys: kept for bobbin's signature; keys given up front are
        the only ones allowed, an empty `keys` allows any.
      only_from_leader_process: other processes get NullSummaryWriters.
      auto_flush: passed to each SummaryWriter.
      tag_to_key: splits a tag into (key, tag inside the sub-writer).
      dirname: the sub-directory name of a key.
      use_threaded_writer: wrap sub-writers in ThreadedSummaryWriter.
    """
    del allow_new_keys
    self._root = epath.Path(log_dir_root)
    self._tag_to_key = tag_to_key
    self._dirname = dirname
    self._auto_flush = auto_flush
    self._null = only_from_leader_process and not leader.is_leader()
    self._threaded = use_threaded_writer
    self._writers: dict[str, Any] = {}
    self._allow_new_keys = True
    for key in keys:
      self.subwriter(key)
    self._allow_new_keys = not self._writers

  def _make_subwriter(self, log_dir: epath.Path) -> Any:
    if self._null:
      return NullSummaryWriter()
    if self._threaded:
      return ThreadedSummaryWriter.open(log_dir, auto_flush=self._auto_flush)
    return summary_writer.SummaryWriter(log_dir, auto_flush=self._auto_flush)

  def subwriter(self, key: str) -> Any:
    """Returns the sub-writer of `key`, creating it if new keys are allowed."""
    if key not in self._writers:
      if not self._allow_new_keys:
        raise ValueError(
          f"Subwriter for `MultiDirectorySummaryWriter` with key={key} is requested but "
          f"this instance is configured to have only the pre-specified keys "
          f"{list(self._writers)}; add it to keys= when constructing the writer."
        )
      self._writers[key] = self._make_subwriter(self._root / self._dirname(key))
    return self._writers[key]

  def _route(self, tag: str) -> tuple[Any, str]:
    key, rest = self._tag_to_key(tag)
    return self.subwriter(key), rest

  def close(self):
    for w in self._writers.values():
      w.close()

  def flush(self):
    for w in self._writers.values():
      w.flush()

  def scalar(self, tag, value, step):
    w, tag = self._route(tag)
    w.scalar(tag, value, step)

  def image(self, tag, image, step, max_outputs=3):
    w, tag = self._route(tag)
    w.image(tag, image, step, max_outputs=max_outputs)

  def audio(self, tag, audiodata, step, sample_rate=44100, max_outputs=3):
    w, tag = self._route(tag)
    w.audio(tag, audiodata, step, sample_rate=sample_rate, max_outputs=max_outputs)

  def histogram(self, tag, values, step, bins=None):
    w, tag = self._route(tag)
    w.histogram(tag, values, step, bins=bins)

  def text(self, tag, textdata, step):
    w, tag = self._route(tag)
    w.text(tag, textdata, step)

  def write(self, tag, tensor, step, metadata=None):
    w, tag = self._route(tag)
    w.write(tag, tensor, step, metadata=metadata)

  def hparams(self, hparams):
    for w in self._writers.values():
      w.hparams(hparams)

  def as_result_processor(self, method: WriteEvalResultsFn | None = None) -> EvalResultProcessorFn:
    """Returns `f(results_by_dataset, train_state)` writing each dataset's
    results to its sub-writer (by `results.write_to_tensorboard`, or `method`)."""

    def process(results_by_dataset: dict[str, Any], train_state: Any) -> None:
      for name, results in results_by_dataset.items():
        writer = self.subwriter(name)
        if method is None:
          results.write_to_tensorboard(train_state, writer)
        else:
          method(results, train_state, writer)
        writer.flush()

    return process


class PublishableSummary(flax.struct.PyTreeNode, metaclass=abc.ABCMeta):
  """A value a model sows for TensorBoard; subclasses say how to write it."""

  @abc.abstractmethod
  def publish(self, writer: Any, tag: str, step: int) -> None:
    """Writes this summary to `writer` under `tag` at `step`."""


class ScalarSummary(PublishableSummary):
  """A scalar."""

  value: Any

  def publish(self, writer, tag, step):
    writer.scalar(tag, self.value, step=step)


class ImageSummary(PublishableSummary):
  """An image [H, W], [H, W, C] or a batch [K, H, W, C]."""

  image: Any

  def publish(self, writer, tag, step):
    writer.image(tag, self.image, step=step)


class MplImageSummary(PublishableSummary):
  """A 2-D array drawn with matplotlib's `imshow` (e.g. attention, spectra).

  Rows whose `v_paddings` and columns whose `h_paddings` exceed 0.5 are
  dropped before drawing (padding of a batch).
  """

  image: Any
  h_paddings: Any = None
  v_paddings: Any = None
  cmap: str | None = flax.struct.field(pytree_node=False, default=None)
  interpolation: str | None = flax.struct.field(pytree_node=False, default=None)
  aspect: str | None = flax.struct.field(pytree_node=False, default=None)
  origin: str | None = flax.struct.field(pytree_node=False, default=None)
  with_colorbar: bool = flax.struct.field(pytree_node=False, default=False)

  @property
  def trimmed_image(self) -> np.ndarray:
    image = np.asarray(self.image)
    if self.v_paddings is not None:
      image = image[np.asarray(self.v_paddings) <= 0.5]
    if self.h_paddings is not None:
      image = image[:, np.asarray(self.h_paddings) <= 0.5]
    return image

  def publish(self, writer, tag, step):
    try:
      import matplotlib  # pylint: disable=g-import-not-at-top

      matplotlib.use("agg")
      import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError("MplImageSummary needs matplotlib; pip install matplotlib.") from e
    fig = plt.figure()
    ax = fig.add_subplot()
    im = ax.imshow(
      self.trimmed_image,
      cmap=self.cmap,
      aspect=self.aspect,
      interpolation=self.interpolation,
      origin=self.origin,
    )
    if self.with_colorbar:
      fig.colorbar(im)
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[:, :, :3]
    plt.close(fig)
    writer.image(tag, rgb, step=step)


def _is_summary(node: Any) -> bool:
  return isinstance(node, PublishableSummary)


def publish_train_intermediates(
  writer: Any, tree: Any, step: int, *, prefix: str = "summary/"
) -> None:
  """Publishes every `PublishableSummary` in `tree` as `prefix + path`."""
  for path, value in var_util.flatten_with_paths(tree, is_leaf=_is_summary):
    if _is_summary(value):
      value.publish(writer, prefix + path[1:], step=step)


def publish_trainer_env_info(
  writer: Any,
  train_state: Any,
  *,
  prefix: str = "trainer/diagnosis/",
  also_do_logging: bool = True,
  loglevel: int = logging.INFO,
) -> None:
  """Writes text summaries about the run: sizes, shapes, devices, argv, processes.

  Tags are `prefix + name` with names total_num_params, param_shape,
  local_device, trainer_argv and process (bobbin prepended the prefix twice).
  """
  ndim = np.ndim(train_state.step)
  if ndim > 1:
    raise ValueError("train_state is replicated more than twice.")
  if ndim == 1:
    train_state = pmap_util.unreplicate(train_state)
  step = train_state.step

  def write_text(name: str, text: str) -> None:
    writer.text(prefix + name, text, step)
    if also_do_logging:
      logging.log(loglevel, "%s = %s", name, text)

  text = f"Number of parameters = {var_util.total_dimensionality(train_state.params)}"
  if hasattr(train_state, "extra_vars"):
    text += f", number of extra variables = {var_util.total_dimensionality(train_state.extra_vars)}"
  write_text("total_num_params", text)
  write_text("param_shape", "```\n" + var_util.summarize_shape(train_state.params) + "```")
  write_text("local_device", str(jax.local_devices()))
  write_text("trainer_argv", "".join(f'- argv[{i}]: "{a}"\n' for i, a in enumerate(sys.argv)))
  write_text("process", f"Number of processes = {jax.process_count()}")
