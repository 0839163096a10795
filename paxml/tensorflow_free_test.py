"""The trainer and main load no TensorFlow: it comes in only through hostenv.quiet_tensorflow."""

import os
import subprocess
import sys

from absl.testing import absltest


def _python(code: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
  return subprocess.run(
    [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
  )


class TensorflowFreeTest(absltest.TestCase):
  def test_trainer_and_main_load_no_tensorflow(self):
    code = (
      "import sys\n"
      "from paxml import main, trainer, eval_lib, summaries\n"
      "from paxml import experiment_registry\n"
      "experiment_registry.get_experiment('testing.tiny_lm.TinyLm')\n"
      "print('tensorflow' in sys.modules)\n"
    )
    self.assertEqual(_python(code).stdout.strip(), "False")


if __name__ == "__main__":
  absltest.main()
