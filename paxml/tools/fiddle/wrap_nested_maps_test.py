"""Tests of wrap_nested_maps and make_nested_map."""

from absl.testing import absltest
import fiddle as fdl

from paxml.experimental import nested_map_config_helper
from paxml.tools.fiddle import wrap_nested_maps
from praxis import pax_fiddle
from praxis import pytypes


class WrapNestedMapsTest(absltest.TestCase):
  def test_wrapped_config_builds_equal_nested_maps(self):
    inner = pytypes.NestedMap(x=1)
    config = {"a": pytypes.NestedMap(b=inner, c=[inner]), "d": 2}
    wrapped = wrap_nested_maps.wrap_nested_maps(config)
    self.assertIsInstance(wrapped["a"], pax_fiddle.Config)
    self.assertIs(fdl.get_callable(wrapped["a"]), nested_map_config_helper.make_nested_map)
    self.assertIsInstance(wrapped["a"].base["b"], pax_fiddle.Config)  # Nested ones too.
    built = pax_fiddle.build(wrapped)
    self.assertIsInstance(built["a"], pytypes.NestedMap)
    self.assertIsInstance(built["a"].b, pytypes.NestedMap)
    self.assertEqual(built["a"].b.x, 1)
    self.assertEqual(built["a"].c[0].x, 1)
    self.assertEqual(built["d"], 2)


if __name__ == "__main__":
  absltest.main()
