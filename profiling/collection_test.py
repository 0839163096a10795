import glob
import os

import jax
import jax.numpy as jnp
from absl.testing import absltest

from profiling import collection
from profiling import conversion


class CollectTest(absltest.TestCase):
  def test_traces_exactly_the_requested_steps(self):
    calls = []
    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
    x = jnp.ones((64, 64))

    def step():
      calls.append(1)
      return f(x)

    logdir = self.create_tempdir().full_path
    run_dir = collection.collect(step, steps=4, logdir=logdir, warmup=2)
    self.assertLen(calls, 6)
    self.assertLen(glob.glob(os.path.join(run_dir, "*.xplane.pb")), 1)
    entries = conversion.convert_detailed(run_dir, include_host=True).entries
    self.assertNotEmpty(entries)
    self.assertEqual({e.samples for e in entries}, {4})  # Warm-up calls are not in the trace.

  def test_rejects_no_steps(self):
    with self.assertRaisesRegex(ValueError, "steps"):
      collection.collect(lambda: None, steps=0, logdir=self.create_tempdir().full_path)


if __name__ == "__main__":
  absltest.main()
