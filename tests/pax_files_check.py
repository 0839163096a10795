r"""Builds Pax's own experiment files against this repo and compares them with ours.

Copy Pax's `paxml/tasks/lm/params/{lm_cloud,c4,c4_multislice}.py`, unmodified, into a directory
outside the repo (never commit them), then

  bazel run //tests:pax_files_check -- --pax_dir=/tmp/pax_params [--filter=c4_multislice]

Each file is loaded as `paxml.tasks.lm.params.<name>` (so their imports of each other and of
model_params resolve as in Pax), every experiment it registers is built abstractly
(tools/abstract_build.py), and so is ours of the same name: parameter counts, variable trees
(paths, shapes, dtypes) and batch shapes must be equal. Exits 1 on any difference.
"""

import importlib.util
import os
import sys
from typing import Sequence

from absl import app
from absl import flags
import flax.linen as nn
import jax

from paxml import experiment_registry
from paxml.tasks.lm.params import c4  # noqa: F401  (ours, registered first)
from paxml.tasks.lm.params import c4_multislice  # noqa: F401
from paxml.tasks.lm.params import lm_cloud  # noqa: F401
from paxml.tools import abstract_build

_PAX_DIR = flags.DEFINE_string("pax_dir", None, "Directory holding Pax's experiment files.")
_FILTER = flags.DEFINE_string("filter", "", "Only experiments whose name contains this.")
_MODULES = ("lm_cloud", "c4", "c4_multislice")


def _registered_in(module: str) -> dict[str, type]:
  classes = {n: experiment_registry.get(n) for n in experiment_registry.canonical_names()}
  return {n: cls for n, cls in classes.items() if cls.__module__ == module}


def _load_pax(pax_dir: str) -> dict[str, type]:
  """Pax's files as paxml.tasks.lm.params.*; their registrations replace ours in the registry."""
  found = {}
  # Pax's switch: their classes take our classes' names.
  experiment_registry._ExperimentRegistryHelper._allow_overwrite = True  # pylint: disable=protected-access
  for name in _MODULES:
    path = os.path.join(pax_dir, f"{name}.py")
    module_name = f"paxml.tasks.lm.params.{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    found.update(
      (n, cls)
      for n, cls in _registered_in(module_name).items()
      if getattr(module, cls.__name__, None) is cls
    )
  return found


def _tree(built: abstract_build.Built) -> dict[str, tuple]:
  leaves = jax.tree_util.tree_flatten_with_path(nn.unbox(built.boxed_state.mdl_vars["params"]))[0]
  return {jax.tree_util.keystr(p): (tuple(x.shape), str(x.dtype)) for p, x in leaves}


def compare(ours: type, pax: type) -> str | None:
  """None when equal, else what differs."""
  a, b = abstract_build.build(pax()), abstract_build.build(ours())
  ta, tb = _tree(a), _tree(b)
  if a.num_params == b.num_params and ta == tb and a.batch.ids.shape == b.batch.ids.shape:
    return None
  only = sorted(set(ta) ^ set(tb))[:4]
  shapes = [k for k in ta if k in tb and ta[k] != tb[k]][:4]
  return (
    f"Pax {a.num_params:,} vs ours {b.num_params:,} parameters; paths in one only: {only}; "
    f"shapes differ: {shapes}; batch {a.batch.ids.shape} vs {b.batch.ids.shape}"
  )


def main(argv: Sequence[str]) -> int:
  del argv
  ours = {}
  for name in _MODULES:
    ours.update(_registered_in(f"paxml.tasks.lm.params.{name}"))
  pax = _load_pax(_PAX_DIR.value)
  missing = sorted(set(pax) - set(ours))
  print(f"Pax's files register {len(pax)}, ours {len(ours)}; missing here: {missing}")
  failures = len(missing)
  for name in sorted(n for n in pax if _FILTER.value in n and n in ours):
    diff = compare(ours[name], pax[name])
    failures += diff is not None
    print(f"{'OK  ' if diff is None else 'DIFF'} {name}" + (f": {diff}" if diff else ""))
  print(f"{failures} differences")
  return 1 if failures else 0


if __name__ == "__main__":
  flags.mark_flag_as_required("pax_dir")
  app.run(main)
