"""JAXline API: a save just before the process ends is complete on restart.

A child process saves "latest" (asynchronously) and ends at once: by
returning, by an uncaught exception, or by SIGTERM. The parent restores it
into a fresh experiment whose checkpointed attributes are still None.
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from paxml.experiment_api import base_config
from paxml.experiment_api import checkpointer
from paxml.experiment_api import experiment
from paxml.testing import save_then_exit

_SAVE = """
    import sys
    import jax.numpy as jnp
    from paxml.experiment_api import base_config, checkpointer, utils
    from paxml.experiment_api import exit_test
    directory = sys.argv[1]
    config = base_config.get_base_config()
    config.checkpoint_dir = directory
    ckpt = checkpointer.OrbaxCheckpointer(config, "train", async_save=True)
    exp = exit_test.Lazy("train")
    exp._params = utils.bcast_local_devices({"w": jnp.full((256, 256), 3.0)})
    exp._note = "saved at step 7"
    state = ckpt.get_experiment_state("latest")
    state.global_step, state.experiment_module = 7, exp
    ckpt.save("latest")  # Asynchronous: returns before the files are written.
"""


class Lazy(experiment.AbstractExperiment):
  """DeepMind style: checkpointed attributes are None until built."""

  CHECKPOINT_ATTRS = {"_params": "params"}
  NON_BROADCAST_CHECKPOINT_ATTRS = {"_note": "note"}

  def __init__(self, mode, init_rng=None):
    del mode, init_rng
    self._params = None
    self._note = None

  def step(self, *, global_step, rng, writer):
    return {}

  def evaluate(self, *, global_step, rng, writer):
    return {}


class ExitTest(parameterized.TestCase):
  @parameterized.parameters(*save_then_exit.ENDINGS)
  def test_save_then_exit_is_complete_on_restart(self, how, returncode):
    directory = self.create_tempdir().full_path
    save_then_exit.run_child(self, _SAVE, directory, how, returncode)
    latest = os.path.join(directory, "models", "latest")
    self.assertEqual(os.listdir(latest), ["checkpoint_00000007"])  # no *-tmp left
    config = base_config.get_base_config()
    config.checkpoint_dir = directory
    ckpt = checkpointer.OrbaxCheckpointer(config, "eval")
    fresh = Lazy("eval")
    state = ckpt.get_experiment_state("latest")
    state.global_step, state.experiment_module = 0, fresh
    self.assertTrue(ckpt.can_be_restored("latest"))
    ckpt.restore("latest")
    self.assertEqual(state.global_step, 7)
    self.assertEqual(fresh._note, "saved at step 7")
    np.testing.assert_array_equal(fresh._params["w"][0], np.full((256, 256), 3.0))
    ckpt.close()


if __name__ == "__main__":
  absltest.main()
