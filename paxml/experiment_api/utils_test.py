"""Tests for utils: async calls, periodic actions, devices, RNG, prefetch."""

import os

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
)

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
import jax
import jax.numpy as jnp
import numpy as np

from paxml.experiment_api import utils


class AsyncTest(absltest.TestCase):
  def test_in_order_and_errors_surface_on_the_next_call(self):
    calls = []

    @utils.make_async("test")
    def work(x):
      if x == 2:
        raise ValueError("bad 2")
      calls.append(x)
      return x * 10

    self.assertEqual(work(1).result(), 10)
    with self.assertRaisesRegex(ValueError, "bad 2"):
      work(2).result()
    with self.assertRaisesRegex(ValueError, "bad 2"):
      work(3)  # later calls re-raise and do not run
    self.assertEqual(calls, [1])

  def test_works_on_methods(self):
    class Counter:
      def __init__(self):
        self.n = 0

      @utils.make_async()
      def add(self, k):
        self.n += k
        return self.n

    c = Counter()
    c.add(2)
    self.assertEqual(c.add(3).result(), 5)


class PeriodicActionTest(absltest.TestCase):
  def test_steps_growth_and_end_step(self):
    fired = []
    action = utils.PeriodicAction(
      lambda step, s: fired.append(step),
      "steps",
      100,
      run_async=False,
      logging_growth_ratios=[1, 2, 5],
      end_step_to_action=333,
    )
    for step in range(1, 400_001):
      if step < 1000 or step in (399_996, 400_000):
        action(float(step), step, {})
    self.assertEqual(fired[:10], [1, 2, 5, 10, 20, 50, 100, 200, 300, 333])
    self.assertEqual(fired[-1], 400_000)
    self.assertNotIn(399_996, fired)

  def test_steps_per_sec_and_log_all_data(self):
    got = []
    action = utils.PeriodicAction(
      lambda step, s: got.append((step, dict(s))), "steps", 2, run_async=False, log_all_data=True
    )
    action.update_time(0.0, 0)
    action(1.0, 1, {"loss": 1})
    action(4.0, 2, {"loss": 2})
    self.assertEqual(got, [(1, {"loss": 1}), (2, {"loss": 2, "steps_per_sec": 0.5})])


class DeviceTest(absltest.TestCase):
  def test_bcast_get_first_and_double_buffer(self):
    x = utils.bcast_local_devices({"w": jnp.arange(3.0), "none": None})
    self.assertEqual(x["w"].shape, (2, 3))
    self.assertIsNone(x["none"])
    np.testing.assert_array_equal(utils.get_first(x)["w"], [0, 1, 2])
    batches = list(utils.double_buffer(iter([np.ones((2, 4)) * i for i in range(3)])))
    self.assertLen(batches, 3)
    self.assertLen(batches[1].sharding.device_set, 2)
    np.testing.assert_array_equal(batches[2], np.full((2, 4), 2.0))

  def test_rng_modes(self):
    rng = jnp.broadcast_to(jax.random.PRNGKey(0), (2, 2))
    ids = utils.host_id_devices_for_rng("unique_host_unique_device")
    keys = jax.pmap(lambda r, h: utils.specialize_rng_host_device(r, h, "i"), "i")(rng, ids)
    self.assertFalse(np.array_equal(keys[0], keys[1]))
    self.assertIsNone(utils.host_id_devices_for_rng("same_host_same_device"))
    same = jax.pmap(
      lambda r: utils.specialize_rng_host_device(r, None, "i", "same_host_same_device"), "i"
    )(rng)
    np.testing.assert_array_equal(same[0], same[1])


class PrefetchTest(absltest.TestCase):
  def test_items_then_the_producer_error(self):
    def gen():
      yield 1
      yield 2
      raise ValueError("producer failed")

    got = []
    with self.assertRaisesRegex(ValueError, "producer failed"):
      for x in utils.py_prefetch(gen, buffer_size=2, thread_name="p"):
        got.append(x)
    self.assertEqual(got, [1, 2])


if __name__ == "__main__":
  absltest.main()
