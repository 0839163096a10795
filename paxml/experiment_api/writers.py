"""JAXline's writer protocol and its TensorBoard implementation.

`TensorBoardLogger(config, mode)` writes to `<config.checkpoint_dir>/<mode>`
and flushes after every call so TensorBoard shows values at once.
"""

from typing import Any, Protocol

import os

from paxml import summaries


class Writer(Protocol):
  def write_scalars(self, global_step: int, scalars: dict[str, Any]) -> None: ...


class TensorBoardLogger:
  """Scalars and images for one mode, under `checkpoint_dir/<mode>`."""

  def __init__(self, config: Any, mode: str):
    if not config.get("checkpoint_dir"):
      raise ValueError(
        "config.checkpoint_dir is not set; add it to your config (where "
        "checkpoints and TensorBoard files go)."
      )
    self.directory = os.path.join(config.checkpoint_dir, mode)
    self._writer = summaries.EventFileWriter(self.directory)

  def write_scalars(self, global_step: int, scalars: dict[str, Any]) -> None:
    self._writer.scalars(int(global_step), scalars)
    self._writer.flush()

  def write_images(self, global_step: int, images: dict[str, Any]) -> None:
    """Each image is [H, W] or [B, H, W, C]."""
    for name, image in images.items():
      self._writer.image(name, image, int(global_step))
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()


def create_writer(config: Any, mode: str) -> TensorBoardLogger:
  return TensorBoardLogger(config, mode)
