from absl.testing import absltest

from profiling import _pgle
from profiling import reporting

_HLO = """\
HloModule m

%fused (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %neg = f32[4]{0} negate(%a)
}

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %fusion.1 = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused
  %fusion.2 = f32[4]{0} fusion(%fusion.1), kind=kLoop, calls=%fused
  %all-gather.3 = f32[4]{0} all-gather(%fusion.2), dimensions={0}
  ROOT %copy.4 = f32[4]{0} copy(%all-gather.3), frontend_attributes={fingerprint_before_lhs="fp1"}
}
"""


def _profile(costs):
  return _pgle.serialize_profile(costs, False)


class ReportTest(absltest.TestCase):
  def test_top_costs_and_fingerprint_counts(self):
    r = reporting.report(
      _profile([("fp1::fusion.1", 5.0), ("fp1::all-gather.3", 50.0), ("copy.4", 1.0)])
    )
    self.assertEqual([n for n, _ in r.costs], ["fp1::all-gather.3", "fp1::fusion.1", "copy.4"])
    self.assertEqual(r.fingerprints, {"fp1": 2, None: 1})
    self.assertIsNone(r.coverage)
    text = r.format(top=2)
    self.assertIn("3 instruction costs, 56.0 us", text)
    self.assertIn("fp1::all-gather.3", text)
    self.assertNotIn("copy.4", text.split("Top 2 by cost:")[1])

  def test_coverage_counts_matching_and_unprefixed_entries(self):
    r = reporting.report(
      _profile([("fp1::fusion.1", 5.0), ("copy.4", 1.0), ("fp1::all-gather.3", 9.0)]), _HLO
    )
    self.assertEqual(r.module_fingerprint, "fp1")
    self.assertEqual(r.scheduled, 4)  # fusion.1, fusion.2, all-gather.3, copy.4.
    self.assertEqual(r.covered, ("all-gather.3", "copy.4", "fusion.1"))
    self.assertEqual(r.uncovered, ("fusion.2",))
    self.assertAlmostEqual(r.coverage, 0.75)
    self.assertEqual(r.dropped, ())
    self.assertIn("3 of 4 scheduled instructions", r.format())

  def test_other_fingerprint_is_reported_as_dropped(self):
    r = reporting.report(
      _profile([("old::fusion.1", 5.0), ("fp1::fusion.2", 1.0), ("fp1::gone.9", 2.0)]), _HLO
    )
    self.assertEqual(r.dropped, ("old::fusion.1",))
    self.assertEqual(r.covered, ("fusion.2",))
    self.assertEqual(r.unknown, ("gone.9",))
    text = r.format()
    self.assertIn("DROPPED: 1 entries", text)
    self.assertIn("silently ignore", text)

  def test_reads_files_by_extension(self):
    path = self.create_tempfile(
      "p.pbtxt", content=_pgle.serialize_profile([("a", 1.0)], True).decode()
    ).full_path
    self.assertEqual(reporting.report(path).costs, (("a", 1.0),))


if __name__ == "__main__":
  absltest.main()
