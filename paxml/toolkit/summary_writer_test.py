"""flax's SummaryWriter API, written without TensorFlow, read back as TensorBoard reads it."""

import io
import os
import subprocess
import sys
import wave

from absl.testing import absltest
import numpy as np
from PIL import Image

from paxml.testing import event_files
from paxml.toolkit import summary_writer


class SummaryWriterTest(absltest.TestCase):
  def test_every_method_writes_what_flax_writes(self):
    log_dir = self.create_tempdir().full_path
    with summary_writer.SummaryWriter(log_dir) as writer:
      writer.scalar("loss", np.float64(0.25), 3)
      writer.image("gray", np.full((2, 3), 1.0), 3)  # [H, W] floats: RGB white.
      writer.audio("beep", np.full((1, 4, 1), 2.0), 3, sample_rate=8000)  # Clipped to 1.
      writer.text("t", b"bytes", 3)
      writer.histogram("h", np.arange(6.0).reshape(2, 3), 3, bins=2)
      writer.write("raw", np.array([1, 2], np.int32), 3)
      writer.hparams({"opt": {"lr": 0.1}, "layers": [1, 2]})
    self.assertEqual(event_files.read_scalars(log_dir), {"loss": {3: 0.25}})

    ((_, image),) = event_files.read_tensors(log_dir, "gray")
    self.assertEqual(list(image[:2]), [b"3", b"2"])  # Width, height.
    pixels = np.asarray(Image.open(io.BytesIO(image[2])))
    np.testing.assert_array_equal(pixels, np.full((2, 3, 3), 255))

    ((_, audio),) = event_files.read_tensors(log_dir, "beep")
    self.assertEqual(audio.shape, (1, 2))
    with wave.open(io.BytesIO(audio[0, 0])) as wav:
      self.assertEqual((wav.getframerate(), wav.getnchannels()), (8000, 1))
      np.testing.assert_array_equal(np.frombuffer(wav.readframes(4), "<i2"), [32767] * 4)

    ((_, text),) = event_files.read_tensors(log_dir, "t")
    self.assertEqual(text.item(), b"bytes")
    ((_, histogram),) = event_files.read_tensors(log_dir, "h")
    self.assertEqual(histogram.shape, (2, 3))  # 2 buckets of [left, right, count].
    self.assertEqual(histogram[:, 2].sum(), 6)
    ((_, raw),) = event_files.read_tensors(log_dir, "raw")
    np.testing.assert_array_equal(raw, [1, 2])
    self.assertIn("_hparams_/session_start_info", event_files.tags(log_dir))

  def test_text_must_be_str_or_bytes(self):
    with summary_writer.SummaryWriter(self.create_tempdir().full_path) as writer:
      with self.assertRaisesRegex(ValueError, "str or bytes; got int"):
        writer.text("t", 1, 0)

  def test_the_toolkit_loads_no_tensorflow(self):
    # The whole toolkit (bobbin's writers included), as `from paxml import toolkit` loads it.
    code = "import sys\nfrom paxml import toolkit\nprint('tensorflow' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
      [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout
    self.assertEqual(out.strip(), "False")


if __name__ == "__main__":
  absltest.main()
