"""LmCloudSpmd2B's train step compiles ahead of time for its declared mesh [1, 4, 1].

The model is what the experiment declares: praxis LanguageModel with StackedTransformerRepeated
(18 scanned layers, SAVE_NOTHING remat), bfloat16 activations, praxis Adam.

Runs on 4 fake CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=4, set by the
py_test): abstract_build.compile_train_step compiles with the same shardings the trainer uses, so
a sharding rule, mesh or shape error in the 2B configuration shows up here without a TPU and
without allocating its 2.1B parameters.
"""

from absl.testing import absltest
import jax

from paxml.tasks.lm.params import lm_cloud
from paxml.tools import abstract_build


class AotCompileTest(absltest.TestCase):
  def test_lmcloudspmd2b_compiles_for_its_mesh(self):
    self.assertEqual(jax.device_count(), 4, "run with --xla_force_host_platform_device_count=4")
    built = abstract_build.build(lm_cloud.LmCloudSpmd2B())
    compiled, partitioner = abstract_build.compile_train_step(built)
    self.assertEqual(dict(partitioner.mesh.shape), {"replica": 1, "data": 4, "mdl": 1})
    # The batch of the declared mesh: PERCORE_BATCH_SIZE 8 x 4 devices.
    self.assertEqual(built.batch.ids.shape, (32, 1024))

    # FSDP over `data`: each device holds a quarter of the 2.1B float32 weights, and the
    # compiled program's arguments (state + batch) are about 3 x that (weights, Adam's m and v).
    per_device_weights = built.num_params * 4 / 4
    memory = compiled.memory_analysis()
    if memory is not None:
      self.assertGreater(memory.argument_size_in_bytes, 2.9 * per_device_weights)
      self.assertLess(memory.argument_size_in_bytes, 3.2 * per_device_weights)
    # FPROP_DTYPE=bfloat16 reached the layers: the program computes in bf16.
    self.assertIn("bf16", compiled.as_text())
    out_state_shardings = compiled.output_shardings[0]
    by_path = {
      jax.tree_util.keystr(p): s
      for p, s in jax.tree_util.tree_flatten_with_path(out_state_shardings.mdl_vars["params"])[0]
    }
    # The tied [D, V] softmax/embedding table: D over `data` (Pax's w_vd), V over `mdl` (size 1).
    table = [s for p, s in by_path.items() if "softmax" in p and p.endswith("['w']")]
    self.assertLen(table, 1)
    self.assertEqual(table[0].spec[0], "data")
    # The repeated layers' weights carry the [18] layer axis, unsharded, then [D, ...] on data.
    qkv = [s for p, s in by_path.items() if "combined_qkv" in p]
    self.assertLen(qkv, 1)
    self.assertEqual(tuple(qkv[0].spec)[:3], (None, None, "data"))  # [L, 3, D, N, H]


if __name__ == "__main__":
  absltest.main()
