"""Tests that scalars land in a TensorBoard event file with the right tags/steps."""

import gc
import glob
import os
import threading
from unittest import mock
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from paxml import summaries
from paxml.testing import event_files


def _read_scalars(directory):
  """Returns {tag: [(step, value), ...]} from the event files in `directory`."""
  return {
    tag: sorted(values.items()) for tag, values in event_files.read_scalars(directory).items()
  }


class SummaryWriterTest(absltest.TestCase):
  def test_scalars_are_written_under_summaries_train(self):
    job_log_dir = self.create_tempdir().full_path
    with summaries.SummaryWriter(job_log_dir, "train") as writer:
      writer.scalars(10, {"loss": 2.5, "Steps/sec": 4.0})
      writer.scalars(20, {"loss": 1.25, "Steps/sec": 5.0})
    directory = os.path.join(job_log_dir, "summaries", "train")
    self.assertEqual(writer.directory, directory)
    self.assertLen(glob.glob(os.path.join(directory, "events.out.tfevents.*")), 1)
    self.assertEqual(
      _read_scalars(directory),
      {"loss": [(10, 2.5), (20, 1.25)], "Steps/sec": [(10, 4.0), (20, 5.0)]},
    )

  def test_flush_makes_values_readable_before_close(self):
    job_log_dir = self.create_tempdir().full_path
    writer = summaries.SummaryWriter(job_log_dir, "train")
    writer.scalars(1, {"lr": 0.5})
    writer.flush()
    self.assertEqual(_read_scalars(writer.directory), {"lr": [(1, 0.5)]})
    writer.close()

  def test_disabled_writer_writes_nothing(self):
    job_log_dir = self.create_tempdir().full_path
    with summaries.SummaryWriter(job_log_dir, "train", enabled=False) as writer:
      writer.scalars(1, {"loss": 1.0})
    self.assertFalse(os.path.exists(os.path.join(job_log_dir, "summaries")))


class EventFileWriterTest(absltest.TestCase):
  def test_writer_dropped_without_close_closes_its_file_quietly(self):
    writer = summaries.EventFileWriter(self.create_tempdir().full_path)
    writer.scalar("a", 1.0, 1)
    file, directory = writer._file, writer.directory  # pylint: disable=protected-access
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      del writer
      gc.collect()
    self.assertTrue(file.closed)
    self.assertEmpty([w for w in caught if issubclass(w.category, ResourceWarning)])
    self.assertEqual(_read_scalars(directory), {"a": [(1, 1.0)]})

  def test_bobbin_style_methods_write_their_kinds(self):
    log_dir = self.create_tempdir().full_path
    with summaries.EventFileWriter(log_dir) as writer:
      writer.scalar("a", jnp.float32(1.5), 3)
      writer.image("img", np.zeros((4, 5)), 3)  # [H, W]
      writer.image("imgs", np.zeros((2, 4, 5, 3)), 3)  # [B, H, W, C]
      writer.text("t", "hello", 3)
      writer.histogram("h", np.arange(10.0), 3)
    self.assertEqual(event_files.tags(log_dir), ["a", "h", "img", "imgs", "t"])
    self.assertEqual(event_files.read_scalars(log_dir), {"a": {3: 1.5}})
    ((step, text),) = event_files.read_tensors(log_dir, "t")
    self.assertEqual((step, text.item()), (3, b"hello"))

  def test_bad_image_shape_says_what_is_expected(self):
    with summaries.EventFileWriter(self.create_tempdir().full_path) as writer:
      with self.assertRaisesRegex(ValueError, r"\[B, H, W, C\]"):
        writer.image("x", np.zeros((1, 2, 3, 4, 5)), 0)


class NullSummaryWriterTest(absltest.TestCase):
  def test_stands_in_for_every_writer_method(self):
    # It replaces EventFileWriter and SummaryWriter where nothing may be written (non-leader
    # hosts), so it must have every public method either has.
    def public(cls):
      return {
        name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))
      }

    missing = (public(summaries.EventFileWriter) | public(summaries.SummaryWriter)) - public(
      summaries.NullSummaryWriter
    )
    self.assertEmpty(missing - {"open"})

  def test_writes_nothing(self):
    with mock.patch("builtins.open", side_effect=AssertionError("opened a file")):
      with summaries.NullSummaryWriter() as writer:
        results = [
          writer.scalars(1, {"a": 1.0}),
          writer.scalar("a", 1.0, 1),
          writer.image("i", np.zeros((2, 2)), 1),
          writer.text("t", "x", 1),
          writer.histogram("h", [1.0], 1),
          writer.flush(),
        ]
    self.assertEqual(results, [None] * 6)


class _Recorder:
  """A base writer that records calls and the thread they ran in."""

  def __init__(self, block: threading.Event | None = None):
    self.calls = []
    self.block = block

  def __getattr__(self, name):
    def record(*args):
      if self.block is not None and name != "close":
        self.block.wait(5)
      self.calls.append((name, args, threading.current_thread().name))

    return record


