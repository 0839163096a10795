"""Writes a wheel (PEP 427) from a JSON spec; run by the `py_wheel` rule in build_defs/wheel.bzl.

    make_wheel.py SPEC.json OUTPUT_DIR

SPEC holds what the rule collected from the Bazel graph:
  distribution, version, summary, license, requires_python, readme, license_file
  files             [[source path, path in the wheel], ...]: the library's runfiles under its packages
  pypi              [{"name": normalized lock name, "modules": [top-level import names]}, ...]: the
                    @pypi labels the library's targets depend on
  wheels            [{"distribution": ..., "packages": [...]}, ...]: project wheels it depends on
  lock              the hashed lock (third_party/py/requirements_lock.txt), the one source of versions
  entry_points      {"console_scripts": {"name": "module:function"}}
  platform_specific true when a file is a compiled extension: the tags become this interpreter's

Requires-Dist is generated, never written by hand: a @pypi dependency of the Bazel targets becomes a
requirement when some shipped module imports one of its top-level modules (py.bzl adds jax, flax,
numpy and absl to every target; a wheel that never imports flax should not require it), with the
range `compatible_range` gives around the lock's pin. Project wheels are required at this version.
Test files and build leftovers never go in (`excluded`); the archive is byte-for-byte reproducible.
"""

import ast
import base64
import hashlib
import json
import os
import re
import sys
import sysconfig
import zipfile

# Zip entries get this fixed time so that the same inputs give the same bytes (zip starts at 1980).
_EPOCH = (1980, 1, 1, 0, 0, 0)
_LEFTOVER_NAMES = ("BUILD", "BUILD.bazel", "WORKSPACE")
_LEFTOVER_ENDINGS = (".pyc", ".pyo", ".bzl", ".orig", ".rej", "~", ".swp")


def normalize(name: str) -> str:
  """PEP 503 name normalization with underscores, as the @pypi labels spell names."""
  return re.sub(r"[-_.]+", "_", name).lower()


def excluded(path: str) -> str | None:
  """Why `path` (as in the wheel) must not be shipped, or None when it may."""
  base = os.path.basename(path)
  if base.endswith("_test.py") or base == "conftest.py":
    return "a test file"
  if (
    "__pycache__" in path.split("/") or base in _LEFTOVER_NAMES or base.endswith(_LEFTOVER_ENDINGS)
  ):
    return "a build leftover"
  return None


def read_lock(path: str) -> dict[str, tuple[str, str]]:
  """{normalized name: (name as pinned, version)} from a pip-compile lock file."""
  pins = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line)
      if match:
        pins[normalize(match.group(1))] = (match.group(1), match.group(2))
  return pins


def compatible_range(version: str) -> str:
  """`>=pin,<next breaking release`: the next major, or the next minor while the major is 0.

  Semantic versioning lets 0.x releases break in a minor (jax 0.9 -> 0.10 removed APIs we would
  call), so those ranges stop at the next minor; the pin itself is always inside the range.
  """
  parts = [int(p) for p in re.match(r"^(\d+)(?:\.(\d+))?", version).groups(default="0")]
  upper = f"{parts[0] + 1}" if parts[0] > 0 else f"0.{parts[1] + 1}"
  return f">={version},<{upper}"


