"""Pax's experiment code generation on Fiddle's auto_config codegen passes.

So far this holds the first pass, `InitTask`: the Pax flavour of Fiddle's, producing a
`PaxCodegenTask` (which records high-level settings) whose generated module imports
`dataclasses` (generated baselines are dataclasses). Later passes: codegen_highlevel_parameterization
(settings become `self.<name>`), codegen_external_init_checkpoint_fns.
"""

import dataclasses
from typing import Any

from fiddle.codegen.auto_config import experimental_top_level_api
from paxml.tools.fiddle import codegen_pax_code_ir


@dataclasses.dataclass(frozen=True)
class InitTask(experimental_top_level_api.InitTask):
  """Fiddle's InitTask, returning a PaxCodegenTask."""

  def __call__(self, value: Any) -> Any:
    task = super().__call__(value)
    pax_task = codegen_pax_code_ir.PaxCodegenTask(
      original_config=task.original_config, top_level_call=task.top_level_call
    )
    pax_task.import_manager.add_by_name("dataclasses")
    return pax_task
