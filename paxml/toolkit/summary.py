"""Summaries models sow, and what publishes them (bobbin's tensorboard module).

A model records a value for TensorBoard by sowing a `PublishableSummary` into
the "tensorboard" collection:

  self.sow("tensorboard", "logits_mean", ScalarSummary(logits.mean()))

`compute_loss` returns that collection among the mutated variables; the step
function stores it in `TrainState.extra_vars["tensorboard"]`, and
`PublishTrainingProgress` (training.py) writes each summary under tag
`summary/<module path>/<name>`.

The writers (`NullSummaryWriter`, `ThreadedSummaryWriter`,
`MultiDirectorySummaryWriter`) live in `paxml.summaries`, shared with the
Pax trainer, and are re-exported here.
"""

import sys
from typing import Any

from absl import logging
import flax.struct
import jax
import numpy as np

from paxml import summaries
from paxml.toolkit import crontab
from paxml.toolkit import pmap_utils
from paxml.toolkit import var_utils

NullSummaryWriter = summaries.NullSummaryWriter
ThreadedSummaryWriter = summaries.ThreadedSummaryWriter
MultiDirectorySummaryWriter = summaries.MultiDirectorySummaryWriter
EventFileWriter = summaries.EventFileWriter


class PublishableSummary(flax.struct.PyTreeNode):
  """A value a model sows for TensorBoard; subclasses say how to write it."""

  def publish(self, writer: Any, tag: str, step: int) -> None:
    raise NotImplementedError(f"{type(self).__name__} must implement publish().")


class ScalarSummary(PublishableSummary):
  value: Any

  def publish(self, writer, tag, step):
    writer.scalar(tag, np.asarray(self.value), step)


class ImageSummary(PublishableSummary):
  """An image [H, W], [H, W, C] or a batch [B, H, W, C] of floats in [0, 1]."""

  image: Any

  def publish(self, writer, tag, step):
    writer.image(tag, np.asarray(self.image), step)


def _is_summary(x: Any) -> bool:
  return isinstance(x, PublishableSummary)


def _tag(path: str) -> str:
  # Drop the tuple indices that `sow` adds ('/loss/0' -> 'loss').
  return "/".join(p for p in path.strip("/").split("/") if not p.isdigit())


def publish_train_intermediates(writer: Any, tree: Any, step: int, *,
                                prefix: str = "summary/") -> list[str]:
  """Writes every `PublishableSummary` in `tree`; returns the tags written."""
  tags = []
  for path, leaf in var_utils.flatten_with_paths(tree, is_leaf=_is_summary):
    if _is_summary(leaf):
      tag = prefix + _tag(path)
      leaf.publish(writer, tag, int(step))
      tags.append(tag)
  return tags


def publish_trainer_env_info(writer: Any, train_state: Any, *,
                             prefix: str = "trainer/diagnosis/") -> dict[str, str]:
  """Writes (and logs) text about the run: sizes, shapes, devices, argv.

  Tags are `<prefix><name>`, e.g. `trainer/diagnosis/total_num_params`
  (bobbin applied the prefix twice). Returns {tag: text}.
  """
  if crontab.is_replicated(train_state):
    train_state = pmap_utils.unreplicate(train_state)
  info = {
      "total_num_params": str(var_utils.total_dimensionality(train_state.params)),
      "total_num_extra_vars": str(var_utils.total_dimensionality(train_state.extra_vars)),
      "param_shapes": var_utils.summarize_shape(train_state.params),
      "local_devices": ", ".join(str(d) for d in jax.local_devices()),
      "process_count": str(jax.process_count()),
      "argv": " ".join(sys.argv),
  }
  step = int(np.asarray(train_state.step))
  written = {}
  for name, text in info.items():
    tag = prefix + name
    logging.info("%s: %s", tag, text)
    writer.text(tag, text, step)
    written[tag] = text
  return written
