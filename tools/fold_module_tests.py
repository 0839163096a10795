"""Folds each module's own test into its pax_py_library declaration (build_defs/py.bzl).

  python3 tools/fold_module_tests.py paxml/BUILD paxml/data/BUILD ...

`pax_py_library(name = "x")` declares `x_test` itself when x_test.py exists, so a separate
`pax_py_test(name = "x_test", deps = [...], size = ...)` becomes `test_deps = [...]`,
`test_size = ...` on the library. A test with its own srcs, or one whose comment block would be
lost, is left as it is and reported. Review the diff.
"""

import ast
import pathlib
import sys

WIDTH = 100


def _kwargs(call):
  return {kw.arg: kw for kw in call.keywords}


def _render(fn, items, text):
  """items: [(key, value node or source string)] -> the call's text, buildifier-like."""
  segs = [(k, v if isinstance(v, str) else ast.get_source_segment(text, v)) for k, v in items]
  one = f"{fn}(" + ", ".join(f"{k} = {s}" for k, s in segs) + ")"
  if len(segs) == 1 and "\n" not in one and len(one) <= WIDTH:
    return one
  lines = [f"{fn}("]
  for k, s in segs:
    line = f"    {k} = {s},"
    if "\n" in s or len(line) <= WIDTH or not s.startswith("["):
      lines.append(line)
      continue
    elts = [x.strip() for x in s[1:-1].split(",") if x.strip()]
    lines += [f"    {k} = ["] + [f"        {e}," for e in elts] + ["    ],"]
  return "\n".join(lines + [")"])


def fold(path):
  text = path.read_text()
  calls = {}
  for node in ast.parse(text).body:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
      call = node.value
      if isinstance(call.func, ast.Name) and "name" in _kwargs(call):
        name = _kwargs(call)["name"].value
        if isinstance(name, ast.Constant):
          calls[name.value] = (call.func.id, node)
  lines = text.split("\n")
  edits = []  # (first line, last line, replacement lines)
  for name, (fn, node) in calls.items():
    lib = calls.get(name[: -len("_test")]) if name.endswith("_test") else None
    if fn != "pax_py_test" or not lib or lib[0] != "pax_py_library":
      continue
    test_kw = _kwargs(node.value)
    above = lines[node.lineno - 2] if node.lineno >= 2 else ""
    if "srcs" in test_kw or above.startswith("#"):
      print(f"{path}: left {name} as it is (own srcs or a comment above it)")
      continue
    lib_name, lib_node = name[: -len("_test")], lib[1]
    items = [(kw.arg, kw.value) for kw in lib_node.value.keywords]
    for kw in node.value.keywords:
      if kw.arg == "deps":
        # The test gets its module through the macro: drop a listed ":<module>".
        own = [
          e for e in kw.value.elts if isinstance(e, ast.Constant) and e.value == ":" + lib_name
        ]
        if own:
          kw.value.elts = [e for e in kw.value.elts if e not in own]
          value = "[" + ", ".join(f'"{e.value}"' for e in kw.value.elts) + "]"
        else:
          value = kw.value
        if kw.value.elts:
          items.append(("test_deps", value))
      elif kw.arg != "name":
        items.append(("test_" + kw.arg, kw.value))
    new = _render("pax_py_library", items, text).split("\n")
    edits.append((lib_node.lineno, lib_node.end_lineno, new))
    last = node.end_lineno
    if last < len(lines) and lines[last] == "":
      last += 1
    elif node.lineno >= 2 and lines[node.lineno - 2] == "":
      edits.append((node.lineno - 1, node.lineno - 1, []))
    edits.append((node.lineno, last, []))
  for first, last, new in sorted(edits, reverse=True):
    lines[first - 1 : last] = new
  path.write_text("\n".join(lines))


if __name__ == "__main__":
  for p in sys.argv[1:]:
    fold(pathlib.Path(p))
