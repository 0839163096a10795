"""Running the project's commands from a test, in a child process as a user runs them.

`run("paxml/main", ...)`: the real `bazel run` binary. A test lists the binary in its `data` (or
`deps`); Bazel then puts the binary and its runfiles in the test's runfiles tree, and `run` starts
it there the way `bazel run` does (BUILD_WORKING_DIRECTORY set, so relative paths resolve against
`cwd`).

`run_main(...)`: `python -m paxml.main` with the test's own imports (its sys.path), so that the
child also finds the experiments the test module registers. The test depends on //paxml:main_lib.
"""

import os
import subprocess
import sys
from typing import Mapping


def path(package_path: str) -> str:
  """The runfiles path of the binary `//<dirname>:<basename>` of `package_path`."""
  root = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"])
  binary = os.path.join(root, package_path)
  if not os.path.exists(binary):
    raise FileNotFoundError(
      f"{binary} is not in this test's runfiles: add //"
      f"{os.path.dirname(package_path)}:{os.path.basename(package_path)} "
      "to the test's data in BUILD"
    )
  return binary


def run(
  package_path: str,
  *args: str,
  cwd: str,
  env: Mapping[str, str] | None = None,
  timeout: float = 600,
) -> subprocess.CompletedProcess:
  """Runs the binary with `args` from `cwd`; returns the finished process (text stdout/stderr).

  `env` entries are added to this process's environment; a value of None removes the variable.
  """
  child_env = dict(os.environ, BUILD_WORKING_DIRECTORY=cwd)
  for key, value in (env or {}).items():
    if value is None:
      child_env.pop(key, None)
    else:
      child_env[key] = value
  return subprocess.run(
    [path(package_path), *args],
    cwd=cwd,
    env=child_env,
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
  )


def run_main(*args: str, timeout: float = 300) -> tuple[int, str]:
  """Runs `python -m paxml.main ARGS` on this process's sys.path; returns (exit status, stderr)."""
  result = subprocess.run(
    [sys.executable, "-m", "paxml.main", *args],
    env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
  )
  return result.returncode, result.stderr
