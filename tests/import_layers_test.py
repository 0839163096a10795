"""The packages import downwards only, without cycles; the two faces never import each other.

The layering, bottom first (a module may import its own layer's modules and those below):

  hostenv                                  process facts (user paths, the quiet TensorFlow import)
  praxis | profiling | t5                  each on hostenv only, never on each other
  paxml core                               paxml/ without the faces and the tools
  paxml.toolkit | paxml.experiment_api     bobbin's and JAXline's faces over paxml core; neither
                                           imports the other
  tools                                    benchmarks, command-line tools, integration tests,
                                           wheels: may import anything

Every `.py` file of the repository is read with `ast` (nothing is imported). Tests (`*_test.py`)
are held to their package's layer as well, so a test cannot smuggle a face into the core. A cycle
is looked for among module-level imports (an import inside a function runs late and cannot close
an import-time cycle, so it is left out of that check, not of the layering).
"""

import ast
import os

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OURS = ("hostenv", "praxis", "profiling", "t5", "paxml")

# (module prefix, layer name), most specific prefix first.
_LAYER_OF_PREFIX = (
  ("paxml.toolkit", "toolkit"),
  ("paxml.experiment_api", "experiment_api"),
  ("paxml.benchmarks", "tools"),
  ("paxml.tools", "tools"),
  ("profiling.benchmarks", "tools"),
  ("hostenv", "hostenv"),
  ("praxis", "praxis"),
  ("profiling", "profiling"),
  ("t5", "t5"),
  ("paxml", "paxml"),
)
_CORE = {"hostenv", "praxis", "profiling", "t5", "paxml"}
# What each layer may import (besides modules outside the repository).
_MAY_IMPORT = {
  "hostenv": {"hostenv"},
  "praxis": {"hostenv", "praxis"},
  "profiling": {"hostenv", "profiling"},
  "t5": {"hostenv", "t5"},
  "paxml": _CORE,
  "toolkit": _CORE | {"toolkit"},
  "experiment_api": _CORE | {"experiment_api"},
  "tools": _CORE | {"toolkit", "experiment_api", "tools"},
}


def layer_of(module: str) -> str | None:
  """The layer of a dotted module name of ours, or None for a module outside the repository."""
  for prefix, layer in _LAYER_OF_PREFIX:
    if module == prefix or module.startswith(prefix + "."):
      return layer
  return None


def _module_name(relpath: str) -> str:
  parts = relpath[: -len(".py")].split(os.sep)
  if parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts)


def find_modules(root: str) -> dict[str, str]:
  """Dotted name -> file path of every .py file under our top-level packages and tests/."""
  modules = {}
  for top in _OURS + ("tests", "tools", "wheels"):
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
      dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
      for filename in sorted(filenames):
        if filename.endswith(".py"):
          path = os.path.join(dirpath, filename)
          modules[_module_name(os.path.relpath(path, root))] = path
  return modules


def _resolve(name: str, modules: dict[str, str]) -> str | None:
  """The longest prefix of `name` that is one of our modules (`a.b.C` -> module `a.b`)."""
  parts = name.split(".")
  for n in range(len(parts), 0, -1):
    candidate = ".".join(parts[:n])
    if candidate in modules:
      return candidate
  return None


def imports_of(module: str, source: str, modules: dict[str, str]) -> list[tuple[str, int, bool]]:
  """(imported module of ours, line, at module level) for each import statement in `source`."""
  found = []
  is_package = modules[module].endswith("__init__.py")

  def visit(node: ast.AST, top_level: bool) -> None:
    for child in ast.iter_child_nodes(node):
      inner = top_level and not isinstance(
        child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
      )
      names = []
      if isinstance(child, ast.Import):
        names = [alias.name for alias in child.names]
      elif isinstance(child, ast.ImportFrom):
        base = child.module or ""
        if child.level:  # Relative: from the module's package upwards.
          package = module.split(".") if is_package else module.split(".")[:-1]
          package = package[: len(package) - (child.level - 1)]
          base = ".".join(package + ([base] if base else []))
        # `from a import b` imports module a.b when there is one, else a name of a (_resolve).
        names = [f"{base}.{alias.name}" for alias in child.names]
      for name in names:
        target = _resolve(name, modules)
        if target is not None and target != module:
          found.append((target, child.lineno, top_level))
      visit(child, inner)

  visit(ast.parse(source), True)
  return found


