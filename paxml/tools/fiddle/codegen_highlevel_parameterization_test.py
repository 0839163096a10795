"""Tests of the high-level parameterization pass: traced settings inside a config become
`self.<setting>` in the generated fixture, and are recorded."""

from absl.testing import absltest
from fiddle._src.codegen.auto_config import ir_printer
from paxml.tools.fiddle import codegen
from paxml.tools.fiddle import codegen_highlevel_parameterization as highlevel
from paxml.tools.fiddle import codegen_pax_code_ir
from paxml.tools.fiddle import codegen_tracer


class HighlevelParameterizationTest(absltest.TestCase):
  def test_settings_become_self_attributes(self):
    layers = codegen_tracer.make_tracer("NUM_LAYERS", 6)
    task = codegen.InitTask()({"layers": layers, "dims": [layers, 3]})
    self.assertIsInstance(task, codegen_pax_code_ir.PaxCodegenTask)
    highlevel.HighlevelParameterization(lowercasing=True)(task)
    fn = task.top_level_call.fn
    self.assertEqual(fn.parameters[0].name.value, "self")
    self.assertEqual(
      ir_printer.format_expr(fn.output_value),
      '{"layers": self.num_layers, "dims": [self.num_layers, 3]}',
    )
    self.assertEqual(list(task.highlevel_accesses), ["num_layers"])
    self.assertEqual(task.highlevel_accesses["num_layers"], 6)

  def test_needs_a_pax_task(self):
    with self.assertRaisesRegex(TypeError, "PaxCodegenTask"):
      highlevel.HighlevelParameterization()(object())


if __name__ == "__main__":
  absltest.main()
