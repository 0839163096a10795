"""Installs the praxis, paxml and pax-profiling wheels into a virtual environment.

    ./bazelw run //wheels:install -- VENV [pip install options...]

Creates VENV (with the Python Bazel builds with, which profiling's compiled extension needs) if it
does not exist, then `pip install`s the three wheels Bazel just built. Their dependencies come from
PyPI at the versions of third_party/py/requirements_lock.txt (a constraints file made from the
lock), the versions this repo's tests ran with; `--no-deps` (or any other pip option) is passed on.
"""

import glob
import os
import re
import subprocess
import sys
import tempfile

from paxml import user_paths

_HERE = os.path.dirname(os.path.abspath(__file__))
_LOCK = os.path.join(os.path.dirname(_HERE), "third_party", "py", "requirements_lock.txt")


def wheels() -> list[str]:
  found = sorted(glob.glob(os.path.join(_HERE, "*", "*.whl")))
  if len(found) != 3:
    raise SystemExit(f"expected the three wheels under {_HERE}, found {found}")
  return found


def constraints(lock_path: str) -> str:
  """`name==version` lines of the lock (pip refuses hashes in a constraints file)."""
  with open(lock_path, encoding="utf-8") as f:
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*==[^\s\\;]+)", f.read(), re.M)
  return "\n".join(pins) + "\n"


def ensure_venv(venv: str) -> str:
  """VENV's python, creating VENV when missing; refuses a venv of another Python version."""
  python = os.path.join(venv, "bin", "python")
  if not os.path.exists(python):
    print(f"Creating a virtual environment in {venv}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
  version = subprocess.run(
    [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
    check=True,
    capture_output=True,
    text=True,
  ).stdout.strip()
  wanted = "%d.%d" % sys.version_info[:2]
  if version != wanted:
    raise SystemExit(
      f"{venv} runs Python {version}, but the wheels were built for {wanted} (profiling's "
      f"extension is compiled for it): use a new VENV path, or build with PYTHON_BIN_PATH "
      f"pointing at a Python {version}."
    )
  return python


def main(argv: list[str]) -> int:
  if len(argv) < 2 or argv[1].startswith("-"):
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    return 2
  python = ensure_venv(user_paths.resolve(argv[1]))
  with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="pax-constraints-") as pins:
    pins.write(constraints(_LOCK))
    pins.flush()
    subprocess.run(
      [python, "-m", "pip", "install", "-c", pins.name, *argv[2:], *wheels()], check=True
    )
  bin_dir = os.path.dirname(python)
  print(
    f"Installed. Try:\n  {bin_dir}/python -m paxml.main --exp=demo.SyntheticDemoLm "
    f"--job_log_dir=/tmp/pax_synthetic\n  {bin_dir}/pgle --help"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
