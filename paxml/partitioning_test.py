"""Partitioner.preprocess_input_config: each process gets its own place among the infeed hosts."""

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


class PreprocessInputConfigTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.partitioner = partitioning.Partitioner(partitioning.create_mesh((1, 1, 1)))

  def test_defaults_become_this_process(self):
    config = fdl.Config(synthetic.SyntheticLmData, batch_size=2, seq_len=4)
    with _as_process(3, 4):
      done = self.partitioner.preprocess_input_config(config)
    self.assertEqual((done.num_infeed_hosts, done.infeed_host_index), (4, 3))
    built = fdl.build(done)
    self.assertEqual(built.get_global_batch_size(), 8)
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


if __name__ == "__main__":
  absltest.main()
