"""The wheels install into a fresh virtual environment and work there, outside Bazel, offline.

The venv sees the pinned stack Bazel already fetched (the @pypi distributions the wheels' targets
depend on, from this test's runfiles, through a .pth file) and gets the three wheels with
`pip install --no-deps --no-index`: nothing is downloaded. Then, from a directory outside the
repo and with no Bazel environment: `pip check`; user_script.py (a pax_fiddle layer, a Pax-style
experiment trained a few steps through paxml's API, a profiler trace); `python -m paxml.main` on
the data-free demo experiment; the `paxml-main` and `pgle` commands. Separately, without a venv:
what the archives hold (no tests or build leftovers, a RECORD that matches) and that every module
of the source tree is in a wheel.
"""

import base64
import csv
import email.parser
import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
from unittest import mock
import zipfile

from wheels import install

_RUNFILES = os.path.abspath(os.environ["TEST_SRCDIR"])
_REPO = os.path.join(_RUNFILES, os.environ["TEST_WORKSPACE"])
_PACKAGES = {"praxis": "praxis", "paxml": "paxml", "profiling": "pax_profiling"}
# Modules of the source tree that no wheel ships, and why. Everything else must be in one.
_NOT_SHIPPED = {
  "paxml/testing/": "test helpers (testonly)",
  "paxml/benchmarks/": "benchmarks, run from the repo",
  "profiling/benchmarks/": "benchmarks, run from the repo",
  "profiling/cpu_trace.py": "test helper (testonly)",
  "profiling/trace_relabel.py": "test helper (testonly)",
}


def _wheels() -> dict[str, str]:
  found = {}
  for target, dist in _PACKAGES.items():
    (path,) = glob.glob(os.path.join(_REPO, "wheels", target, f"{dist}-*.whl"))
    found[target] = path
  assert sorted(found.values()) == install.wheels(), "install.py would install other files"
  return found


def _source_root() -> str:
  """The checkout the runfiles link to: the tree whose modules the wheels must hold."""
  return os.path.dirname(
    os.path.dirname(os.path.realpath(os.path.join(_REPO, "praxis", "__init__.py")))
  )


