"""The JAXline-style digits experiment through platform.main, train_eval_multithreaded."""

import glob
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import flagsaver
import jax

from paxml import checkpoints
from paxml.experiment_api import checkpointer as checkpointer_lib
from paxml.experiment_api import platform
from paxml.experiment_api.examples import digits
from paxml.testing import event_files

_CONFIG_FILE = digits.__file__


def _scalars(directory, tag):
  return [(step, float(value)) for step, value in event_files.read_tensors(directory, tag)]


class _Recording(digits.Experiment):
  """Records the mode strings and what on_new_best_model sees."""

  modes = []
  best_calls = []

  def __init__(self, mode, init_rng, **kwargs):
    super().__init__(mode, init_rng, **kwargs)
    _Recording.modes.append(mode)

  def on_new_best_model(self, best_state):
    _Recording.best_calls.append(
      (int(best_state.global_step), float(best_state.best_eval_metric_value))
    )


class DigitsExperimentTest(absltest.TestCase):
  def _main(self, *args):
    argv = ["digits", f"--config={_CONFIG_FILE}", *args]
    with flagsaver.flagsaver():
      platform.main(digits.Experiment, argv)

  def test_train_eval_multithreaded_reaches_90_percent(self):
    ckpt_dir = self.create_tempdir().full_path
    self._main(
      f"--config.checkpoint_dir={ckpt_dir}",
      "--config.training_steps=300",
      "--config.eval_poll_interval_secs=0.2",
      "--jaxline_mode=train_eval_multithreaded",
    )
    evals = _scalars(os.path.join(ckpt_dir, "eval"), "accuracy")
    self.assertEqual(evals[-1][0], 300)  # The final step is always evaluated.
    self.assertGreater(evals[-1][1], 0.9)
    self.assertTrue(_scalars(os.path.join(ckpt_dir, "train"), "loss"))
    best = checkpoints.TreeCheckpointer(os.path.join(ckpt_dir, "models", "best"))
    self.assertGreater(best.read_metadata()["best_eval_metric_value"], 0.9)
    best.close()
    # Resume: a later train-only run starts from "latest" (step 300).
    self._main(
      f"--config.checkpoint_dir={ckpt_dir}", "--config.training_steps=320", "--jaxline_mode=train"
    )
    latest = sorted(os.listdir(os.path.join(ckpt_dir, "models", "latest")))
    self.assertEqual(latest[-1], "checkpoint_00000320")
    train_steps = [s for s, _ in _scalars(os.path.join(ckpt_dir, "train"), "loss")]
    self.assertEqual(train_steps[-1], 320)

  def test_killed_lazy_experiment_resumes_and_its_best_checkpoint_evaluates(self):
    ckpt_dir = self.create_tempdir().full_path
    killed = subprocess.run(
      [
        sys.executable,
        "-P",
        "-m",
        "paxml.experiment_api.examples.digits",
        f"--config={_CONFIG_FILE}",
        f"--config.checkpoint_dir={ckpt_dir}",
        "--config.training_steps=300",
        "--config.experiment_kwargs.terminate_at_step=150",
        "--jaxline_mode=train",
      ],
      capture_output=True,
      text=True,
      timeout=600,
      env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    self.assertEqual(killed.returncode, -15, killed.stderr[-3000:])
    self.assertEqual(
      os.listdir(os.path.join(ckpt_dir, "models", "latest")), ["checkpoint_00000100"]
    )
    _Recording.modes.clear()
    _Recording.best_calls.clear()
    argv = [
      f"--config={_CONFIG_FILE}",
      f"--config.checkpoint_dir={ckpt_dir}",
      "--config.training_steps=300",
      "--config.eval_poll_interval_secs=0.2",
      "--jaxline_mode=train_eval_multithreaded",
    ]
    with flagsaver.flagsaver():
      platform.main(_Recording, argv)  # argv without a program name, as sys.argv[1:]
    # JAXline's mode strings: "train" for training, the flag's for its evaluator.
    self.assertCountEqual(_Recording.modes, ["train", "train_eval_multithreaded"])
    # Resumed at 100: steps 50 and 100 were written once, by the killed run.
    self.assertEqual(
      [s for s, _ in _scalars(os.path.join(ckpt_dir, "train"), "loss")],
      [50, 100, 150, 200, 250, 300],
    )
    # on_new_best_model sees the new best's step and value.
    self.assertNotEmpty(_Recording.best_calls)
    self.assertTrue(all(step >= 100 and value > 0 for step, value in _Recording.best_calls))
    best_step, best_value = _Recording.best_calls[-1]

    # A fresh (lazy, all-None) experiment restores "best" and evaluates it.
    config = digits.get_config()
    config.checkpoint_dir = ckpt_dir
    fresh = digits.Experiment("eval", jax.random.PRNGKey(1), **config.experiment_kwargs)
    self.assertIsNone(fresh._params)
    ckpt = checkpointer_lib.create_checkpointer(config, "eval")
    state = ckpt.get_experiment_state("best")
    state.global_step, state.experiment_module = 0, fresh
    ckpt.restore("best")
    self.assertEqual(state.global_step, best_step)
    self.assertEqual(fresh._note, f"trained to step {best_step} in mode train")
    scalars = fresh.evaluate(global_step=None, rng=None, writer=None)
    self.assertAlmostEqual(scalars["accuracy"], best_value, places=5)
    self.assertGreater(scalars["accuracy"], 0.9)
    ckpt.close()

  def test_eval_mode_string_reaches_experiment_and_one_off(self):
    ckpt_dir = self.create_tempdir().full_path
    self._main(
      f"--config.checkpoint_dir={ckpt_dir}", "--config.training_steps=20", "--jaxline_mode=train"
    )
    self._main(
      f"--config.checkpoint_dir={ckpt_dir}",
      "--config.one_off_evaluate=True",
      "--jaxline_mode=eval_test",
    )
    self.assertTrue(glob.glob(os.path.join(ckpt_dir, "eval_test", "events.*")))
    self.assertEqual(_scalars(os.path.join(ckpt_dir, "eval_test"), "accuracy")[0][0], 20)

  def test_unknown_mode_and_missing_config(self):
    with self.assertRaisesRegex(ValueError, "Unknown --jaxline_mode"):
      self._main(
        "--jaxline_mode=predict", f"--config.checkpoint_dir={self.create_tempdir().full_path}"
      )
    with flagsaver.flagsaver(config=None):
      with self.assertRaisesRegex(ValueError, "No --config given"):
        platform.main(digits.Experiment, ["digits"])


if __name__ == "__main__":
  absltest.main()