def import_graph(root: str) -> tuple[dict[str, str], dict[str, list[tuple[str, int, bool]]]]:
  modules = find_modules(root)
  graph = {}
  for module, path in modules.items():
    with open(path, encoding="utf-8") as f:
      graph[module] = imports_of(module, f.read(), modules)
  return modules, graph


def layering_violations(graph: dict[str, list[tuple[str, int, bool]]]) -> list[str]:
  out = []
  for module, imports in sorted(graph.items()):
    layer = layer_of(module)
    if layer is None:  # tests/, tools/, wheels/: the top.
      continue
    for target, line, _ in imports:
      target_layer = layer_of(target)
      if target_layer is not None and target_layer not in _MAY_IMPORT[layer]:
        out.append(f"{module}:{line} ({layer}) imports {target} ({target_layer})")
  return out


def find_cycle(graph: dict[str, list[tuple[str, int, bool]]]) -> list[str] | None:
  """One cycle of module-level imports, as the list of modules on it, or None."""
  edges = {m: sorted({t for t, _, top in imports if top}) for m, imports in graph.items()}
  state = {}  # module -> 1 on the current path, 2 done.
  path = []

  def visit(module: str) -> list[str] | None:
    state[module] = 1
    path.append(module)
    for target in edges.get(module, ()):
      if state.get(target) == 1:
        return path[path.index(target) :] + [target]
      if target not in state:
        cycle = visit(target)
        if cycle:
          return cycle
    path.pop()
    state[module] = 2
    return None

  for module in sorted(edges):
    if module not in state:
      cycle = visit(module)
      if cycle:
        return cycle
  return None


class ImportLayersTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.modules, cls.graph = import_graph(_ROOT)

  def test_the_walk_sees_the_repository(self):
    for module in (
      "hostenv.user_paths",
      "paxml.trainer",
      "paxml.toolkit.training",
      "praxis.base_layer",
    ):
      self.assertIn(module, self.modules)
    self.assertIn(
      ("paxml.checkpoints", True), {(t, top) for t, _, top in self.graph["paxml.trainer"]}
    )

  def test_no_upward_or_sideways_package_import(self):
    violations = layering_violations(self.graph)
    self.assertEmpty(
      violations,
      "imports against the layering in this file's docstring; move the shared code down into the "
      "lower package (a service both faces need belongs in paxml core):\n  "
      + "\n  ".join(violations),
    )

  def test_no_import_cycle(self):
    cycle = find_cycle(self.graph)
    self.assertIsNone(
      cycle,
      f"module-level import cycle {' -> '.join(cycle or [])}: move what both need into a "
      "third module, or import one of them inside the function that uses it",
    )


class CheckerTest(absltest.TestCase):
  """The checks themselves catch what they are for, on small made-up graphs."""

  def test_layers(self):
    self.assertEqual(layer_of("paxml.toolkit.cron"), "toolkit")
    self.assertEqual(layer_of("paxml.triggers"), "paxml")
    self.assertEqual(layer_of("hostenv"), "hostenv")
    self.assertIsNone(layer_of("jax.numpy"))
    self.assertIsNone(layer_of("paxmlx"))

  def test_upward_and_sideways_imports_are_reported(self):
    graph = {
      "praxis.a": [("paxml.b", 3, True)],
      "paxml.toolkit.c": [("paxml.experiment_api.d", 5, False)],
      "t5.e": [("profiling.f", 1, True)],
      "paxml.g": [("praxis.a", 1, True), ("hostenv.user_paths", 2, True)],
    }
    self.assertEqual(
      layering_violations(graph),
      [
        "paxml.toolkit.c:5 (toolkit) imports paxml.experiment_api.d (experiment_api)",
        "praxis.a:3 (praxis) imports paxml.b (paxml)",
        "t5.e:1 (t5) imports profiling.f (profiling)",
      ],
    )

  def test_cycle_of_module_level_imports_only(self):
    graph = {"a": [("b", 1, True)], "b": [("c", 1, True)], "c": [("a", 9, False)]}
    self.assertIsNone(find_cycle(graph))
    graph["c"] = [("a", 9, True)]
    self.assertEqual(find_cycle(graph), ["a", "b", "c", "a"])

  def test_from_import_of_a_module_and_of_a_name(self):
    modules = {"p": "p/__init__.py", "p.m": "p/m.py", "p.n": "p/n.py"}
    source = "from p import m\nfrom p.m import thing\ndef f():\n  import p.n\n"
    self.assertEqual(
      imports_of("x", source, {**modules, "x": "x.py"}),
      [("p.m", 1, True), ("p.m", 2, True), ("p.n", 4, False)],
    )


if __name__ == "__main__":
  absltest.main()