class ThreadedSummaryWriterTest(parameterized.TestCase):
  @parameterized.parameters(
    ("scalar", ("loss", jnp.float32(2.0), 5)),
    ("image", ("img", jnp.zeros((4, 4)), 5, 3)),
    ("text", ("t", "hello", 5)),
    ("histogram", ("h", jnp.arange(4.0), 5, None)),
  )
  def test_forwards_host_copies_from_a_background_thread(self, method, args):
    base = _Recorder()
    writer = summaries.ThreadedSummaryWriter(base)
    getattr(writer, method)(*args)
    writer.close()
    self.assertEqual(base.calls[0][0], method)
    forwarded = base.calls[0][1]
    self.assertLen(forwarded, len(args))
    for got, want in zip(forwarded, args):
      self.assertNotIsInstance(got, jax.Array)
      if isinstance(want, jax.Array):
        np.testing.assert_array_equal(got, np.asarray(want))
    self.assertStartsWith(base.calls[0][2], "summary_writer")
    self.assertEqual(base.calls[-1][0], "close")

  def test_returns_before_the_write_and_frees_device_buffers(self):
    release = threading.Event()
    base = _Recorder(block=release)
    writer = summaries.ThreadedSummaryWriter(base)
    value = jnp.arange(3.0)
    writer.scalars(1, {"v": value})
    # The write is blocked, yet the call returned and the buffer may go.
    self.assertEqual(base.calls, [])
    value.delete()
    release.set()
    writer.close()
    name, (step, values), _ = base.calls[0]
    self.assertEqual((name, step), ("scalars", 1))
    np.testing.assert_array_equal(values["v"], [0.0, 1.0, 2.0])

  def test_background_error_is_raised_by_a_later_call(self):
    base = mock.Mock()
    base.scalar.side_effect = RuntimeError("disk full")
    writer = summaries.ThreadedSummaryWriter(base)
    writer.scalar("a", 1.0, 1)
    with self.assertRaisesRegex(RuntimeError, "disk full"):
      writer.wait()
    writer.close()

  def test_writes_real_event_files_in_order(self):
    log_dir = self.create_tempdir().full_path
    with summaries.ThreadedSummaryWriter.open(log_dir) as writer:
      for step in range(5):
        writer.scalars(step, {"loss": jnp.float32(step * 0.5)})
      writer.flush()
      self.assertEqual(_read_scalars(log_dir)["loss"], [(s, s * 0.5) for s in range(5)])


class MultiDirectorySummaryWriterTest(absltest.TestCase):
  def test_routes_tag_prefix_to_sub_directory(self):
    root = self.create_tempdir().full_path
    with summaries.MultiDirectorySummaryWriter(root) as writer:
      writer.scalar("dev/accuracy", 0.5, 10)
      writer.scalars(20, {"dev/accuracy": 0.75, "test/accuracy": 0.25})
    self.assertCountEqual(os.listdir(root), ["dev", "test"])
    self.assertEqual(
      _read_scalars(os.path.join(root, "dev")), {"accuracy": [(10, 0.5), (20, 0.75)]}
    )
    self.assertEqual(_read_scalars(os.path.join(root, "test")), {"accuracy": [(20, 0.25)]})

  def test_frozen_keys_and_untagged_names_fail_with_advice(self):
    root = self.create_tempdir().full_path
    with summaries.MultiDirectorySummaryWriter(
      root, keys=["dev"], use_threaded_writer=False
    ) as writer:
      with self.assertRaisesRegex(KeyError, "keys="):
        writer.scalar("tset/accuracy", 1.0, 1)
      with self.assertRaisesRegex(ValueError, "dev/accuracy"):
        writer.scalar("accuracy", 1.0, 1)

  def test_only_leader_process_writes(self):
    root = self.create_tempdir().full_path
    with mock.patch.object(jax, "process_index", return_value=1):
      with summaries.MultiDirectorySummaryWriter(root) as writer:
        writer.scalar("dev/accuracy", 0.5, 10)
        self.assertIsInstance(writer.writer_for("dev"), summaries.NullSummaryWriter)
    self.assertEqual(os.listdir(root), [])
    with mock.patch.object(jax, "process_index", return_value=1):
      with summaries.MultiDirectorySummaryWriter(root, only_from_leader_process=False) as writer:
        writer.scalar("dev/accuracy", 0.5, 10)
    self.assertEqual(os.listdir(root), ["dev"])

  def test_as_result_processor_writes_one_directory_per_dataset(self):
    root = self.create_tempdir().full_path

    class Results:
      def __init__(self, acc):
        self.acc = acc

      def write_to_tensorboard(self, train_state, writer):
        writer.scalar("accuracy", self.acc, train_state["step"])

    with summaries.MultiDirectorySummaryWriter(root) as writer:
      process = writer.as_result_processor()
      process({"dev": Results(0.5), "test": Results(0.25)}, {"step": 7})
    self.assertEqual(_read_scalars(os.path.join(root, "dev")), {"accuracy": [(7, 0.5)]})
    self.assertEqual(_read_scalars(os.path.join(root, "test")), {"accuracy": [(7, 0.25)]})


if __name__ == "__main__":
  absltest.main()
