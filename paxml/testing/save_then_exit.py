"""A save made just before a process ends must be complete when the next process restores it.

Each front door's checkpoint test runs a child script that saves asynchronously and then ends at
once, in each of the three ways a job ends: returning, raising, or dying of SIGTERM. The child
script is the test's own save code followed by `ENDING`, which reads how to end from argv[2];
`run_child` starts it with the test's imports and checks its exit status.

    @parameterized.parameters(*save_then_exit.ENDINGS)
    def test_...(self, how, returncode):
      save_then_exit.run_child(self, SAVE_CODE, directory, how, returncode)
      ...restore from directory and check the values...
"""

import os
import signal
import subprocess
import sys
import textwrap

from absl.testing import absltest

# (how the child ends, its expected exit status); a signal's status is minus its number.
ENDINGS = (("return", 0), ("exception", 1), ("sigterm", -signal.SIGTERM))

ENDING = textwrap.dedent("""
    import os as _os, signal as _signal, sys as _sys, time as _time
    if _sys.argv[2] == "exception":
      raise RuntimeError("the job failed right after the save")
    if _sys.argv[2] == "sigterm":
      _os.kill(_os.getpid(), _signal.SIGTERM)
      _time.sleep(60)  # Not reached: the process dies of SIGTERM after the save.
""")


def run_child(
  test: absltest.TestCase, save_code: str, directory: str, how: str, returncode: int
) -> None:
  """Runs `save_code` (argv[1] is `directory`) then ends as `how` says; checks the exit status."""
  done = subprocess.run(
    [sys.executable, "-P", "-c", textwrap.dedent(save_code) + ENDING, directory, how],
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    check=False,
  )
  test.assertEqual(done.returncode, returncode, done.stderr[-2000:])
