"""OrbaxCheckpointer: durable series, donation-safe snapshots, resume after restart."""

import os

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
)

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
import jax
import jax.numpy as jnp
import numpy as np

from paxml.experiment_api import base_config
from paxml.experiment_api import checkpointer
from paxml.experiment_api import experiment
from paxml.experiment_api import utils


class Counter(experiment.AbstractExperiment):
  CHECKPOINT_ATTRS = {"_params": "params"}
  NON_BROADCAST_CHECKPOINT_ATTRS = {"_host_counter": "counter"}

  def __init__(self, mode, init_rng=None):
    self._params = utils.bcast_local_devices({"w": jnp.zeros(3)})
    self._host_counter = np.int64(0)
    # Donates the params, as a real pmapped update would.
    self._update = jax.pmap(lambda p: jax.tree.map(lambda x: x + 1, p), donate_argnums=0)

  def step(self, *, global_step, rng, writer):
    self._params = self._update(self._params)
    self._host_counter += 1
    return {}

  def evaluate(self, *, global_step, rng, writer):
    return {}


def _config(directory):
  config = base_config.get_base_config()
  config.checkpoint_dir = directory
  config.max_checkpoints_to_keep = 2
  return config


class OrbaxCheckpointerTest(absltest.TestCase):
  def test_save_run_ahead_restore_equals_saved(self):
    directory = self.create_tempdir().full_path
    ckpt = checkpointer.OrbaxCheckpointer(_config(directory), "train")
    exp = Counter("train")
    state = ckpt.get_experiment_state("latest")
    state.experiment_module, state.global_step = exp, 0
    state.train_step_rng = exp.initialize_train_step_rng(jax.random.PRNGKey(3))
    for _ in range(2):
      exp.step(global_step=None, rng=None, writer=None)
    state.global_step = 2
    ckpt.save("latest")
    for _ in range(3):  # Run ahead: the saved buffers are donated and replaced.
      exp.step(global_step=None, rng=None, writer=None)
    state.global_step = 5
    ckpt.restore("latest")
    self.assertEqual(state.global_step, 2)
    np.testing.assert_array_equal(exp._params["w"], np.full((2, 3), 2.0))
    self.assertEqual(exp._host_counter, 2)
    self.assertEqual(state.train_step_rng.shape, (2, 2))
    ckpt.close()

  def test_new_process_resumes_from_latest_and_best_keeps_its_value(self):
    directory = self.create_tempdir().full_path
    ckpt = checkpointer.OrbaxCheckpointer(_config(directory), "train")
    exp = Counter("train")
    latest = ckpt.get_experiment_state("latest")
    latest.experiment_module = exp
    for step in (1, 2, 3):
      exp.step(global_step=None, rng=None, writer=None)
      latest.global_step = step
      ckpt.save("latest")
    best = ckpt.get_experiment_state("best")
    best.experiment_module, best.global_step, best.best_eval_metric_value = exp, 3, 0.875
    ckpt.save("best")
    ckpt.close()
    self.assertEqual(
      sorted(os.listdir(os.path.join(directory, "models", "latest"))),
      ["checkpoint_00000002", "checkpoint_00000003"],
    )
    # "A new process": fresh objects over the same directory.
    again = checkpointer.OrbaxCheckpointer(_config(directory), "eval")
    self.assertTrue(again.can_be_restored("latest"))
    self.assertTrue(again.restore_path("latest").endswith("checkpoint_00000003"))
    fresh = Counter("eval")
    best = again.get_experiment_state("best")
    best.experiment_module, best.best_eval_metric_value = fresh, -1.0
    again.restore("best")
    self.assertEqual(best.best_eval_metric_value, 0.875)
    state = again.get_experiment_state("latest")
    state.experiment_module = fresh
    again.restore("latest")
    self.assertEqual(state.global_step, 3)
    np.testing.assert_array_equal(fresh._params["w"], np.full((2, 3), 3.0))
    self.assertFalse(again.can_be_restored("nothing"))
    again.close()

  def test_missing_checkpoint_dir_is_explained(self):
    with self.assertRaisesRegex(ValueError, "checkpoint_dir"):
      checkpointer.OrbaxCheckpointer(base_config.get_base_config(), "train")


if __name__ == "__main__":
  absltest.main()
