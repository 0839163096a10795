from absl.testing import absltest

from profiling import hlo_text

# Shaped like `compile().as_text()` of a GPU module after the latency-hiding scheduler.
_MODULE = """\
HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%add.clone (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.1 = f32[] add(f32[] %x, f32[] %y)
}

%fused_computation (param_0: f32[8]) -> f32[8] {
  %param_0 = f32[8]{0} parameter(0)
  ROOT %multiply.2 = f32[8]{0} multiply(f32[8]{0} %param_0, f32[8]{0} %param_0)
}

ENTRY %main.9 (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %c = f32[] constant(0)
  %all-reduce-start = (f32[8]{0}, f32[8]{0}) all-reduce-start(f32[8]{0} %p), to_apply=%add.clone
  %all-reduce-done = f32[8]{0} all-reduce-done((f32[8]{0}, f32[8]{0}) %all-reduce-start)
  %fusion = f32[8]{0} fusion(f32[8]{0} %all-reduce-done), kind=kLoop, calls=%fused_computation
  ROOT %copy.3 = f32[8]{0} copy(f32[8]{0} %fusion), frontend_attributes={fingerprint_before_lhs="9f8e7d"}
}
"""


class HloTextTest(absltest.TestCase):
  def test_scheduled_instructions_exclude_free_ops_and_called_computations(self):
    summary = hlo_text.summarize(_MODULE)
    self.assertEqual(
      summary.scheduled,
      {
        "all-reduce-start": "all-reduce-start",
        "all-reduce-done": "all-reduce-done",
        "fusion": "fusion",
        "copy.3": "copy",
      },
    )
    self.assertIn("multiply.2", summary.all_names)
    self.assertEqual(summary.fingerprint, "9f8e7d")

  def test_without_percent_signs_and_fingerprint(self):
    text = _MODULE.replace("%", "").replace(
      ', frontend_attributes={fingerprint_before_lhs="9f8e7d"}', ""
    )
    summary = hlo_text.summarize(text)
    self.assertEqual(
      set(summary.scheduled), {"all-reduce-start", "all-reduce-done", "fusion", "copy.3"}
    )
    self.assertIsNone(summary.fingerprint)


if __name__ == "__main__":
  absltest.main()
