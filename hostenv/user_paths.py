"""Paths given on a command line, taken as the user meant them.

`bazel run` starts a program inside its runfiles tree, not where the user typed the command; Bazel
passes that directory as BUILD_WORKING_DIRECTORY. Relative paths are joined to it (or to the current
directory outside Bazel), so `--job_log_dir=runs/a` lands next to the user, not in bazel-out.
"""

import os


def resolve(path: str) -> str:
  """Returns `path` with `~` expanded, made absolute against the directory the user started in."""
  start = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
  return os.path.join(start, os.path.expanduser(path))
