"""Running a `bazel run` target from a test: the real binary, as the docs' commands run it.

A test lists the binary in its `data` (or `deps`); Bazel then puts the binary and its runfiles in
the test's runfiles tree, and `run("paxml/main", ...)` starts it there the way `bazel run` does
(BUILD_WORKING_DIRECTORY set, so relative paths resolve against `cwd`).
"""

import os
import subprocess
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
