"""Rewrites BUILD files written with native py_*/cc_* rules onto the //build_defs macros.

  python3 tools/build_to_macros.py . paxml/foo/BUILD ...

Drops what the macros fold in (the package __init__ dep, absl/flax/jax/numpy, a test's library,
default srcs/hdrs, gtest_main and errors.h for C++), turns env XLA_FLAGS device counts into
cpu_devices, and adds the load() lines. Review the diff: comments inside rules are kept, but a
rule it does not understand is left as it was.
"""

import re
import sys
import pathlib

ROOT = pathlib.Path(sys.argv[1])
PY = {"py_library": "pax_py_library", "py_test": "pax_py_test", "py_binary": "pax_py_binary"}
CC = {"cc_library": "pax_cc_library", "cc_test": "pax_cc_test"}
START = re.compile(r"^(py_library|py_test|py_binary|cc_library|cc_test)\($")


def parse_block(lines):
  attrs = []  # (key, [lines]) ; comments as ('#', [line])
  for ln in lines:
    m = re.match(r"^    (\w+) = ", ln)
    if m:
      attrs.append([m.group(1), [ln]])
    elif ln.startswith("    #") and (not attrs or attrs[-1][1][-1].rstrip().endswith(",")):
      attrs.append(["#", [ln]])
    else:
      attrs[-1][1].append(ln)
  return attrs


def list_items(attr_lines):
  """Returns items (each a list of lines) of a multi-line list attr, or None if inline."""
  if len(attr_lines) == 1:
    m = re.match(r"^    \w+ = \[(.*)\],(.*)$", attr_lines[0])
    if not m:
      return None
    inner = m.group(1).strip()
    if not inner:
      return []
    return [[f"        {x.strip()},"] for x in inner.split(",") if x.strip()]
  items = []
  for ln in attr_lines[1:-1]:
    items.append([ln])
  return items


def emit_list(key, items):
  if not items:
    return []
  if len(items) == 1 and len(items[0]) == 1 and "#" not in items[0][0]:
    return [f"    {key} = [{items[0][0].strip().rstrip(',')}],"]
  out = [f"    {key} = ["]
  for it in items:
    out += it
  out.append("    ],")
  return out


def init_kind(text, base):
  """Return 'plain' or 'exports' or None for the package init target."""
  m = re.search(
    r'py_library\(\n    name = "%s",\n    srcs = \["__init__.py"\],\n(.*?)^\)' % re.escape(base),
    text,
    re.S | re.M,
  )
  if not m:
    return None
  body = m.group(1)
  return "exports" if re.search(r'"(:[^"]+)"', body) else "plain"


