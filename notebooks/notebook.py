"""`./bazelw run //notebooks:notebook`: Jupyter on notebooks/ with the project's pinned packages.

The server and its kernels run this Bazel-built interpreter environment (the lock's jax, flax,
TensorFlow, seqio, ... and this repository's praxis / paxml), and open the source directory, so
edits to the notebooks are saved in the checkout. Extra arguments go to Jupyter
(`-- --port=8899 --no-browser`).
"""

import os
import sys

from notebook import app


def main() -> None:
  workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
  if not workspace:
    sys.exit(
      "Run this with `./bazelw run //notebooks:notebook` (it opens the checkout's "
      "notebooks/ directory, which only `bazel run` tells it)."
    )
  # Kernels inherit the environment: the same sys.path as this process.
  os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
  sys.exit(
    app.main([f"--ServerApp.root_dir={os.path.join(workspace, 'notebooks')}", *sys.argv[1:]])
  )


if __name__ == "__main__":
  main()
