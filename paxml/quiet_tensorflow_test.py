"""TensorFlow is imported only through quiet_tensorflow: without its notices, without a GPU."""

import os
import subprocess
import sys

from absl.testing import absltest

# Notices TF 2.21 prints at import with TF_CPP_MIN_LOG_LEVEL=0. Which of them appear depends on
# the CPU: the oneDNN notice only where oneDNN's custom operations are on by default (CPUs with
# AVX-512), the CPU-feature notice where the binary could use more instructions than it does.
_NOTICES = (
  "oneDNN custom operations are on",
  "This TensorFlow binary is optimized",
  "Could not find cuda drivers",
)


def _python(code: str, **extra_env: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # The default unless a test sets it.
  env.update(extra_env)
  return subprocess.run(
    [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
  )


class QuietTensorflowTest(absltest.TestCase):
  def test_notices_are_dropped_and_other_stderr_lines_kept(self):
    code = (
      "import os, sys\n"
      "from paxml import quiet_tensorflow\n"
      "tf = quiet_tensorflow.import_tensorflow()\n"
      "os.write(2, b'after the import\\n')\n"
      "print(tf.config.get_visible_devices('GPU'), tf is quiet_tensorflow.import_tensorflow())\n"
    )
    quiet = _python(code)
    for notice in _NOTICES:
      self.assertNotIn(notice, quiet.stderr)
    self.assertIn("after the import", quiet.stderr)
    self.assertEqual(quiet.stdout.strip(), "[] True")  # No GPU for TF; imported once.

    loud = _python(code, TF_CPP_MIN_LOG_LEVEL="0")
    self.assertTrue(any(notice in loud.stderr for notice in _NOTICES), loud.stderr)

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
