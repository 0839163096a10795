"""Tests of host_to_device on 4 fake CPU devices (XLA_FLAGS set by the BUILD target)."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import numpy as np

from paxml.data import host_to_device
from paxml.data import synthetic


def _sharding():
  mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
  return NamedSharding(mesh, P("data"))


def _input(**kwargs):
  args = dict(batch_size=8, seq_len=5, vocab_size=100, input_random_seed=3)
  args.update(kwargs)
  return synthetic.SyntheticRandomLmData(**args)


class HostToDeviceTest(absltest.TestCase):
  def test_global_arrays_split_rows_over_devices(self):
    self.assertLen(jax.devices(), 4)
    host = _input().get_next()
    out = host_to_device.to_global(host, _sharding())
    self.assertEqual(out.ids.shape, (8, 5))
    self.assertEqual(out.ids.sharding, _sharding())
    shards = sorted(out.ids.addressable_shards, key=lambda s: s.index[0].start)
    self.assertLen(shards, 4)
    for i, shard in enumerate(shards):
      np.testing.assert_array_equal(np.asarray(shard.data), host.ids[2 * i : 2 * i + 2])
    np.testing.assert_array_equal(np.asarray(out.weights), host.weights)

  def test_prefetch_keeps_order_and_reports_consumed_state(self):
    reference = _input()
    want = [reference.get_next().ids for _ in range(5)]
    inp = _input()
    prefetcher = host_to_device.Prefetcher(inp, _sharding(), buffer_size=3)
    got = [np.asarray(next(prefetcher).ids) for _ in range(2)]
    # The thread has read ahead, but the state counts only the two batches handed out.
    self.assertEqual(prefetcher.get_state()["num_batches"], 2)
    got += [np.asarray(next(prefetcher).ids) for _ in range(3)]
    prefetcher.close()
    for w, g in zip(want, got):
      np.testing.assert_array_equal(g, w)
    resumed = _input()
    resumed.set_state(prefetcher.get_state())
    np.testing.assert_array_equal(resumed.get_next().ids, reference.get_next().ids)

  def test_end_of_finite_input_and_errors(self):
    inp = _input(num_examples=20, is_training=False, reset_for_eval=True)
    batches = list(host_to_device.Prefetcher(inp, _sharding()))
    self.assertLen(batches, 3)  # ceil(20 / 8), the last padded
    self.assertEqual(float(np.asarray(batches[-1].weights).sum()), 4 * 5)

    class Broken(synthetic.SyntheticLmData):
      def _examples(self, indices):
        raise OSError("disk on fire")

    with self.assertRaisesRegex(OSError, "disk on fire"):
      next(host_to_device.Prefetcher(Broken(batch_size=4, seq_len=2), _sharding()))


if __name__ == "__main__":
  absltest.main()
