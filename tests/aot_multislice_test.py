"""A c4_multislice experiment compiles ahead of time for its ICI x DCN mesh.

Pax's C4Spmd22BAdam2xv4_8 (16 x 2048, 8 heads of 256) on 2 slices of [1, 4, 1]: DCN_MESH_SHAPE
[2, 1, 1] puts the slices on `replica`, so the mesh is replica=2 x data=4 x mdl=1 over 8 fake CPU
devices (XLA_FLAGS=--xla_force_host_platform_device_count=8, set by the py_test), the weights
FSDP-sharded within a slice and replicated across the two.
"""

from absl.testing import absltest
import jax

from paxml.tasks.lm.params import c4_multislice
from paxml.tools import abstract_build


class AotMultisliceTest(absltest.TestCase):
  def test_c4spmd22b_2xv4_8_compiles_for_its_mesh(self):
    self.assertEqual(jax.device_count(), 8, "run with --xla_force_host_platform_device_count=8")
    built = abstract_build.build(c4_multislice.C4Spmd22BAdam2xv4_8())
    compiled, partitioner = abstract_build.compile_train_step(built)
    self.assertEqual(dict(partitioner.mesh.shape), {"replica": 2, "data": 4, "mdl": 1})
    # PERCORE_BATCH_SIZE 16 x 8 devices of both slices.
    self.assertEqual(built.batch.ids.shape, (128, 1024))
    # Weights split 4 ways within a slice, replicated across slices: the arguments hold about
    # 3 x a quarter of the float32 weights (weights, Adam's m and v).
    per_device_weights = built.num_params * 4 / 4
    memory = compiled.memory_analysis()
    if memory is not None:
      self.assertGreater(memory.argument_size_in_bytes, 2.9 * per_device_weights)
      self.assertLess(memory.argument_size_in_bytes, 3.3 * per_device_weights)
    batch_sharding = compiled.input_shardings[0][1]["ids"]
    # The batch over both replica (the slices) and data.
    self.assertEqual(set(batch_sharding.spec[0]), {"replica", "data"})


if __name__ == "__main__":
  absltest.main()
