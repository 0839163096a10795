"""Tests for user_paths."""

import os
from unittest import mock

from absl.testing import absltest

from hostenv import user_paths


class ResolveTest(absltest.TestCase):
  def test_relative_path_joins_bazel_working_directory(self):
    with mock.patch.dict(os.environ, {"BUILD_WORKING_DIRECTORY": "/srv/proj"}):
      self.assertEqual(user_paths.resolve("runs/a"), "/srv/proj/runs/a")

  def test_absolute_path_is_kept(self):
    with mock.patch.dict(os.environ, {"BUILD_WORKING_DIRECTORY": "/srv/proj"}):
      self.assertEqual(user_paths.resolve("/tmp/x"), "/tmp/x")

  def test_without_bazel_uses_current_directory(self):
    env = {k: v for k, v in os.environ.items() if k != "BUILD_WORKING_DIRECTORY"}
    with mock.patch.dict(os.environ, env, clear=True):
      self.assertEqual(user_paths.resolve("r"), os.path.join(os.getcwd(), "r"))

  def test_home_is_expanded(self):
    with mock.patch.dict(os.environ, {"HOME": "/home/v", "BUILD_WORKING_DIRECTORY": "/w"}):
      self.assertEqual(user_paths.resolve("~/runs"), "/home/v/runs")


if __name__ == "__main__":
  absltest.main()
