"""Tests for praxis.lazy_loader and praxis.fiddle_tags."""

import dataclasses
import sys

from absl.testing import absltest
import fiddle as fdl

from praxis import fiddle_tags
from praxis import lazy_loader


class LazyLoaderTest(absltest.TestCase):
  def test_imports_on_first_use_and_replaces_itself(self):
    sys.modules.pop("colorsys", None)
    scope = {}
    scope["cs"] = lazy_loader.LazyLoader("cs", scope, "colorsys")
    self.assertNotIn("colorsys", sys.modules)
    self.assertEqual(scope["cs"].rgb_to_hsv(1.0, 0.0, 0.0), (0.0, 1.0, 1.0))
    self.assertIs(scope["cs"], sys.modules["colorsys"])


@dataclasses.dataclass
class Layer:
  dtype: str = "float32"
  act_dtype: str = "float32"


class FiddleTagsTest(absltest.TestCase):
  def test_base_dtype_sets_both_dtype_tags(self):
    cfg = fdl.Config(Layer)
    fdl.add_tag(cfg, "dtype", fiddle_tags.ParamsDType)
    fdl.add_tag(cfg, "act_dtype", fiddle_tags.ActivationDType)
    fdl.set_tagged(cfg, tag=fiddle_tags.ActivationDType, value="bfloat16")
    self.assertEqual(fdl.build(cfg), Layer("float32", "bfloat16"))
    fdl.set_tagged(cfg, tag=fiddle_tags.BaseDType, value="float16")
    self.assertEqual(fdl.build(cfg), Layer("float16", "float16"))


if __name__ == "__main__":
  absltest.main()
