"""make_wheel: the archive pip reads, checked with the standard library's zip and email parsers."""

import base64
import email.parser
import hashlib
import json
import os
import sys
import tempfile
import unittest
import zipfile

from build_defs import make_wheel


class CompatibleRangeTest(unittest.TestCase):
  def test_major_bounds_the_range_from_one_on(self):
    self.assertEqual(make_wheel.compatible_range("2.21.0"), ">=2.21.0,<3")
    self.assertEqual(make_wheel.compatible_range("7.36"), ">=7.36,<8")

  def test_zero_major_stops_at_the_next_minor(self):
    self.assertEqual(make_wheel.compatible_range("0.10.2"), ">=0.10.2,<0.11")
    self.assertEqual(make_wheel.compatible_range("0.0.20"), ">=0.0.20,<0.1")

  def test_post_and_dev_suffixes_keep_the_pin_inside(self):
    self.assertEqual(make_wheel.compatible_range("2025.3.post1"), ">=2025.3.post1,<2026")


class ExcludedTest(unittest.TestCase):
  def test_tests_and_leftovers(self):
    for path in ("praxis/layers/linears_test.py", "paxml/conftest.py"):
      self.assertEqual(make_wheel.excluded(path), "a test file")
    for path in ("praxis/__pycache__/x.cpython-311.pyc", "praxis/BUILD", "praxis/x.py.orig"):
      self.assertEqual(make_wheel.excluded(path), "a build leftover")

  def test_modules_and_extensions_ship(self):
    for path in ("praxis/layers/linears.py", "profiling/native/_pgle.so", "paxml/test_lib.py"):
      self.assertIsNone(make_wheel.excluded(path))


class ImportsTest(unittest.TestCase):
  def test_absolute_imports_at_any_depth(self):
    source = (
      "import jax.numpy as jnp\nfrom flax import linen\nfrom . import sibling\n"
      "def f():\n  import tensorflow as tf\n  from seqio import vocab\n"
    )
    self.assertEqual(
      make_wheel.imported_modules(source, "m.py"), {"jax", "flax", "tensorflow", "seqio"}
    )


class BuildTest(unittest.TestCase):
  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()

  def _write(self, name, text):
    path = os.path.join(self.dir, name)
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)
    return path

  def _spec(self, **overrides):
    lock = self._write(
      "lock.txt",
      "absl-py==2.5.1 \\\n    --hash=sha256:00\n    # via -r requirements.in\n"
      "jax==0.10.2 \\\n    --hash=sha256:11\nflax==0.12.8 \\\n    --hash=sha256:22\n",
    )
    spec = {
      "distribution": "mylib",
      "version": "1.5.0",
      "summary": "A test library.",
      "license": "Apache-2.0",
      "requires_python": ">=3.11",
      "readme": self._write("README.md", "# mylib\n\nUse it.\n"),
      "license_file": self._write("LICENSE", "License text.\n"),
      "packages": ["mylib"],
      "files": [
        [self._write("init.py", "from absl import app\n"), "mylib/__init__.py"],
        [self._write("cli.py", "import jax\ndef main():\n  pass\n"), "mylib/cli.py"],
        [self._write("cli_test.py", "import flax\n"), "mylib/cli_test.py"],
      ],
      "pypi": [
        {"name": "absl_py", "modules": ["absl"]},
        {"name": "jax", "modules": ["jax"]},
        {"name": "flax", "modules": ["flax"]},  # Imported only by the test: not required.
      ],
      "wheels": [{"distribution": "otherlib"}],
      "lock": lock,
      "entry_points": {"console_scripts": {"mylib-cli": "mylib.cli:main"}},
      "platform_specific": False,
    }
    spec.update(overrides)
    return spec

  def test_wheel_layout_metadata_and_record(self):
    wheel = make_wheel.build(self._spec(), os.path.join(self.dir, "out"))
    self.assertEqual(os.path.basename(wheel), "mylib-1.5.0-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
      names = archive.namelist()
      info = "mylib-1.5.0.dist-info/"
      self.assertEqual(
        names,
        ["mylib/__init__.py", "mylib/cli.py"]
        + [info + n for n in ("LICENSE", "METADATA", "WHEEL", "entry_points.txt", "RECORD")],
      )
      meta = email.parser.Parser().parsestr(archive.read(info + "METADATA").decode())
      self.assertEqual(meta["Name"], "mylib")
      self.assertEqual(meta["Version"], "1.5.0")
      self.assertEqual(
        meta.get_all("Requires-Dist"), ["otherlib==1.5.0", "absl-py>=2.5.1,<3", "jax>=0.10.2,<0.11"]
      )
      self.assertIn("Use it.", meta.get_payload())
      self.assertIn("Tag: py3-none-any", archive.read(info + "WHEEL").decode())
      self.assertIn("mylib-cli = mylib.cli:main", archive.read(info + "entry_points.txt").decode())

      rows = [r.split(",") for r in archive.read(info + "RECORD").decode().splitlines()]
      self.assertEqual(sorted(r[0] for r in rows), sorted(names))
      for path, digest, size in rows:
        if path == info + "RECORD":
          self.assertEqual((digest, size), ("", ""))
          continue
        data = archive.read(path)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.assertEqual(digest, "sha256=" + expected, path)
        self.assertEqual(int(size), len(data), path)

  def test_same_inputs_same_bytes(self):
    first = make_wheel.build(self._spec(), os.path.join(self.dir, "a"))
    second = make_wheel.build(self._spec(), os.path.join(self.dir, "b"))
    with open(first, "rb") as a, open(second, "rb") as b:
      self.assertEqual(a.read(), b.read())

  def test_extension_wheel_is_tagged_for_this_interpreter(self):
    wheel = make_wheel.build(self._spec(platform_specific=True), os.path.join(self.dir, "out"))
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    self.assertTrue(os.path.basename(wheel).startswith(f"mylib-1.5.0-{py}-{py}-"), wheel)

  def test_a_dependency_the_lock_does_not_pin_is_an_error(self):
    spec = self._spec(pypi=[{"name": "jaxx", "modules": ["jax"]}])
    with self.assertRaisesRegex(SystemExit, "pins no such distribution"):
      make_wheel.build(spec, os.path.join(self.dir, "out"))

  def test_an_entry_point_into_a_missing_module_is_an_error(self):
    spec = self._spec(entry_points={"console_scripts": {"x": "mylib.nope:main"}})
    with self.assertRaisesRegex(SystemExit, "no module mylib/nope"):
      make_wheel.build(spec, os.path.join(self.dir, "out"))

  def test_a_file_outside_the_packages_is_an_error(self):
    spec = self._spec()
    spec["files"].append([spec["readme"], "elsewhere/README.md"])
    with self.assertRaisesRegex(SystemExit, "outside mylib's packages"):
      make_wheel.build(spec, os.path.join(self.dir, "out"))

  def test_main_reads_a_json_spec(self):
    spec_path = self._write("spec.json", json.dumps(self._spec()))
    out = os.path.join(self.dir, "main")
    self.assertEqual(make_wheel.main(["make_wheel.py", spec_path, out]), 0)
    self.assertEqual(os.listdir(out), ["mylib-1.5.0-py3-none-any.whl"])


if __name__ == "__main__":
  unittest.main()
