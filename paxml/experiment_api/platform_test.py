"""platform.main's debugging flags: --jaxline_disable_pmap_jit and --jaxline_post_mortem.

This file is also the --config file of the tests (it defines get_config()).
"""

from unittest import mock

from absl.testing import absltest
from absl.testing import flagsaver
import jax
import jax.numpy as jnp
from ml_collections import config_dict

from paxml.experiment_api import base_config
from paxml.experiment_api import experiment
from paxml.experiment_api import platform


def get_config() -> config_dict.ConfigDict:
  config = base_config.get_base_config()
  config.checkpoint_dir = ""  # Each test passes its own temporary directory.
  config.training_steps = 2
  config.interval_type = "steps"
  config.save_checkpoint_interval = 100
  config.log_tensors_interval = 1
  config.log_train_data_interval = 1
  config.experiment_kwargs = config_dict.ConfigDict({"fail_at": -1})
  return config


class _Recorder(experiment.AbstractExperiment):
  """Records, per step, whether a jitted function really compiled; fails at `fail_at`."""

  NON_BROADCAST_CHECKPOINT_ATTRS = {"_count": "count"}
  traced_in_python: list[bool] = []

  def __init__(self, mode, init_rng=None, *, fail_at=-1):
    super().__init__(mode, init_rng)
    self._count = jnp.zeros((), jnp.int32)
    self._fail_at = fail_at

  def step(self, *, global_step, rng, writer):
    seen = []

    @jax.jit
    def f(x):
      # A Python side effect at trace time; with jit disabled, `x` is a concrete array.
      seen.append(not isinstance(x, jax.core.Tracer))
      return x + 1

    self._count = f(self._count)
    _Recorder.traced_in_python.append(seen[0])
    step = int(jax.device_get(global_step).ravel()[0])  # replicated over local devices
    if step == self._fail_at:
      raise RuntimeError(f"deliberate failure at step {step}")
    return {"count": self._count}

  def evaluate(self, *, global_step, rng, writer):
    return {}


class PlatformFlagsTest(absltest.TestCase):
  def _main(self, *args):
    argv = [
      "platform_test",
      f"--config={__file__}",
      f"--config.checkpoint_dir={self.create_tempdir().full_path}",
      "--jaxline_mode=train",
      *args,
    ]
    with flagsaver.flagsaver():
      platform.main(_Recorder, argv)

  def setUp(self):
    super().setUp()
    _Recorder.traced_in_python.clear()

  def test_disable_pmap_jit_runs_jitted_code_op_by_op(self):
    self._main()
    self.assertEqual(_Recorder.traced_in_python, [False, False])  # compiled: traced abstractly
    _Recorder.traced_in_python.clear()
    self._main("--jaxline_disable_pmap_jit")
    self.assertEqual(_Recorder.traced_in_python, [True, True])  # eager: concrete values

  def test_post_mortem_opens_the_debugger_at_the_failure_then_raises(self):
    # As JAXline: pdb first, then the exception still ends the program.
    with (
      mock.patch("pdb.post_mortem") as post_mortem,
      self.assertRaisesRegex(RuntimeError, "deliberate failure at step 1"),
    ):
      self._main("--config.experiment_kwargs.fail_at=1", "--jaxline_post_mortem")
    post_mortem.assert_called_once()
    (traceback,), _ = post_mortem.call_args
    while traceback.tb_next:
      traceback = traceback.tb_next
    self.assertEqual(traceback.tb_frame.f_code.co_name, "step")  # the failing frame
    # Without the flag the same failure propagates.
    with self.assertRaisesRegex(RuntimeError, "deliberate failure at step 1"):
      self._main("--config.experiment_kwargs.fail_at=1")


if __name__ == "__main__":
  absltest.main()
