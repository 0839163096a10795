"""The drivers with a fake experiment and a fake checkpointer (as JAXline's tests)."""

import copy
import os

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
)

import types  # pylint: disable=g-import-not-at-top
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from paxml.experiment_api import base_config
from paxml.experiment_api import experiment
from paxml.experiment_api import train

_IMPROVEMENT_STEPS = [2, 5, 15, 27, 99]  # Eval calls at which the metric improves.


class DummyExperiment(experiment.AbstractExperiment):
  def __init__(self, mode, init_rng=None):
    self.mode = mode
    self.init_rng = init_rng
    self.steps_seen = []
    self.step_rngs = []
    self.eval_calls = 0
    self.fitness = 0
    self.train_rng_shape = None

  def initialize_train_step_rng(self, rng):
    out = super().initialize_train_step_rng(rng)
    self.train_rng_shape = out.shape
    return out

  def step(self, *, global_step, rng, writer):
    self.steps_seen.append(int(np.asarray(global_step)[0]))
    self.step_rngs.append(np.asarray(rng))
    return {"loss": -1.0}

  def evaluate(self, *, global_step, rng, writer):
    self.eval_calls += 1
    if self.eval_calls in _IMPROVEMENT_STEPS:
      self.fitness += 1
    return {"fitness": self.fitness}


class DummyCheckpoint:
  """Records calls; restore bumps global_step so the eval loop always moves on."""

  def __init__(self, restorable=False):
    self.states = {}
    self.saves = []
    self.restorable = restorable
    self.paths = 0

  def get_experiment_state(self, series):
    return self.states.setdefault(series, types.SimpleNamespace(global_step=0))

  def save(self, series):
    self.saves.append((series, copy.copy(self.states[series].global_step)))

  def restore(self, series):
    self.states[series].global_step += 1

  def restore_path(self, series):
    self.paths += 1
    return f"path_{self.paths}" if series == "latest" else None

  def can_be_restored(self, series):
    return self.restorable and series == "latest"

  def wait_for_checkpointing_to_finish(self):
    pass


class RecordingWriter:
  def __init__(self):
    self.written = []

  def write_scalars(self, step, scalars):
    self.written.append((step, dict(scalars)))


def _config(**overrides):
  config = base_config.get_base_config()
  config.interval_type = "steps"
  config.training_steps = 12
  config.save_checkpoint_interval = 5
  config.log_tensors_interval = 100
  config.log_train_data_interval = 4
  config.log_async = False
  config.update(overrides)
  return config


class TrainTest(parameterized.TestCase):
  def test_step_numbering_actions_and_final_save(self):
    ckpt, writer = DummyCheckpoint(), RecordingWriter()
    with mock.patch.object(train.utils, "rendezvous") as rendezvous:
      train.train(DummyExperiment, _config(), ckpt, writer)
    exp = ckpt.states["latest"].experiment_module
    self.assertEqual(exp.steps_seen, list(range(12)))  # The first step sees 0.
    self.assertEqual(ckpt.states["latest"].global_step, 12)
    # Saves at steps 5 and 10 (multiples of the interval), then the final one.
    self.assertEqual(ckpt.saves, [("latest", 5), ("latest", 10), ("latest", 12)])
    # Written at multiples of 4, and always at the last step.
    self.assertEqual([s for s, _ in writer.written], [4, 8, 12])
    self.assertIn("steps_per_sec", writer.written[0][1])
    rendezvous.assert_called_once()
    self.assertEqual(exp.mode, "train")

  @parameterized.parameters(1, 4)
  def test_train_step_rng(self, steps):
    ckpt = DummyCheckpoint()
    with mock.patch.object(train.utils, "rendezvous"):
      train.train(DummyExperiment, _config(training_steps=steps), ckpt, RecordingWriter())
    exp = ckpt.states["latest"].experiment_module
    self.assertLen(exp.step_rngs, steps)
    self.assertEqual(exp.train_rng_shape, (jax.local_device_count(), 2))
    self.assertEqual(exp.step_rngs[0].shape, (4, 2))
    # unique_host_unique_device: every device and every step gets its own key.
    keys = {tuple(k) for r in exp.step_rngs for k in r}
    self.assertLen(keys, 4 * steps)

  def test_same_device_mode_gives_equal_keys_across_devices(self):
    ckpt = DummyCheckpoint()
    with mock.patch.object(train.utils, "rendezvous"):
      train.train(
        DummyExperiment,
        _config(training_steps=2, random_mode_train="same_host_same_device"),
        ckpt,
        RecordingWriter(),
      )
    rngs = ckpt.states["latest"].experiment_module.step_rngs
    self.assertLen({tuple(k) for k in rngs[0]}, 1)
    self.assertNotEqual(tuple(rngs[0][0]), tuple(rngs[1][0]))

  def test_time_intervals_use_mocked_time(self):
    ckpt = DummyCheckpoint()
    clock = iter(np.arange(1000.0, 2000.0, 7.0))  # Each step takes 7 s.
    fake_time = types.SimpleNamespace(time=lambda: float(next(clock)))
    with (
      mock.patch.object(train.utils, "rendezvous"),
      mock.patch.object(train, "time", fake_time),
      mock.patch.object(experiment, "time", fake_time),
    ):
      train.train(
        DummyExperiment,
        _config(interval_type="secs", save_checkpoint_interval=20, log_train_data_interval=None),
        ckpt,
        None,
      )
    # Start at t=1000; step k ends at 1000 + 7k: due at k=3 (21 s), 6, 9, 12 (+final).
    self.assertEqual(
      ckpt.saves, [("latest", 3), ("latest", 6), ("latest", 9), ("latest", 12), ("latest", 12)]
    )

  def test_resumes_from_latest_and_initial_checkpoint(self):
    ckpt = DummyCheckpoint(restorable=True)  # restore bumps global_step 0 -> 1.
    with mock.patch.object(train.utils, "rendezvous"):
      train.train(
        DummyExperiment, _config(save_initial_train_checkpoint=True), ckpt, RecordingWriter()
      )
    exp = ckpt.states["latest"].experiment_module
    self.assertEqual(exp.steps_seen, list(range(1, 12)))
    self.assertNotIn(("latest", 1), ckpt.saves[:1])  # No initial save after a restore.


