"""The synthetic test experiments register and are found by their short names."""

from absl.testing import absltest

from paxml import experiment_registry
from paxml.tasks.test import synthetic
from praxis import layers
from praxis import pax_fiddle


class SyntheticTest(absltest.TestCase):
  def test_registered_and_buildable(self):
    for name in ("tasks.test.synthetic.SyntheticClassifier", "test.synthetic.SyntheticClassifier"):
      self.assertIs(experiment_registry.get(name), synthetic.SyntheticClassifier)
    experiment = synthetic.SyntheticClassifier()
    self.assertEqual(experiment.datasets(), [])
    self.assertIsInstance(pax_fiddle.build(experiment.task()), layers.Identity)


if __name__ == "__main__":
  absltest.main()