def imported_modules(source: str, filename: str) -> set[str]:
  """Top-level names of every absolute import in a module (nested and conditional ones too)."""
  names = set()
  for node in ast.walk(ast.parse(source, filename)):
    if isinstance(node, ast.Import):
      names.update(alias.name.split(".")[0] for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names.add(node.module.split(".")[0])
  return names


def requirements(spec: dict, imports: set[str]) -> list[str]:
  """Requires-Dist lines: project wheels at this version, then third-party ranges from the lock."""
  pins = read_lock(spec["lock"])
  lines = [f"{w['distribution']}=={spec['version']}" for w in spec.get("wheels", [])]
  third_party = []
  for dep in spec.get("pypi", []):
    if not imports & set(dep["modules"]):
      continue  # Declared in BUILD (or folded in by py.bzl) but imported by no shipped module.
    if dep["name"] not in pins:
      raise SystemExit(
        f"@pypi//:{dep['name']} is a dependency of {spec['distribution']}'s targets but "
        f"{spec['lock']} pins no such distribution; add it to third_party/py/requirements.in and "
        "regenerate the lock (third_party/py/README.md)."
      )
    name, version = pins[dep["name"]]
    third_party.append(f"{name}{compatible_range(version)}")
  return lines + sorted(set(third_party), key=str.lower)


def tags(platform_specific: bool) -> str:
  """py3-none-any, or this interpreter's cpXY-cpXY-<platform> for a wheel with an extension."""
  if not platform_specific:
    return "py3-none-any"
  py = f"cp{sys.version_info.major}{sys.version_info.minor}"
  platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
  return f"{py}-{py}-{platform}"


def metadata(spec: dict, requires: list[str]) -> str:
  lines = [
    "Metadata-Version: 2.1",
    f"Name: {spec['distribution']}",
    f"Version: {spec['version']}",
    f"Summary: {spec['summary']}",
    f"License: {spec['license']}",
    f"Requires-Python: {spec['requires_python']}",
  ]
  lines += [f"Classifier: {c}" for c in spec.get("classifiers", [])]
  lines += [f"Requires-Dist: {r}" for r in requires]
  text = ""
  if spec.get("readme"):
    lines.append("Description-Content-Type: text/markdown")
    with open(spec["readme"], encoding="utf-8") as f:
      text = f.read()
  return "\n".join(lines) + "\n\n" + text


def entry_points(groups: dict[str, dict[str, str]]) -> str:
  out = []
  for group in sorted(groups):
    out.append(f"[{group}]")
    out += [f"{name} = {target}" for name, target in sorted(groups[group].items())]
    out.append("")
  return "\n".join(out)


def _record_line(path: str, data: bytes) -> str:
  digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
  return f"{path},sha256={digest},{len(data)}"


def build(spec: dict, output_dir: str) -> str:
  """Writes the wheel into output_dir; returns its path."""
  contents = {}  # path in the wheel -> bytes
  imports = set()
  for source, dest in spec["files"]:
    if excluded(dest):
      continue  # The rule passes whole runfiles trees; tests and leftovers stop here.
    if dest.split("/")[0] not in spec["packages"]:
      raise SystemExit(f"{dest} is outside {spec['distribution']}'s packages {spec['packages']}")
    if dest in contents:
      raise SystemExit(f"{dest} would be written twice into {spec['distribution']}'s wheel")
    with open(source, "rb") as f:
      contents[dest] = f.read()
    if dest.endswith(".py"):
      imports |= imported_modules(contents[dest].decode("utf-8"), dest)
  if not contents:
    raise SystemExit(
      f"{spec['distribution']}'s wheel would be empty: no file under {spec['packages']}"
    )

  for group in spec.get("entry_points", {}).values():
    for name, target in group.items():
      module = target.split(":")[0].replace(".", "/")
      if f"{module}.py" not in contents and f"{module}/__init__.py" not in contents:
        raise SystemExit(f"entry point {name} = {target}: the wheel has no module {module}")

  dist = normalize(spec["distribution"])
  info = f"{dist}-{spec['version']}.dist-info"
  tag = tags(spec.get("platform_specific", False))
  meta = {
    f"{info}/METADATA": metadata(spec, requirements(spec, imports)),
    f"{info}/WHEEL": (
      "Wheel-Version: 1.0\nGenerator: paxml-monorepo build_defs/make_wheel.py\n"
      f"Root-Is-Purelib: {'false' if spec.get('platform_specific') else 'true'}\nTag: {tag}\n"
    ),
  }
  if spec.get("entry_points"):
    meta[f"{info}/entry_points.txt"] = entry_points(spec["entry_points"])
  if spec.get("license_file"):
    with open(spec["license_file"], encoding="utf-8") as f:
      meta[f"{info}/LICENSE"] = f.read()
  for path, text in meta.items():
    contents[path] = text.encode("utf-8")

  record = f"{info}/RECORD"
  lines = [_record_line(path, contents[path]) for path in sorted(contents)] + [f"{record},,"]
  contents[record] = ("\n".join(lines) + "\n").encode("utf-8")

  os.makedirs(output_dir, exist_ok=True)
  wheel = os.path.join(output_dir, f"{dist}-{spec['version']}-{tag}.whl")
  with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
    # The .dist-info goes last and RECORD last of all, as the wheel spec recommends.
    for path in sorted(contents, key=lambda p: (p.startswith(info), p == record, p)):
      entry = zipfile.ZipInfo(path, date_time=_EPOCH)
      executable = path.endswith(".so")
      entry.external_attr = (0o100755 if executable else 0o100644) << 16
      entry.compress_type = zipfile.ZIP_DEFLATED
      archive.writestr(entry, contents[path])
  return wheel


def main(argv: list[str]) -> int:
  if len(argv) != 3:
    print(__doc__.split("\n\n")[0], file=sys.stderr)
    return 2
  with open(argv[1], encoding="utf-8") as f:
    spec = json.load(f)
  build(spec, argv[2])
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
