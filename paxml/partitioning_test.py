"""The mesh (with a stage axis for pipelines) and each process's place among the infeed hosts."""

from unittest import mock

from absl.testing import absltest
import fiddle as fdl
import jax

from paxml import partitioning
from paxml import synthetic_input
from paxml.data import synthetic


def _as_process(index: int, count: int):
  """Patches JAX's process index and count, as seen by the partitioner."""
  return mock.patch.multiple(
    jax, process_index=mock.Mock(return_value=index), process_count=mock.Mock(return_value=count)
  )


class MeshTest(absltest.TestCase):
  def test_three_axes_by_default(self):
    mesh = partitioning.create_mesh((1, 4, 2))
    self.assertEqual(dict(mesh.shape), {"replica": 1, "data": 4, "mdl": 2})

  def test_pipelines_get_a_leading_stage_axis_and_its_rule(self):
    mesh = partitioning.create_mesh((4, 1, 2, 1))
    self.assertEqual(dict(mesh.shape), {"stage": 4, "replica": 1, "data": 2, "mdl": 1})

    class Experiment:
      def partitioner(self):
        return None

    class Task:
      ici_mesh_shape, dcn_mesh_shape = (4, 1, 2, 1), None

    partitioner = partitioning.for_experiment(Experiment(), Task())
    self.assertEqual(partitioner.rules[0], ("stage", "stage"))
    self.assertEqual(partitioner.num_batch_shards, 2)

  def test_two_slices_over_data(self):
    mesh = partitioning.create_mesh((1, 2, 2), (1, 2, 1))
    self.assertEqual(dict(mesh.shape), {"replica": 1, "data": 4, "mdl": 2})
    # Slices are the outer blocks of `data`: its first half is the first 4 devices.
    first = {d.id for d in mesh.devices[:, :2, :].flat}
    self.assertEqual(first, {d.id for d in jax.devices()[:4]})

  def test_mesh_shapes_is_the_one_reading_of_the_two_shapes(self):
    self.assertEqual(
      partitioning.mesh_shapes(None, None, 8), (("replica", "data", "mdl"), (1, 8, 1), (1, 1, 1))
    )
    # Without an ICI shape, the devices of each slice go on `data`.
    self.assertEqual(
      partitioning.mesh_shapes(None, (2, 1, 1), 8),
      (("replica", "data", "mdl"), (1, 4, 1), (2, 1, 1)),
    )
    self.assertEqual(partitioning.mesh_shapes((2, 1, 2, 1), None, 4)[0][0], "stage")
    with self.assertRaisesRegex(partitioning.MeshError, r"needs 16 devices, but 8"):
      partitioning.mesh_shapes((1, 4, 2), (2, 1, 1), 8)

  def test_wrong_rank_is_named(self):
    with self.assertRaisesRegex(partitioning.MeshError, r"ICI_MESH_SHAPE=\[2, 4\] must have 3"):
      partitioning.create_mesh((2, 4))


class PreprocessInputConfigTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.partitioner = partitioning.Partitioner(partitioning.create_mesh((1, 8, 1)))

  def test_defaults_become_this_process(self):
    config = fdl.Config(synthetic.SyntheticLmData, batch_size=2, seq_len=4)
    with _as_process(3, 4):
      done = self.partitioner.preprocess_input_config(config)
    self.assertEqual((done.num_infeed_hosts, done.infeed_host_index), (4, 3))
    built = fdl.build(done)
    self.assertEqual(type(built).get_global_batch_size(built), 8)
    # The experiment's config itself is left as written.
    self.assertNotIn("infeed_host_index", config.__arguments__)

  def test_values_the_experiment_sets_are_kept(self):
    config = fdl.Config(
      synthetic.SyntheticLmData, batch_size=2, seq_len=4, num_infeed_hosts=8, infeed_host_index=5
    )
    with _as_process(1, 2):
      done = self.partitioner.preprocess_input_config(config)
    self.assertEqual((done.num_infeed_hosts, done.infeed_host_index), (8, 5))

  def test_input_with_only_a_host_index(self):
    config = fdl.Config(synthetic_input.SyntheticLmInput, batch_size=2, seq_len=4, vocab_size=8)
    with _as_process(1, 2):
      done = self.partitioner.preprocess_input_config(config)
    self.assertEqual(done.infeed_host_index, 1)
    self.assertFalse(hasattr(done, "num_infeed_hosts"))

  def test_hosts_read_different_rows(self):
    config = fdl.Config(
      synthetic.SyntheticRandomLmData, batch_size=2, seq_len=4, vocab_size=100, input_random_seed=3
    )
    batches = []
    for index in range(2):
      with _as_process(index, 2):
        batches.append(fdl.build(self.partitioner.preprocess_input_config(config)).get_next())
    self.assertFalse((batches[0].ids == batches[1].ids).all())


class FilterNestedMapTest(absltest.TestCase):
  def test_keeps_partial_keys_type_and_partition_spec_leaves(self):
    spec = jax.sharding.PartitionSpec("data", None)
    full = {"a": 1, "b": {"c": spec, "d": [3, {"e": 6, "f": 7}]}, "g": 9}
    got = partitioning.filter_nestedmap(full, {"b": {"d": [0, {"f": 0}]}, "a": 0})
    self.assertEqual(got, {"a": 1, "b": {"d": [3, {"f": 7}]}})
    # The spec is a leaf (a tuple): taken whole, not filtered by the partial tree's value.
    self.assertIs(partitioning.filter_nestedmap(full, {"b": {"c": (0,)}})["b"]["c"], spec)

  def test_list_length_mismatch_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "same children"):
      partitioning.filter_nestedmap([1, 2], [0])


if __name__ == "__main__":
  absltest.main()
