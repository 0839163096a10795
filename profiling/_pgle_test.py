"""Tests the pybind11 extension against profiles built here with Python's own protobuf runtime."""

from absl.testing import absltest
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

from profiling import _pgle


def _profile_message_class():
  """ProfiledInstructionsProto built from a descriptor written here, independent of the C++ code."""
  f = descriptor_pb2.FileDescriptorProto(
    name="test_profile.proto", package="tensorflow.profiler", syntax="proto3"
  )
  msg = f.message_type.add(name="ProfiledInstructionsProto")
  cost = msg.nested_type.add(name="InstructionCost")
  cost.field.add(name="name", number=1, type=9, label=1)  # TYPE_STRING, LABEL_OPTIONAL
  cost.field.add(name="cost_us", number=2, type=1, label=1)  # TYPE_DOUBLE
  latency = msg.nested_type.add(name="Latency")
  latency.field.add(name="source", number=1, type=9, label=1)
  latency.field.add(name="target", number=2, type=9, label=1)
  latency.field.add(name="latency_us", number=3, type=1, label=1)
  msg.field.add(
    name="costs",
    number=1,
    type=11,
    label=3,  # TYPE_MESSAGE, LABEL_REPEATED
    type_name=".tensorflow.profiler.ProfiledInstructionsProto.InstructionCost",
  )
  msg.field.add(
    name="latencies",
    number=2,
    type=11,
    label=3,
    type_name=".tensorflow.profiler.ProfiledInstructionsProto.Latency",
  )
  pool = descriptor_pool.DescriptorPool()
  pool.Add(f)
  return message_factory.GetMessageClass(
    pool.FindMessageTypeByName("tensorflow.profiler.ProfiledInstructionsProto")
  )


ProfiledInstructionsProto = _profile_message_class()


def _serialize(costs):
  proto = ProfiledInstructionsProto()
  for name, cost_us in costs:
    proto.costs.add(name=name, cost_us=cost_us)
  return proto.SerializeToString()


class PgleBindingTest(absltest.TestCase):
  def test_parse_returns_costs_sorted_by_name(self):
    data = _serialize([("fp::fusion.3", 4.25), ("fp::all-gather.1", 310.0), ("fp::dot.2", 12.5)])
    self.assertEqual(
      _pgle.parse_profile(data),
      [("fp::all-gather.1", 310.0), ("fp::dot.2", 12.5), ("fp::fusion.3", 4.25)],
    )

  def test_canonical_bytes_are_sorted_and_order_independent(self):
    costs = [("b", 2.0), ("c", 3.0), ("a", 1.0)]
    forward = _pgle.canonical_profile_bytes(_serialize(costs))
    backward = _pgle.canonical_profile_bytes(_serialize(costs[::-1]))
    self.assertEqual(forward, backward)
    parsed = ProfiledInstructionsProto.FromString(forward)
    self.assertEqual([(c.name, c.cost_us) for c in parsed.costs], sorted(costs))

  def test_truncated_bytes_raise_value_error(self):
    data = _serialize([("a_long_instruction_name.17", 1.0)])
    with self.assertRaisesRegex(ValueError, "could not parse"):
      _pgle.parse_profile(data[: len(data) // 2])
    self.assertTrue(issubclass(_pgle.ProfileError, ValueError))

  def test_negative_cost_names_the_instruction(self):
    with self.assertRaisesRegex(_pgle.ProfileError, "'dot.4' has invalid cost_us"):
      _pgle.parse_profile(_serialize([("dot.4", -3.0)]))


if __name__ == "__main__":
  absltest.main()
