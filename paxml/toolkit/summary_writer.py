"""`SummaryWriter(log_dir)`: flax's `flax.metrics.tensorboard.SummaryWriter`, without TensorFlow.

bobbin's writers wrap flax's, which writes through tf.summary and so imports TensorFlow (seconds
per process). This one has flax's methods, arguments and value rules (scalars as float, grayscale
images as RGB, audio clipped to [-1, 1], nested hparams flattened with '.') and writes the same
events through paxml.summaries' TensorFlow-free event files.
"""

import io
import time
from typing import Any
import wave

import numpy as np
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.audio import metadata as audio_metadata
from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.util import tensor_util

from paxml import summaries

# The value types TensorBoard's hparams plugin takes; flax turns any other into its str().
_HPARAM_TYPES = (bool, int, float, str, np.bool_, np.integer, np.floating, np.character)


def _flatten_hparams(hparams: dict[str, Any], prefix: str = "") -> dict[str, Any]:
  flat = {}
  for key, value in hparams.items():
    if isinstance(value, dict):
      flat.update(_flatten_hparams(value, f"{prefix}{key}."))
    else:
      flat[prefix + key] = value if isinstance(value, _HPARAM_TYPES) else str(value)
  return flat


def _wav(samples: np.ndarray, sample_rate: int) -> bytes:
  """16-bit PCM WAV of `samples` [frames, channels] in [-1, 1] (tf.audio.encode_wav's format)."""
  buffer = io.BytesIO()
  with wave.open(buffer, "wb") as wav:
    wav.setnchannels(samples.shape[1])
    wav.setsampwidth(2)
    wav.setframerate(int(sample_rate))
    wav.writeframes(np.round(samples * 32767.0).astype("<i2").tobytes())
  return buffer.getvalue()


class SummaryWriter(summaries.EventFileWriter):
  """flax's SummaryWriter API over an event file in `log_dir`.

  `auto_flush` is accepted for flax's signature: every write reaches the operating system before
  it returns either way, and `flush`/`close` also fsync.
  """

  def __init__(self, log_dir: Any, auto_flush: bool = True):
    del auto_flush
    super().__init__(str(log_dir))

  def scalar(self, tag: str, value: Any, step: int) -> None:
    super().scalar(tag, float(np.array(value)), step)

  def image(self, tag: str, image: Any, step: int, max_outputs: int = 3) -> None:
    """[H, W], [H, W, 1|3], [K, H, W] or [K, H, W, 1|3]; uint8 or floats in [0, 1)."""
    image = np.array(image)
    if image.ndim == 2:
      image = image[None, :, :, None]
    elif image.ndim == 3:  # [H, W, C] or [K, H, W]
      image = image[None] if image.shape[-1] in (1, 3) else image[..., None]
    if image.shape[-1] == 1:
      image = np.repeat(image, 3, axis=-1)
    super().image(tag, image, step, max_outputs)

  def audio(
    self, tag: str, audiodata: Any, step: int, sample_rate: int = 44100, max_outputs: int = 3
  ) -> None:
    """`audiodata` [K, frames, channels], clipped to [-1, 1]; tf.summary.audio's WAV event."""
    clips = np.clip(np.asarray(audiodata, np.float32), -1, 1)[:max_outputs]
    if clips.ndim != 3:
      raise ValueError(
        f"audiodata must be [clips, frames, channels]; got shape {clips.shape}. Add the "
        "missing axes (e.g. x[None, :, None] for one mono clip)."
      )
    # [K, 2]: each clip's WAV bytes and its (empty) label.
    tensor = np.array([[_wav(clip, sample_rate), b""] for clip in clips], dtype=object)
    summary = summary_pb2.Summary()
    summary.value.add(
      tag=tag,
      metadata=audio_metadata.create_summary_metadata(
        display_name=None, description=None, encoding=audio_metadata.Encoding.Value("WAV")
      ),
      tensor=tensor_util.make_tensor_proto(tensor),
    )
    self._write_summary(step, summary)

  def text(self, tag: str, textdata: str | bytes, step: int) -> None:
    if not isinstance(textdata, (str, bytes)):
      raise ValueError(f"textdata must be str or bytes; got {type(textdata).__name__}.")
    super().text(tag, textdata.decode() if isinstance(textdata, bytes) else textdata, step)

  def histogram(self, tag: str, values: Any, step: int, bins: int | None = None) -> None:
    super().histogram(tag, np.reshape(np.array(values), -1), step, bins)

  def write(self, tag: str, tensor: Any, step: int, metadata: Any = None) -> None:
    """Any tensor; `metadata` a SummaryMetadata, its serialized bytes, or None."""
    if isinstance(metadata, bytes):
      metadata = summary_pb2.SummaryMetadata.FromString(metadata)
    summary = summary_pb2.Summary()
    value = summary.value.add(tag=tag, tensor=tensor_util.make_tensor_proto(np.asarray(tensor)))
    if metadata is not None:
      value.metadata.CopyFrom(metadata)
    self._write_summary(step, summary)

  def hparams(self, hparams: dict[str, Any]) -> None:
    """The hparams plugin's session-start summary at step 0, as flax writes it."""
    summary = hparams_summary.hparams_pb(_flatten_hparams(hparams), start_time_secs=time.time())
    self._write_summary(0, summary)
