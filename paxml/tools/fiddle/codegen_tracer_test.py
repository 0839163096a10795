"""Tests of codegen_tracer: traced reads keep their values and names; remove_tracers restores
plain types, also nested."""

from absl.testing import absltest
from paxml import base_experiment
from paxml.tools.fiddle import codegen_tracer


class _Exp(base_experiment.BaseExperiment):
  LAYERS = 4
  SHAPE = (2, 3)
  USE_BIAS = False

  @property
  def hidden(self):
    return self.LAYERS * 8

  def datasets(self):
    return []

  def task(self):
    return {
      "layers": self.LAYERS,
      "hidden": self.hidden,
      "shape": self.SHAPE,
      "bias": self.USE_BIAS,
    }


class TracerTest(absltest.TestCase):
  def test_reads_are_named_and_equal(self):
    task = codegen_tracer.make_subclass_mixin(_Exp)().task()
    self.assertEqual(task, {"layers": 4, "hidden": 32, "shape": (2, 3), "bias": False})
    self.assertEqual(task["layers"].__highlevel_name__, "LAYERS")
    self.assertEqual(task["hidden"].__highlevel_name__, "hidden")
    self.assertFalse(task["bias"])
    self.assertEqual(task["layers"] + 1, 5)  # Arithmetic gives plain values.

  def test_remove_tracers(self):
    task = codegen_tracer.make_subclass_mixin(_Exp)().task()
    plain = codegen_tracer.remove_tracers(task)
    self.assertEqual([type(v) for v in plain.values()], [int, int, tuple, bool])
    nested = codegen_tracer.make_tracer("outer", [codegen_tracer.make_tracer("inner", 1.5)])
    self.assertIs(type(codegen_tracer.remove_tracers(nested)[0]), float)

  def test_refuses_other_types(self):
    with self.assertRaisesRegex(ValueError, "not allowed"):
      codegen_tracer.make_tracer("x", {"a": 1})
    with self.assertRaisesRegex(TypeError, "BaseExperiment"):
      codegen_tracer.make_subclass_mixin(int)


if __name__ == "__main__":
  absltest.main()
