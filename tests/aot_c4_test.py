"""C4Spmd16BAdam32Replicas' train step compiles ahead of time for its declared mesh [1, 16, 2].

Pax's 16B C4 experiment (36 scanned layers of 6144, 48 heads, bfloat16 activations, Adam) on
32 fake CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=32, set by the py_test):
FSDP over `data` (16) and tensor parallelism over `mdl` (2), with the shardings the trainer
uses. Its C4 files are not read: an abstract build takes the batch shape from the input config.
"""

from absl.testing import absltest
import jax

from paxml.tasks.lm.params import c4
from paxml.tools import abstract_build


class AotC4Test(absltest.TestCase):
  def test_c4spmd16b_compiles_for_its_mesh(self):
    self.assertEqual(jax.device_count(), 32, "run with --xla_force_host_platform_device_count=32")
    built = abstract_build.build(c4.C4Spmd16BAdam32Replicas())
    compiled, partitioner = abstract_build.compile_train_step(built)
    self.assertEqual(dict(partitioner.mesh.shape), {"replica": 1, "data": 16, "mdl": 2})
    # PERCORE_BATCH_SIZE 16 x 32 devices, MAX_SEQ_LEN 1024.
    self.assertEqual(built.batch.ids.shape, (512, 1024))

    # Every matrix is split 32 ways (D over data, the other dim over mdl), so a device holds
    # 1/32 of the 16.5B float32 weights, and the arguments are about 3 x that (Adam's m and v).
    per_device_weights = built.num_params * 4 / 32
    memory = compiled.memory_analysis()
    if memory is not None:
      self.assertGreater(memory.argument_size_in_bytes, 2.9 * per_device_weights)
      self.assertLess(memory.argument_size_in_bytes, 3.3 * per_device_weights)
    self.assertIn("bf16", compiled.as_text())
    by_path = {
      jax.tree_util.keystr(p): s
      for p, s in jax.tree_util.tree_flatten_with_path(
        compiled.output_shardings[0].mdl_vars["params"]
      )[0]
    }
    qkv = [s for p, s in by_path.items() if "combined_qkv" in p]
    self.assertLen(qkv, 1)
    # [L, 3, D, N, H]: the layer axis unsharded, D over data, heads over mdl.
    self.assertEqual(tuple(qkv[0].spec)[:4], (None, None, "data", "mdl"))


if __name__ == "__main__":
  absltest.main()
