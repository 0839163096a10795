"""Pax's additions to Fiddle's code-generation IR: a task that also records the high-level
settings the generated fixtures read, and an optional module re-adding sharding."""

import dataclasses
from typing import Any

from fiddle._src.codegen.auto_config import code_ir
import libcst as cst


@dataclasses.dataclass
class PaxCodegenTask(code_ir.CodegenTask):
  """`highlevel_accesses`: {attribute name: traced value} of the settings the fixtures read
  (they become fields of the generated class). `sharding_diff_module`: generated code of a
  fiddler that puts the model's sharding back, when sharding is factored out."""

  highlevel_accesses: dict[str, Any] = dataclasses.field(default_factory=dict)
  sharding_diff_module: cst.Module | None = None
