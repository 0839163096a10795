"""Tests the --logdir resolution of the TensorBoard launcher."""

import os
from unittest import mock

from absl.testing import absltest

from paxml.tools import run_tensorboard


class ResolveLogdirTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.dict(os.environ, {"BUILD_WORKING_DIRECTORY": "/home/u"}))

  def test_relative_logdir_is_joined_to_the_users_directory(self):
    self.assertEqual(
        run_tensorboard._resolve_logdir(["tb", "--logdir=runs/a", "--port=6006"]),
        ["tb", "--logdir=/home/u/runs/a", "--port=6006"])

  def test_absolute_and_other_flags_are_kept(self):
    argv = ["tb", "--logdir=/tmp/x", "--logdirx=y", "--bind_all"]
    self.assertEqual(run_tensorboard._resolve_logdir(argv), argv)

  def test_logdir_spec_is_resolved(self):
    self.assertEqual(run_tensorboard._resolve_logdir(["tb", "--logdir_spec=r"]),
                     ["tb", "--logdir_spec=/home/u/r"])

  def test_importing_tensorboard_main_works(self):
    # The launcher is only useful if TensorBoard's own entry point imports from the lock.
    self.assertTrue(callable(run_tensorboard.tensorboard_main.run_main))


if __name__ == "__main__":
  absltest.main()
