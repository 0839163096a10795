"""The JAXline-style digits experiment through platform.main, train_eval_multithreaded."""

import glob
import os

from absl.testing import absltest
from absl.testing import flagsaver
import jax
import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from paxml import checkpoints
from paxml.experiment_api import platform
from paxml.experiment_api.examples import digits

_CONFIG_FILE = digits.__file__


def _scalars(directory, tag):
  acc = event_accumulator.EventAccumulator(directory,
                                           size_guidance={event_accumulator.TENSORS: 0})
  acc.Reload()
  return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]


class DigitsExperimentTest(absltest.TestCase):

  def _main(self, *args):
    argv = ["digits", f"--config={_CONFIG_FILE}", *args]
    with flagsaver.flagsaver():
      platform.main(digits.Experiment, argv)

  def test_train_eval_multithreaded_reaches_90_percent(self):
    ckpt_dir = self.create_tempdir().full_path
    self._main(f"--config.checkpoint_dir={ckpt_dir}", "--config.training_steps=300",
               "--config.eval_poll_interval_secs=0.2",
               "--jaxline_mode=train_eval_multithreaded")
    evals = _scalars(os.path.join(ckpt_dir, "eval"), "accuracy")
    self.assertEqual(evals[-1][0], 300)  # The final step is always evaluated.
    self.assertGreater(evals[-1][1], 0.9)
    self.assertTrue(_scalars(os.path.join(ckpt_dir, "train"), "loss"))
    best = checkpoints.TreeCheckpointer(os.path.join(ckpt_dir, "models", "best"))
    self.assertGreater(best.read_metadata()["best_eval_metric_value"], 0.9)
    best.close()
    # Resume: a later train-only run starts from "latest" (step 300).
    self._main(f"--config.checkpoint_dir={ckpt_dir}", "--config.training_steps=320",
               "--jaxline_mode=train")
    latest = sorted(os.listdir(os.path.join(ckpt_dir, "models", "latest")))
    self.assertEqual(latest[-1], "checkpoint_00000320")
    train_steps = [s for s, _ in _scalars(os.path.join(ckpt_dir, "train"), "loss")]
    self.assertEqual(train_steps[-1], 320)

  def test_eval_mode_string_reaches_experiment_and_one_off(self):
    ckpt_dir = self.create_tempdir().full_path
    self._main(f"--config.checkpoint_dir={ckpt_dir}", "--config.training_steps=20",
               "--jaxline_mode=train")
    self._main(f"--config.checkpoint_dir={ckpt_dir}", "--config.one_off_evaluate=True",
               "--jaxline_mode=eval_test")
    self.assertTrue(glob.glob(os.path.join(ckpt_dir, "eval_test", "events.*")))
    self.assertEqual(_scalars(os.path.join(ckpt_dir, "eval_test"), "accuracy")[0][0], 20)

  def test_unknown_mode_and_missing_config(self):
    with self.assertRaisesRegex(ValueError, "Unknown --jaxline_mode"):
      self._main("--jaxline_mode=predict",
                 f"--config.checkpoint_dir={self.create_tempdir().full_path}")
    with flagsaver.flagsaver(config=None):
      with self.assertRaisesRegex(ValueError, "No --config given"):
        platform.main(digits.Experiment, ["digits"])


if __name__ == "__main__":
  absltest.main()
