"""Codegen pass making generated fixtures methods that read high-level settings from `self`.

Each fixture function gets a `self` parameter; calls of sub-fixtures become `self.<fixture>()`;
every traced value (codegen_tracer: a value read from an experiment attribute), also as a dict
key, becomes `self.<attribute>` (lower-cased with `lowercasing`) and is recorded in the task's
`highlevel_accesses`, so the generated class can declare it as a field.
"""

import dataclasses
from typing import Any

from fiddle import daglish
from fiddle._src.codegen.auto_config import code_ir
from fiddle.codegen.auto_config import experimental_top_level_api
from paxml.tools.fiddle import codegen_pax_code_ir


@dataclasses.dataclass(frozen=True)
class HighlevelParameterization(experimental_top_level_api.CodegenPass):
  """Parameterizes the task's fixtures by the high-level settings object (`self`)."""

  lowercasing: bool = False

  def __call__(self, task: Any, **pass_kwargs: Any) -> Any:
    del pass_kwargs
    if not isinstance(task, codegen_pax_code_ir.PaxCodegenTask):
      raise TypeError(
        f"HighlevelParameterization needs the PaxCodegenTask that codegen.InitTask makes, got "
        f"{type(task).__name__}."
      )
    for fn in task.top_level_call.all_fixture_functions():
      self._parameterize(task, fn)
    return task

  def _setting(self, task, self_name: code_ir.Name, traced: Any) -> code_ir.AttributeExpression:
    """`self.<name>` for a traced value, recording the access."""
    name = traced.__highlevel_name__
    if self.lowercasing:
      name = name.lower()
    task.highlevel_accesses[name] = traced
    return code_ir.AttributeExpression(base=code_ir.VariableReference(self_name), attribute=name)

  def _parameterize(self, task, fn: code_ir.FixtureFunction) -> None:
    self_name = code_ir.Name("self", is_generated=False)
    fn.parameters.insert(0, code_ir.Parameter(self_name))

    def rewrite(value, state: daglish.State):
      value = state.map_children(value)
      if isinstance(value, code_ir.SymbolOrFixtureCall):
        if isinstance(value.symbol_expression, code_ir.FixtureReference):
          # model_fixture() -> self.model_fixture()
          value.symbol_expression = code_ir.AttributeExpression(
            base=code_ir.VariableReference(self_name),
            attribute=value.symbol_expression.name.value,
          )
        return value
      if hasattr(value, "__highlevel_name__"):
        return self._setting(task, self_name, value)
      if isinstance(value, dict):
        # daglish does not visit dict keys; traced keys are rewritten here, order kept.
        return {
          (self._setting(task, self_name, k) if hasattr(k, "__highlevel_name__") else k): v
          for k, v in value.items()
        }
      return value

    fn.replace_with(daglish.MemoizedTraversal.run(rewrite, fn))
