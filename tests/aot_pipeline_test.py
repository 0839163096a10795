"""The pipelined experiments' train steps compile ahead of time for their declared meshes.

64 fake CPU devices (set by the py_test). LmCloudSpmdPipeline9B, mesh [16, 4, 1, 1]: 16 pipeline
stages of 3 layers x 4-way data parallelism, 512 sequences in microbatches of 4. The stage
weights must land on the `stage` axis: each device holds 1/16 of the transformer's weights and
Adam's moments (the embedding table and the final norm, outside the pipeline, are not split over
stages). C4SpmdPipelineGpt3SmallAdam64Replicas (the seed's GPT-3 pipeline), mesh [4, 1, 4, 4]:
4 stages x 4-way data x 4-way model parallelism. Their parameter counts are checked against the
formula in experiments_test, with every registered experiment.
"""

from absl.testing import absltest
import jax

from paxml.tasks.lm.params import c4
from paxml.tasks.lm.params import lm_cloud
from paxml.tools import abstract_build


class AotPipelineTest(absltest.TestCase):
  def _compile_for_declared_mesh(self, experiment, batch_shape, mesh_shape):
    """Builds and compiles `experiment`'s train step; checks its batch, its mesh and that every
    stacked stage weight is split over `stage`. Returns (built, compiled)."""
    self.assertEqual(jax.device_count(), 64, "run with --xla_force_host_platform_device_count=64")
    built = abstract_build.build(experiment)
    self.assertEqual(built.batch.ids.shape, batch_shape)
    compiled, partitioner = abstract_build.compile_train_step(built)
    self.assertEqual(dict(partitioner.mesh.shape), mesh_shape)
    params = jax.tree_util.tree_flatten_with_path(compiled.output_shardings[0].mdl_vars["params"])[
      0
    ]
    stacked = [s for p, s in params if "pipeline" in jax.tree_util.keystr(p)]
    self.assertNotEmpty(stacked)
    for placement in stacked:
      self.assertEqual(placement.spec[0], "stage")
    return built, compiled

  def test_pipeline9b_compiles_for_its_mesh(self):
    experiment = lm_cloud.LmCloudSpmdPipeline9B()
    built, compiled = self._compile_for_declared_mesh(
      experiment,
      (512, 1024),  # PERCORE_BATCH_SIZE 8 x 64 devices.
      {"stage": 16, "replica": 4, "data": 1, "mdl": 1},
    )
    # Weights + Adam's m and v in float32, the transformer's split 16 ways.
    vocab, dims = experiment.VOCAB_SIZE, experiment.MODEL_DIMS
    outside = vocab * dims + vocab + 2 * dims  # tied embedding/softmax, its bias, final norm
    per_device = 3 * 4 * ((built.num_params - outside) / 16 + outside)
    memory = compiled.memory_analysis()
    if memory is not None:
      self.assertBetween(memory.argument_size_in_bytes, 0.98 * per_device, 1.05 * per_device)

  def test_gpt3_pipeline_64replicas_compiles_for_its_mesh(self):
    self._compile_for_declared_mesh(
      c4.C4SpmdPipelineGpt3SmallAdam64Replicas(),
      (512, 2048),  # PERCORE_BATCH_SIZE 8 x 64 devices.
      {"stage": 4, "replica": 1, "data": 4, "mdl": 4},
    )


if __name__ == "__main__":
  absltest.main()