class ArchiveTest(unittest.TestCase):
  def test_no_tests_or_build_leftovers(self):
    for name, wheel in _wheels().items():
      with zipfile.ZipFile(wheel) as archive:
        for path in archive.namelist():
          base = os.path.basename(path)
          self.assertFalse(base.endswith("_test.py") or base == "conftest.py", f"{name}: {path}")
          self.assertNotIn("__pycache__", path, name)
          self.assertNotIn(base, ("BUILD", "BUILD.bazel"), name)
          self.assertFalse(
            base.endswith((".pyc", ".bzl", ".cc", ".h", ".params")), f"{name}: {path}"
          )
          self.assertNotIn(".runfiles", path, name)

  def test_record_lists_every_file_with_its_sha256(self):
    for name, wheel in _wheels().items():
      with zipfile.ZipFile(wheel) as archive:
        (record,) = [p for p in archive.namelist() if p.endswith(".dist-info/RECORD")]
        rows = list(csv.reader(io.StringIO(archive.read(record).decode())))
        self.assertEqual(sorted(r[0] for r in rows), sorted(archive.namelist()), name)
        for path, digest, _ in rows:
          if path != record:
            data = hashlib.sha256(archive.read(path)).digest()
            expected = "sha256=" + base64.urlsafe_b64encode(data).rstrip(b"=").decode()
            self.assertEqual(digest, expected, f"{name}: {path}")

  def test_requirements_are_ranges_around_the_lock(self):
    with open(os.path.join(_REPO, "third_party", "py", "requirements_lock.txt")) as f:
      pins = dict(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", f.read(), re.M))
    for name, wheel in _wheels().items():
      with zipfile.ZipFile(wheel) as archive:
        (meta,) = [p for p in archive.namelist() if p.endswith(".dist-info/METADATA")]
        requires = (
          email.parser.Parser().parsestr(archive.read(meta).decode()).get_all("Requires-Dist")
        )
      self.assertIn("jax>=" + pins["jax"] + ",<", " ".join(requires), name)
      for requirement in requires:
        dist = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        if dist in ("praxis", "pax-profiling"):
          continue
        self.assertIn(f"{dist}>={pins[dist]},<", requirement, name)

  def test_every_module_of_the_tree_is_in_a_wheel(self):
    shipped = set()
    for wheel in _wheels().values():
      with zipfile.ZipFile(wheel) as archive:
        shipped.update(archive.namelist())
    root = _source_root()
    missing = []
    for top in ("praxis", "paxml", "profiling", "t5"):
      for directory, _, files in os.walk(os.path.join(root, top)):
        for base in files:
          path = os.path.relpath(os.path.join(directory, base), root)
          if not base.endswith(".py") or base.endswith("_test.py"):
            continue
          if any(path.startswith(prefix) for prefix in _NOT_SHIPPED) or path in shipped:
            continue
          missing.append(path)
    self.assertEqual(
      missing,
      [],
      "modules no wheel ships: add their package's :sources to `srcs` of the wheel in "
      "wheels/BUILD (or list them in _NOT_SHIPPED here with the reason)",
    )


class InstalledTest(unittest.TestCase):
  """One venv for all: created once, then each test runs commands in it."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    cls.venv = os.path.join(cls.tmp, "venv")
    cls.cwd = os.path.join(cls.tmp, "user")  # Outside the repo: nothing of it on sys.path.
    os.makedirs(cls.cwd)
    cls.env = {
      "PATH": os.path.join(cls.venv, "bin") + ":/usr/bin:/bin",
      "HOME": cls.tmp,
      "JAX_PLATFORMS": "cpu",
      "TF_CPP_MIN_LOG_LEVEL": "2",
      "PIP_NO_INDEX": "1",
      "PIP_DISABLE_PIP_VERSION_CHECK": "1",
      "PIP_NO_CACHE_DIR": "1",
    }
    # The README's command (install.py): a venv of the Python that built profiling's extension,
    # the wheels installed into it; --no-deps and no index, so pip fetches nothing.
    with mock.patch.dict(os.environ, cls.env, clear=True):
      install.main(["install.py", cls.venv, "--no-deps"])
    (site,) = glob.glob(os.path.join(cls.venv, "lib", "python3*", "site-packages"))
    with open(os.path.join(site, "pinned_stack.pth"), "w") as f:
      f.write(os.path.join(_RUNFILES, "pypi", "site") + "\n")

  @classmethod
  def run_in_venv(cls, *argv, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run(
      argv, cwd=cls.cwd, env=cls.env, capture_output=True, text=True, timeout=600
    )
    if check and result.returncode != 0:
      raise AssertionError(f"{argv} exited {result.returncode}:\n{result.stderr[-4000:]}")
    return result

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def test_pip_check_is_clean(self):
    result = self.run_in_venv("python", "-m", "pip", "check")
    self.assertIn("No broken requirements found", result.stdout)
    listed = self.run_in_venv("python", "-m", "pip", "list", "--format=json").stdout
    versions = {d["name"]: d["version"] for d in json.loads(listed)}
    self.assertEqual(versions["praxis"], versions["paxml"])
    self.assertEqual(versions["pax-profiling"], versions["paxml"])

  def test_user_script_trains_from_the_installed_packages(self):
    script = os.path.join(self.cwd, "my_experiment.py")
    shutil.copyfile(os.path.join(_REPO, "wheels", "user_script.py"), script)
    job_log_dir = os.path.join(self.cwd, "job")
    trace_dir = os.path.join(self.cwd, "trace")
    result = self.run_in_venv("python", script, job_log_dir, trace_dir)
    (line,) = [l for l in result.stdout.splitlines() if l.startswith("RESULT ")]
    out = json.loads(line[len("RESULT ") :])
    for module in ("praxis_file", "paxml_file"):
      self.assertTrue(out[module].startswith(self.venv), out[module])
    self.assertEqual(out["step"], 3)
    self.assertLess(out["loss"], 4.2)  # ln(64) = 4.16 at the start; Pax's rows are all ones.
    self.assertIn("checkpoint_00000003", out["checkpoints"])

    # The `pgle` command on the trace the script took (on CPU: the host plane, --include_host).
    profile = os.path.join(self.cwd, "profile.pbtxt")
    convert = self.run_in_venv("pgle", "convert", trace_dir, "-o", profile, "--include_host")
    self.assertIn("wrote", convert.stdout)
    with open(profile) as f:
      self.assertTrue(f.read().startswith("costs {"))
    report = self.run_in_venv("pgle", "report", profile)
    self.assertIn("cost", report.stdout)

  def test_python_m_paxml_main_trains_the_synthetic_demo(self):
    job_log_dir = os.path.join(self.cwd, "synthetic")
    result = self.run_in_venv(
      "python",
      "-m",
      "paxml.main",
      "--exp=demo.SyntheticDemoLm",
      f"--job_log_dir={job_log_dir}",
      "--fdl.NUM_TRAIN_STEPS=4",
      "--fdl.EVAL_INTERVAL_STEPS=4",
    )
    self.assertIn("Finished at step 4", result.stderr)
    self.assertTrue(os.path.isdir(os.path.join(job_log_dir, "checkpoints", "checkpoint_00000004")))

  def test_paxml_main_command_names_the_experiment_it_cannot_find(self):
    result = self.run_in_venv("paxml-main", "--exp=does.not.Exist", "--job_log_dir=x", check=False)
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    self.assertIn("no experiment named 'does.not.Exist'", result.stderr)


if __name__ == "__main__":
  unittest.main()
