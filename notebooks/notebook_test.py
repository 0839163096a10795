"""Executes inspect_demo_lm.ipynb end to end with a Jupyter kernel; any cell that raises fails."""

import os
import sys

from absl.testing import absltest
import nbclient
import nbformat

_NOTEBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inspect_demo_lm.ipynb")


class NotebookTest(absltest.TestCase):
  def test_every_cell_runs(self):
    tmp = self.create_tempdir().full_path
    # Jupyter, IPython and matplotlib write state under HOME; keep it in the test's directory.
    # No MPLBACKEND: the kernel's default inline backend is what puts the plot into the notebook.
    # The kernel inherits this process' environment, so it imports the same pinned packages.
    os.environ.update(
      {
        "HOME": tmp,
        "JUPYTER_RUNTIME_DIR": os.path.join(tmp, "runtime"),
        "IPYTHONDIR": os.path.join(tmp, "ipython"),
        "MPLCONFIGDIR": os.path.join(tmp, "mpl"),
        "PAX_NOTEBOOK_DATA_DIR": os.path.join(tmp, "kjv"),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
      }
    )
    notebook = nbformat.read(_NOTEBOOK, as_version=4)
    # The kernel runs this interpreter (ipykernel's own spec), not a kernel installed elsewhere.
    client = nbclient.NotebookClient(
      notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}
    )
    client.execute()  # Raises CellExecutionError naming the cell and its traceback.
    outputs = "".join(
      o.get("text", "")
      for c in notebook.cells
      if c.cell_type == "code"
      for o in c.get("outputs", [])
    )
    self.assertIn("decoder/exact_match", outputs)
    self.assertIn("parameters", outputs)
    images = [
      o for c in notebook.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    self.assertLen(images, 1)  # The loss plot.


if __name__ == "__main__":
  absltest.main()
