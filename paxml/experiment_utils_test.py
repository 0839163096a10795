"""Tests of experiment_utils.get_cls_vars_summary and its parser: owners and values of class
variables along an experiment's MRO, read back with ast literals."""

from absl.testing import absltest
from paxml import base_experiment
from paxml import experiment_utils
from paxml import experiment_vars_summary_parser


class _Base(base_experiment.BaseExperiment):
  LAYERS = 2
  NAME = "base"
  DIMS = (8, 16)

  def datasets(self):
    return []

  def task(self):
    return None

  @property
  def derived(self):  # A property: not a variable.
    return self.LAYERS * 2


class _Big(_Base):
  LAYERS = 24
  DROPOUT = 0.1


class SummaryTest(absltest.TestCase):
  def test_owner_is_the_most_derived_definer(self):
    summary = experiment_utils.get_cls_vars_summary(_Big)
    blocks = {b.splitlines()[0]: b.splitlines()[1:] for b in summary.strip().split("\n\n")}
    base = f"{__name__}._Base:"
    big = f"{__name__}._Big:"
    self.assertEqual(list(blocks)[-2:], [base, big])  # Base classes first.
    self.assertEqual(blocks[base], ["    NAME: base", "    DIMS: (8, 16)"])
    self.assertEqual(blocks[big], ["    LAYERS: 24", "    DROPOUT: 0.1"])

  def test_parse_reads_values_back(self):
    parsed = experiment_vars_summary_parser.parse(experiment_utils.get_cls_vars_summary(_Big))
    # Independent reference: the attributes as Python resolves them.
    for name in ("LAYERS", "NAME", "DIMS", "DROPOUT"):
      self.assertEqual(parsed[name], getattr(_Big, name))
    self.assertNotIn("derived", parsed)


if __name__ == "__main__":
  absltest.main()
