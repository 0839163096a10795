"""Tests for praxis.pytypes.NestedMap."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis.pytypes import NestedMap


class NestedMapTest(absltest.TestCase):
  def test_attribute_and_item_access_are_the_same(self):
    m = NestedMap(ids=np.arange(3))
    m.labels = np.ones(3)
    self.assertIs(m["labels"], m.labels)
    with self.assertRaisesRegex(AttributeError, r"no key 'paddings'; keys are \['ids', 'labels'\]"):
      _ = m.paddings

  def test_bad_keys_are_refused(self):
    with self.assertRaisesRegex(KeyError, "starting with a letter"):
      NestedMap({"1a": 1})
    with self.assertRaises(ValueError):  # Pax's exception
      NestedMap({"": 1})
    # Pax's keys need only start like an identifier (its prefix vectorization uses 'p#2#i-1').
    self.assertEqual(NestedMap({"p#2#i-1": 1})["p#2#i-1"], 1)
    with self.assertRaisesRegex(KeyError, "shadow"):
      NestedMap().keys = 1

  def test_is_a_pytree_that_keeps_its_type_through_jit(self):
    m = NestedMap(x=jnp.ones(2), sub=NestedMap(y=jnp.zeros(1)))
    out = jax.jit(lambda t: jax.tree.map(lambda a: a + 1, t))(m)
    self.assertIsInstance(out, NestedMap)
    self.assertIsInstance(out.sub, NestedMap)
    self.assertEqual(out.sub.y.tolist(), [1.0])

  def test_flatten_items_and_filter(self):
    m = NestedMap(b=1, a=NestedMap(c=2, d=3))
    self.assertEqual(m.FlattenItems(), [("a.c", 2), ("a.d", 3), ("b", 1)])
    self.assertEqual(m.Filter(lambda v: v != 2), NestedMap(a=NestedMap(d=3), b=1))
    self.assertIsInstance(m.copy(), NestedMap)

  def test_pax_methods(self):
    m = NestedMap.FromNestedDict({"a": {"b": 1, "c": [2, {"d": 3}]}, "e": 4})
    self.assertIsInstance(m.a, NestedMap)
    self.assertIsInstance(m.a.c[1], NestedMap)
    self.assertEqual(m.GetItem("a.c.1.d"), 3)
    self.assertEqual(m.Get("a.x", "none"), "none")
    m.Set("f.g", 5)
    self.assertEqual(m.f.g, 5)
    self.assertEqual(m.Pack([10, 20, 30, 40, 50]).a.b, 10)
    self.assertTrue(m.IsCompatible(m.Transform(lambda x: x + 1)))
    self.assertEqual(m.FilterKeyVal(lambda k, _: k.startswith("a.")).Flatten(), [1, 2, 3])
    self.assertEqual(type(m.ToNestedDict()["a"]), dict)


if __name__ == "__main__":
  absltest.main()
