"""Tests the --logdir resolution of the TensorBoard launcher."""

from absl.testing import absltest

from paxml.tools import tensorboard


class ResolveLogdirTest(absltest.TestCase):

  def test_relative_logdir_is_joined_to_cwd(self):
    self.assertEqual(
        tensorboard._resolve_logdir(["tb", "--logdir=runs/a", "--port=6006"], "/home/u"),
        ["tb", "--logdir=/home/u/runs/a", "--port=6006"])

  def test_absolute_and_other_flags_are_kept(self):
    argv = ["tb", "--logdir=/tmp/x", "--logdirx=y", "--bind_all"]
    self.assertEqual(tensorboard._resolve_logdir(argv, "/home/u"), argv)

  def test_logdir_spec_is_resolved(self):
    self.assertEqual(
        tensorboard._resolve_logdir(["tb", "--logdir_spec=r"], "/w"), ["tb", "--logdir_spec=/w/r"])

  def test_importing_tensorboard_main_works(self):
    # The launcher is only useful if TensorBoard's own entry point imports from the lock.
    self.assertTrue(callable(tensorboard.tensorboard_main.run_main))


if __name__ == "__main__":
  absltest.main()
