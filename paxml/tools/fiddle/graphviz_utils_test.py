"""Tests of graphviz_utils.render: the drawing shows what the config sets, after normalization
(defaults trimmed)."""

from absl.testing import absltest
from paxml.tools.fiddle import graphviz_utils
from paxml.tools.fiddle import test_fixtures


class RenderTest(absltest.TestCase):
  def test_draws_set_values_not_defaults(self):
    fixture = test_fixtures.SampleExperimentNewBaseline(foo_setting=777).experiment_fixture()
    source = graphviz_utils.render(config=fixture).source
    self.assertIn("SampleModel", source)
    self.assertIn("777", source)
    # `sublayers` keeps its default ([]), so normalization trims it from the drawing.
    self.assertNotIn("sublayers", source)
    untrimmed = graphviz_utils.render(config=fixture, remove_defaults=False).source
    self.assertIn("sublayers", untrimmed)


if __name__ == "__main__":
  absltest.main()