class EvaluateTest(parameterized.TestCase):
  @parameterized.product(process_id=[0, 3], best_all_hosts=[True, False])
  def test_best_checkpoint_saves_only_at_improved_best_metrics(self, process_id, best_all_hosts):
    config = _config(
      training_steps=100, best_model_eval_metric="fitness", best_checkpoint_all_hosts=best_all_hosts
    )
    ckpt = DummyCheckpoint(restorable=True)
    with mock.patch.object(jax, "process_index", return_value=process_id):
      train.evaluate(DummyExperiment, config, ckpt, RecordingWriter(), sleep=lambda s: None)
    best_saves = [step for series, step in ckpt.saves if series == "best"]
    if process_id == 0 or best_all_hosts:
      # Eval call k sees global_step k; the first (from -inf) and improvements.
      self.assertEqual(best_saves, [1] + _IMPROVEMENT_STEPS)
    else:
      self.assertEqual(best_saves, [])

  def test_waits_for_a_new_checkpoint_and_stops_after_the_last_step(self):
    ckpt = DummyCheckpoint(restorable=True)
    paths = iter([None, "a", "a", None, "b", "c"])
    ckpt.restore_path = lambda series: next(paths)
    ckpt.restore = lambda series: setattr(
      ckpt.states["latest"], "global_step", {"a": 5, "b": 9, "c": 12}[last[0]]
    )
    last = [None]
    original = ckpt.restore_path
    ckpt.restore_path = lambda series: last.__setitem__(0, original(series)) or last[0]
    sleeps, writer = [], RecordingWriter()
    scalars = train.evaluate(
      DummyExperiment, _config(), ckpt, writer, jaxline_mode="eval_test", sleep=sleeps.append
    )
    self.assertEqual([s for s, _ in writer.written], [5, 9, 12])
    self.assertEqual(sleeps, [10.0, 10.0, 10.0])  # None, "a" again, None.
    self.assertEqual(ckpt.states["latest"].experiment_module.mode, "eval_test")
    self.assertEqual(scalars, {"fitness": 1})

  def test_one_off_and_initial_weights(self):
    ckpt = DummyCheckpoint(restorable=False)
    ckpt.restore_path = lambda series: None
    writer = RecordingWriter()
    train.evaluate(
      DummyExperiment,
      _config(eval_initial_weights=True, one_off_evaluate=True),
      ckpt,
      writer,
      sleep=lambda s: self.fail("should not wait"),
    )
    self.assertEqual([s for s, _ in writer.written], [0])

  def test_missing_metric_is_an_error(self):
    config = _config(best_model_eval_metric="accuracy")
    with self.assertRaisesRegex(ValueError, "fitness"):
      train.evaluate(
        DummyExperiment,
        config,
        DummyCheckpoint(restorable=True),
        RecordingWriter(),
        sleep=lambda s: None,
      )


if __name__ == "__main__":
  absltest.main()
