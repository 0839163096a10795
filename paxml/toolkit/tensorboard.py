"""TensorBoard writers and the summaries models sow (bobbin's `tensorboard`).

Writers, all with flax's `flax.metrics.tensorboard.SummaryWriter` API
(scalar, image, audio, histogram, text, write, hparams, flush, close); the
last three are paxml.summaries' writers (the Pax trainer's), given bobbin's
constructor arguments here:
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
import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any

from etils import epath
import flax.struct
import jax
import numpy as np

from paxml import summaries
from paxml.toolkit import pmap_util
from paxml.toolkit import summary_writer
from paxml.toolkit import var_util

EvalResultProcessorFn = Callable[[dict[str, Any], Any], Any]
WriteEvalResultsFn = Callable[[Any, Any, Any], None]


# The one null writer (paxml.summaries): accepts every flax writer call, including
# `as_result_processor`, and writes nothing.
NullSummaryWriter = summaries.NullSummaryWriter


class ThreadedSummaryWriter(summaries.ThreadedSummaryWriter):
  """paxml.summaries' threaded writer with bobbin's arguments and defaults.

  Each call copies its arguments to host memory in the caller's thread (device memory is free
  when it returns); the write itself happens in a worker thread.
  """

  def __init__(self, base_writer: Any, max_workers: int = 1, wait_on_flush: bool = False):
    """Wraps `base_writer` (a flax-API SummaryWriter); `wait_on_flush=False` (bobbin's default)
    queues `flush` behind the writes instead of waiting for them."""
    super().__init__(base_writer, max_workers=max_workers, wait_on_flush=wait_on_flush)

  @classmethod
  def open(cls, log_dir: Any, auto_flush: bool = True) -> "ThreadedSummaryWriter":
    """A ThreadedSummaryWriter over a new flax-API SummaryWriter at `log_dir`."""
    return cls(summary_writer.SummaryWriter(log_dir, auto_flush=auto_flush))


class MultiDirectorySummaryWriter(summaries.MultiDirectorySummaryWriter):
  """paxml.summaries' multi-directory writer with bobbin's arguments and flax-API sub-writers."""

  def __init__(
    self,
    log_dir_root: Any,
    *,
    keys: Iterable[str] = (),
    allow_new_keys: bool = True,
    only_from_leader_process: bool = True,
    auto_flush: bool = True,
    tag_to_key: Callable[[str], tuple[str, str]] | None = None,
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
      tag_to_key: splits a tag into (key, tag inside the sub-writer);
        default: at the first "/".
      dirname: the sub-directory name of a key.
      use_threaded_writer: wrap sub-writers in ThreadedSummaryWriter.
    """
    del allow_new_keys
    self._auto_flush = auto_flush  # Read by _open, which the base's __init__ calls.
    extra = {} if tag_to_key is None else {"tag_to_key": tag_to_key}
    super().__init__(
      epath.Path(log_dir_root),
      keys,
      only_from_leader_process=only_from_leader_process,
      dirname=lambda root, key: root / dirname(key),
      use_threaded_writer=use_threaded_writer,
      **extra,
    )

  def _open(self, log_dir: Any) -> Any:
    if self._threaded:
      return ThreadedSummaryWriter.open(log_dir, auto_flush=self._auto_flush)
    return summary_writer.SummaryWriter(log_dir, auto_flush=self._auto_flush)

  def subwriter(self, key: str) -> Any:
    """Returns the sub-writer of `key` (bobbin's name for `writer_for`)."""
    return self.writer_for(key)


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
