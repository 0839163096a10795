"""Tests for praxis.asserts: which values pass, and what the error says when one does not."""

import threading

from absl.testing import absltest

from praxis import asserts
from praxis.pytypes import NestedMap


class ChecksTest(absltest.TestCase):
  def test_passing_values_raise_nothing(self):
    asserts.none(None)
    asserts.not_none(0)
    asserts.eq(2, 2.0)
    asserts.ne(1, 2)
    asserts.le(1, 1)
    asserts.lt(1, 2)
    asserts.ge(2, 2)
    asserts.gt(3, 2)
    asserts.instance(1.5, (int, float))
    asserts.subclass(bool, int)
    asserts.in_set("relu", ["tanh", "relu"])
    asserts.between(0.5, 0.0, 1.0, left_strict=True, right_strict=True)

  def test_message_names_arguments_as_written_on_the_calling_line(self):
    heads, dims = 4, [8, 16]
    with self.assertRaises(ValueError) as caught:
      asserts.eq(heads * 2, max(dims[0], 3) - 1)
    self.assertEqual(
      str(caught.exception), "`heads * 2=8` must be equal to `max(dims[0], 3) - 1=7`."
    )

  def test_each_relation_has_its_own_wording(self):
    a, b = 3, 2
    cases = [
      (lambda: asserts.lt(a, b), "strictly less than"),
      (lambda: asserts.le(a, b), "less than or equal to"),
      (lambda: asserts.gt(b, a), "strictly greater than"),
      (lambda: asserts.ge(b, a), "greater than or equal to"),
      (lambda: asserts.ne(a, a), "must not be equal to"),
    ]
    for call, words in cases:
      with self.assertRaisesRegex(ValueError, words):
        call()

  def test_value_str_msg_and_exception_type_override(self):
    x = 5
    with self.assertRaisesRegex(ValueError, r"^`width=5` must be `None`\.$"):
      asserts.none(x, value_str="width=5")
    with self.assertRaisesRegex(TypeError, r"^too big$"):
      asserts.lt(x, 1, msg="too big", exception_type=TypeError)
    with self.assertRaisesRegex(ValueError, r"^`x=5` must be strictly less than `limit`\.$"):
      asserts.lt(x, 1, value_str2="limit")

  def test_between_reports_the_interval_with_its_strictness(self):
    rate = 1.0
    with self.assertRaisesRegex(ValueError, r"^`rate=1.0` must be in the range `\[0.0, 1.0\)`\.$"):
      asserts.between(rate, 0.0, 1.0, right_strict=True)
    asserts.between(rate, 0.0, 1.0)  # closed by default

  def test_membership_type_and_subclass_failures(self):
    act = "gelu"
    with self.assertRaisesRegex(ValueError, r"^`act=gelu` must be within `\('relu',\)`\.$"):
      asserts.in_set(act, ("relu",))
    with self.assertRaisesRegex(ValueError, "must be of type"):
      asserts.instance(act, int)
    with self.assertRaisesRegex(ValueError, "must be a subclass of"):
      asserts.subclass(int, str)

  def test_a_call_over_several_lines_still_reports_the_value(self):
    with self.assertRaisesRegex(ValueError, r"must be equal to"):
      asserts.eq(1, 2)

  def test_same_structure_looks_only_at_dicts_lists_and_tuples(self):
    asserts.assert_same_structure({"a": 1, "b": None}, NestedMap(a="x", b=2))
    with self.assertRaisesRegex(ValueError, "Not the same structure"):
      asserts.assert_same_structure({"a": [1, 2]}, {"a": (1, 2)})
    with self.assertRaisesRegex(ValueError, "Not the same structure"):
      asserts.assert_same_structure({"a": 1}, {"a": [1]})

  def test_context_disables_checks_and_nests(self):
    with asserts.AssertsContext(enabled=False):
      asserts.eq(1, 2)
      asserts.between(5, 0, 1)
      asserts.assert_same_structure([1], (1,))
      with asserts.AssertsContext(enabled=True):
        with self.assertRaises(ValueError):
          asserts.not_none(None)
      asserts.gt(1, 2)
    with self.assertRaises(ValueError):
      asserts.gt(1, 2)

  def test_context_is_per_thread(self):
    seen = []
    with asserts.AssertsContext(enabled=False):
      worker = threading.Thread(
        target=lambda: seen.append(asserts.AssertsContext.assertions_enabled())
      )
      worker.start()
      worker.join()
    self.assertEqual(seen, [True])


if __name__ == "__main__":
  absltest.main()
