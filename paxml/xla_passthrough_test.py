"""Tests of xla_passthrough: strings leave the batch and come back to the outputs."""

from absl.testing import absltest
import numpy as np

from paxml import xla_passthrough


class XlaPassthroughTest(absltest.TestCase):
  def test_numbers_only_returns_the_same_objects(self):
    batch, spec = {"x": np.zeros(3)}, {"x": "data"}
    out, unsupported, out_spec = xla_passthrough.split_out_xla_unsupported_batch(batch, spec)
    self.assertIs(out, batch)
    self.assertIs(out_spec, spec)
    self.assertEqual(unsupported, {})

  def test_strings_and_objects_split_out_and_merge_back(self):
    text = np.array(["a", "bc"])
    objs = np.array([{"k": 1}, None], dtype=object)
    batch = {"ids": np.arange(2), "text": text, "meta": objs}
    spec = {"ids": "p", "text": "p", "meta": "p"}
    out, unsupported, out_spec = xla_passthrough.split_out_xla_unsupported_batch(batch, spec)
    self.assertEqual(sorted(out), ["ids"])
    self.assertEqual(sorted(unsupported), ["meta", "text"])
    self.assertEqual(out_spec, {"ids": "p"})
    self.assertEqual(sorted(spec), ["ids", "meta", "text"])  # The caller's spec is untouched.
    xla_passthrough.merge_back_xla_unsupported_batch(out, unsupported)
    np.testing.assert_array_equal(out["text"], text)

  def test_nested_key_with_a_string_leaves_the_batch(self):
    batch = {"ids": np.arange(2), "src": {"text": np.array(["a", "b"]), "len": np.ones(2)}}
    spec = {"ids": "p", "src": {"text": "p", "len": "q"}}
    out, unsupported, out_spec = xla_passthrough.split_out_xla_unsupported_batch(batch, spec)
    self.assertEqual(sorted(out), ["ids"])
    self.assertEqual(sorted(unsupported["src"]), ["text"])
    self.assertEqual(out_spec, {"ids": "p", "src": {"len": "q"}})
    self.assertEqual(xla_passthrough.split_out_xla_unsupported_batch(out)[1], {})


if __name__ == "__main__":
  absltest.main()