def convert(path):
  pkg = str(path.parent.relative_to(ROOT))
  base = pkg.split("/")[-1]
  parent = "/".join(pkg.split("/")[:-1])
  text = path.read_text()
  kind = init_kind(text, base)
  if kind == "plain":
    init = f":{base}"
  else:
    init = f"//{parent}" if parent else None
  drop_init = set()
  if init:
    if init.startswith(":"):
      drop_init = {f'"{init}"', f'"//{pkg}"', f'"//{pkg}:{base}"'}
    else:
      p = init[2:]
      pb = p.split("/")[-1]
      drop_init = {f'"{init}"', f'"{init}:{pb}"'}
  parent_init = {f'"//{parent}"', f'"//{parent}:{parent.split("/")[-1]}"'} if parent else set()
  lines = text.split("\n")
  out = []
  i = 0
  used = set()
  declared = set()
  while i < len(lines):
    ln = lines[i]
    m = START.match(ln)
    if not m:
      out.append(ln)
      i += 1
      continue
    j = i + 1
    while lines[j] != ")":
      j += 1
    rule = m.group(1)
    attrs = parse_block(lines[i + 1 : j])
    keys = {a[0]: a for a in attrs}
    name = re.match(r'^    name = "(.*)",', keys["name"][1][0]).group(1)
    declared.add(name)
    new = None
    if rule in PY and "srcs" in keys:
      is_init = keys["srcs"][1][0].strip() == 'srcs = ["__init__.py"],' and name == base
      res = []
      for k, al in attrs:
        if k == "name" and is_init:
          continue
        if k == "srcs":
          if is_init:
            continue
          dflt = f'    srcs = ["{name}.py"],'
          if al[0] == dflt and len(al) == 1:
            continue
        if k == "deps":
          items = list_items(al)
          if items is None:
            res.append((k, al))
            continue
          dropset = {'"@pypi//:absl_py"', '"@pypi//:flax"', '"@pypi//:jax"', '"@pypi//:numpy"'} | (
            parent_init if is_init else drop_init
          )
          if rule == "py_test" and name.endswith("_test") and name[:-5] in declared:
            dropset |= {f'":{name[:-5]}"'}
          items = [
            it for it in items if it[0].strip().split("#")[0].strip().rstrip(",") not in dropset
          ]
          res.append((k, emit_list("deps", items)))
          continue
        if k == "env":
          mm = re.match(
            r'^    env = \{"XLA_FLAGS": "--xla_force_host_platform_device_count=(\d+)"\},$', al[0]
          )
          if mm and len(al) == 1:
            res.append((k, [f"    cpu_devices = {mm.group(1)},"]))
            continue
        res.append((k, al))
      fn = "pax_py_package" if is_init else PY[rule]
      used.add(fn)
      body = [l for _, al in res for l in al]
      if not body:
        new = [f"{fn}()"]
      elif len(body) == 1 and body[0].strip().startswith("name = "):
        new = [f"{fn}({body[0].strip().rstrip(',')})"]
      else:
        new = [f"{fn}("] + body + [")"]
    elif rule in CC and "srcs" in keys:
      res = []
      for k, al in attrs:
        if k == "srcs" and al == [f'    srcs = ["{name}.cc"],']:
          continue
        if k == "hdrs" and al == [f'    hdrs = ["{name}.h"],']:
          continue
        if k == "deps":
          items = list_items(al)
          if items is not None:
            drop = {'"//third_party/cc:gtest_main"', '":errors"'}
            if rule == "cc_test" and name.endswith("_test") and name[:-5] in declared:
              drop.add(f'":{name[:-5]}"')
            items = [it for it in items if it[0].strip().rstrip(",") not in drop]
            res.append((k, emit_list("deps", items)))
            continue
        res.append((k, al))
      if rule == "cc_library" and not (
        any(k == "srcs" for k, _ in attrs) and any(k == "hdrs" for k, _ in attrs)
      ):
        new = None
      else:
        fn = CC[rule]
        used.add(fn)
        body = [l for _, al in res for l in al]
        new = [f"{fn}("] + body + [")"]
    if new is None:
      out += lines[i : j + 1]
    else:
      out += new
    i = j + 1
  text = "\n".join(out)
  if used:
    py = sorted(u for u in used if u.startswith("pax_py"))
    cc = sorted(u for u in used if u.startswith("pax_cc"))
    loads = []
    if cc:
      loads.append('load("//build_defs:cc.bzl", %s)' % ", ".join(f'"{u}"' for u in cc))
    if py:
      loads.append('load("//build_defs:py.bzl", %s)' % ", ".join(f'"{u}"' for u in py))
    # insert loads after existing load lines / leading comment block
    tl = text.split("\n")
    k = 0
    while k < len(tl) and (tl[k].startswith("#") or tl[k].startswith("load(")):
      k += 1
    tl = tl[:k] + loads + ([""] if k >= len(tl) or tl[k] != "" else []) + tl[k:]
    if k > 0 and not tl[k - 1].startswith("load(") and tl[k - 1] != "":
      tl.insert(k, "")
    text = "\n".join(tl)
  path.write_text(text)


for p in sys.argv[2:]:
  convert(ROOT / p)
