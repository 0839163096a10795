"""The SPMD trainer on 8 (fake CPU) devices gives the per-step losses of a plain single-device loop.

Runs with XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by its BUILD target). The mesh
(replica=1, data=4, mdl=2) shards the batch four ways and the weights over data x mdl (FSDP +
tensor parallel, Pax's rules); the reference is `train_step` jitted on one device with unsharded
arrays. Tolerance: sharded matmuls and reductions sum in another order, so the losses agree to
float32 rounding accumulated over the steps (rtol 2e-5), not bit for bit.
"""

import functools
import glob
import os

from absl.testing import absltest
import fiddle as fdl
import flax.linen as nn
import jax
import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from paxml import partitioning
from paxml import train_states
from paxml import trainer
from paxml.tasks.lm.params import demo
from praxis import pytypes

_STEPS = 6


class _TinyLm(demo.SyntheticDemoLm):
  """DemoLm shrunk to a few seconds; every sharded dim divides by 4 (data) and 2 (mdl)."""

  VOCAB_SIZE = 16
  SEQ_LEN = 16
  BATCH_SIZE = 8
  MAX_STRIDE = 2
  INPUT_SEED = 3
  MODEL_DIMS = 32
  NUM_LAYERS = 1
  NUM_HEADS = 2
  HIDDEN_DIMS = 64
  LEARNING_RATE = 1e-2
  WARMUP_STEPS = 0
  NUM_TRAIN_STEPS = _STEPS
  SAVE_INTERVAL_STEPS = 100
  SAVE_MAX_TO_KEEP = 2
  SUMMARY_INTERVAL_STEPS = 1
  EVAL_INTERVAL_STEPS = None
  DECODE_INTERVAL_STEPS = None
  ICI_MESH_SHAPE = (1, 4, 2)


def _losses(job_log_dir):
  (path,) = glob.glob(os.path.join(job_log_dir, "summaries", "train", "events.*"))
  acc = event_accumulator.EventAccumulator(path, size_guidance={"tensors": 0})
  acc.Reload()
  return [float(tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors("loss")]


def _single_device_losses(experiment):
  """Per-step losses of the same model, data and keys, all on device 0 with no sharding."""
  task = experiment.task()
  data = fdl.build(experiment.train_dataset())
  optimizer, schedule = train_states.make_optimizer(task)
  # The trainer's key derivation: split the seed into (init, train).
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(task.random_seed))
  device = jax.devices()[0]
  first = pytypes.NestedMap(data.get_next())
  data.set_state({"seed": data.get_state()["seed"], "num_batches": 0})
  state = jax.device_put(nn.unbox(train_states.init_state(
      task.model, optimizer, init_rng, first)), device)
  step_fn = jax.jit(functools.partial(
      trainer.train_step, model=task.model, optimizer=optimizer, schedule=schedule,
      clip_gradient_norm_to_value=task.clip_gradient_norm_to_value))
  losses = []
  for _ in range(_STEPS):
    batch = jax.device_put(pytypes.NestedMap(data.get_next()), device)
    state, metrics = step_fn(state, batch, train_rng)
    losses.append(float(metrics["loss"]))
  return losses


class ShardedTrainingTest(absltest.TestCase):

  def test_mesh_1_4_2_matches_one_device(self):
    self.assertEqual(jax.device_count(), 8, "the BUILD target sets 8 host devices")
    job_log_dir = self.create_tempdir().full_path
    final = trainer.train_and_evaluate(_TinyLm(), job_log_dir)
    self.assertEqual(final["step"], _STEPS)
    sharded = _losses(job_log_dir)
    reference = _single_device_losses(_TinyLm())
    np.testing.assert_allclose(sharded, reference, rtol=2e-5)
    # The reference itself must be a training run, or matching it would prove little.
    self.assertLess(reference[-1], reference[0] - 0.2)
    # The weights really were split: the text file records each variable's sharding.
    with open(os.path.join(job_log_dir, "post_init_model_params.txt")) as f:
      lines = {line.split()[0]: line for line in f if not line.startswith("#")}
    self.assertIn("sharding=('mdl', 'data')", lines["lm/embedding/embedding"])
    self.assertIn("sharding=('data', 'mdl')", lines["lm/block_0/mlp/wi/kernel"])

  def test_state_shardings_follow_the_rules(self):
    task = _TinyLm().task()
    optimizer, _ = train_states.make_optimizer(task)
    partitioner = partitioning.Partitioner(partitioning.create_mesh((1, 4, 2)))
    batch = pytypes.NestedMap(fdl.build(_TinyLm().train_dataset()).get_next())
    layout = train_states.state_layout(task, optimizer, partitioner, batch,
                                       jax.random.PRNGKey(0))
    state = layout.initialize(jax.random.PRNGKey(0))
    query = state.params["lm"]["block_0"]["attention"]["query"]  # [D=32, N=2, H=16]
    # D over data (4 ways) and N over mdl (2 ways): each device holds [8, 1, 16].
    self.assertEqual(query.addressable_shards[0].data.shape, (8, 1, 16))
    # Adam's first moment of that weight is sharded like the weight.
    mu = state.opt_state[0].mu["lm"]["block_0"]["attention"]["query"]
    self.assertEqual(mu.sharding.spec, query.sharding.spec)
    self.assertEqual(state.step.sharding.spec, jax.sharding.PartitionSpec())

  def test_mesh_that_does_not_fit_names_both_shapes_and_the_device_count(self):
    with self.assertRaisesRegex(
        partitioning.MeshError,
        r"ICI_MESH_SHAPE=\[1, 4, 4\] x DCN_MESH_SHAPE=\[1, 1, 1\] needs 16 devices, but 8 cpu"):
      partitioning.create_mesh((1, 4, 4))

  def test_indivisible_weight_is_reported_by_name(self):
    class Odd(_TinyLm):
      ICI_MESH_SHAPE = (1, 1, 8)  # 2 heads cannot be split over mdl=8.
    task = Odd().task()
    optimizer, _ = train_states.make_optimizer(task)
    partitioner = partitioning.Partitioner(partitioning.create_mesh((1, 1, 8)))
    batch = pytypes.NestedMap(fdl.build(Odd().train_dataset()).get_next())
    with self.assertRaisesRegex(
        partitioning.MeshError, r"\['attention'\]\['key'\] of shape \(32, 2, 16\) cannot be split 8 ways"):
      train_states.state_layout(task, optimizer, partitioner, batch, jax.random.PRNGKey(0))


if __name__ == "__main__":
  absltest.main()
