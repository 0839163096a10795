"""TensorBoard from the pinned lock, so viewing a run needs nothing installed by hand.

  ./bazelw run //paxml/tools:tensorboard -- --logdir=/tmp/pax_demo/summaries

A relative --logdir is taken from the directory the command was started in, not Bazel's runfiles tree.
"""

import os
import sys

from tensorboard import main as tensorboard_main


def _resolve_logdir(argv, cwd):
  """Makes a relative `--logdir[_spec]=PATH` absolute against `cwd`."""
  resolved = []
  for arg in argv:
    flag, sep, value = arg.partition("=")
    if sep and flag in ("--logdir", "--logdir_spec") and value and not os.path.isabs(value):
      arg = f"{flag}={os.path.join(cwd, value)}"
    resolved.append(arg)
  return resolved


def main():
  # `bazel run` starts us inside the runfiles tree; BUILD_WORKING_DIRECTORY is where the user was.
  cwd = os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd())
  sys.argv = _resolve_logdir(sys.argv, cwd)
  tensorboard_main.run_main()


if __name__ == "__main__":
  main()
