"""Tests the --logdir resolution of the TensorBoard launcher, and a real run of it."""

import os
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto import summary_pb2
from tensorboard.summary.writer import event_file_writer

from paxml.tools import run_tensorboard


class ResolveLogdirTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.dict(os.environ, {"BUILD_WORKING_DIRECTORY": "/home/u"}))

  def test_relative_logdir_is_joined_to_the_users_directory(self):
    self.assertEqual(
      run_tensorboard._resolve_logdir(["tb", "--logdir=runs/a", "--port=6006"]),
      ["tb", "--logdir=/home/u/runs/a", "--port=6006"],
    )

  def test_absolute_and_other_flags_are_kept(self):
    argv = ["tb", "--logdir=/tmp/x", "--logdirx=y", "--bind_all"]
    self.assertEqual(run_tensorboard._resolve_logdir(argv), argv)

  def test_logdir_spec_is_resolved(self):
    self.assertEqual(
      run_tensorboard._resolve_logdir(["tb", "--logdir_spec=r"]), ["tb", "--logdir_spec=/home/u/r"]
    )


class RunTest(absltest.TestCase):
  def test_inspect_finds_the_runs_scalars_under_a_relative_logdir(self):
    # `--inspect` is TensorBoard's own one-shot run: it loads the logdir as the server would,
    # prints what it found and exits.
    start = self.create_tempdir().full_path
    writer = event_file_writer.EventFileWriter(os.path.join(start, "runs", "a"))
    for step in (1, 2):
      writer.add_event(
        event_pb2.Event(
          step=step,
          wall_time=1.0,
          summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / step)]
          ),
        )
      )
    writer.close()
    result = subprocess.run(
      [sys.executable, "-m", run_tensorboard.__name__, "--inspect", "--logdir=runs"],
      env=dict(os.environ, BUILD_WORKING_DIRECTORY=start, PYTHONPATH=os.pathsep.join(sys.path)),
      capture_output=True,
      text=True,
      timeout=120,
      check=False,
    )
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn(f"These tags are in {os.path.join(start, 'runs', 'a')}:", result.stdout)
    self.assertRegex(result.stdout, r"scalars\n\s+loss\n")
    self.assertRegex(result.stdout, r"num_steps\s+2\n")


if __name__ == "__main__":
  absltest.main()
