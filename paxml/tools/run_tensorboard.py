"""TensorBoard from the pinned lock, so viewing a run needs nothing installed by hand.

  ./bazelw run //paxml/tools:tensorboard -- --logdir=/tmp/pax_demo/summaries

A relative --logdir is taken from the directory the command was started in, not Bazel's runfiles tree.
"""

import sys

from tensorboard import main as tensorboard_main

from hostenv import user_paths


def _resolve_logdir(argv):
  """Makes `--logdir=PATH` / `--logdir_spec=PATH` relative to where the user started the command."""
  resolved = []
  for arg in argv:
    flag, sep, value = arg.partition("=")
    if sep and flag in ("--logdir", "--logdir_spec") and value:
      arg = f"{flag}={user_paths.resolve(value)}"
    resolved.append(arg)
  return resolved


def main():
  sys.argv = _resolve_logdir(sys.argv)
  tensorboard_main.run_main()


if __name__ == "__main__":
  main()
