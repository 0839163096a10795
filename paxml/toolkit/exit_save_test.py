"""A save made just before the process ends is complete on restart.

Each case runs a child process that saves asynchronously and then ends at
once: by returning, by an uncaught exception, or by SIGTERM.
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
import optax

from paxml.testing import save_then_exit
from paxml.toolkit import training

_SAVE = """
    import sys
    import jax.numpy as jnp
    from paxml import toolkit as bobbin
    directory = sys.argv[1]
    saver = bobbin.BaseTrainTask().make_checkpoint_saver(directory)
    state = bobbin.TrainState.create(apply_fn=None, params={"w": jnp.full((512, 512), 3.0)},
                                     tx=__import__("optax").sgd(0.1)).replace(step=7)
    saver(state)  # Asynchronous: returns before the files are written.
"""


class ExitTest(parameterized.TestCase):
  @parameterized.parameters(*save_then_exit.ENDINGS)
  def test_save_then_exit_is_complete_on_restart(self, how, returncode):
    directory = self.create_tempdir().full_path
    save_then_exit.run_child(self, _SAVE, directory, how, returncode)
    self.assertEqual(os.listdir(directory), ["checkpoint_00000007"])  # no *-tmp left
    template = training.TrainState.create(
      apply_fn=None, params={"w": jnp.zeros((512, 512))}, tx=optax.sgd(0.1)
    )
    restored = training.restore_checkpoint(directory, template)
    self.assertEqual(int(restored.step), 7)
    np.testing.assert_array_equal(restored.params["w"], np.full((512, 512), 3.0))


if __name__ == "__main__":
  absltest.main()
