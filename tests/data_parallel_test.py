"""The SPMD trainer on 8 (fake CPU) devices gives the per-step losses of a plain single-device loop.

Runs with XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by its BUILD target). The mesh
(replica=1, data=4, mdl=2) shards the batch four ways and the weights over data x mdl (FSDP +
tensor parallel, Pax's rules); the reference is `train_step` jitted on one device with unsharded
arrays. Tolerance: sharded matmuls and reductions sum in another order, so the losses agree to
float32 rounding accumulated over the steps (rtol 2e-5), not bit for bit.
"""

import functools
import os

from absl.testing import absltest
import fiddle as fdl
import flax.linen as nn
import jax
import numpy as np
import optax

from paxml import checkpoints
from paxml import partitioning
from paxml import train_states
from paxml import trainer
from praxis import pytypes
from paxml.testing import compile_cache
from paxml.testing import event_files
from paxml.testing import tiny_lm

# The runs on one mesh compile the same programs: the later compiles read the first's.
compile_cache.use_for_this_test()

_STEPS = 6


class _TinyLm(tiny_lm.TinyLm):
  """A few seconds of training; every sharded dim divides by 4 (data) and 2 (mdl)."""

  INPUT_SEED = 3
  NUM_TRAIN_STEPS = _STEPS
  SAVE_INTERVAL_STEPS = 100
  SAVE_MAX_TO_KEEP = 2
  SUMMARY_INTERVAL_STEPS = 1
  EVAL_INTERVAL_STEPS = None
  DECODE_INTERVAL_STEPS = None
  ICI_MESH_SHAPE = (1, 4, 2)


@functools.cache
def _single_device_losses() -> tuple[float, ...]:
  """Per-step losses of _TinyLm's model, data and keys, all on device 0 with no sharding.

  Computed once per process: two tests compare against it.
  """
  experiment = _TinyLm()
  task = experiment.task()
  data = fdl.build(experiment.train_dataset())
  optimizer, _ = train_states.make_optimizer(task)
  # The trainer's key derivation: split the seed into (init, train).
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(task.random_seed))
  device = jax.devices()[0]
  first = pytypes.NestedMap(data.get_next())
  data.set_state({"seed": data.get_state()["seed"], "num_batches": 0})
  state = jax.device_put(
    nn.unbox(train_states.init_state(task.model, optimizer, init_rng, first)), device
  )
  step_fn = jax.jit(functools.partial(trainer.train_step, model=task.model, optimizer=optimizer))
  losses = []
  for _ in range(_STEPS):
    batch = jax.device_put(pytypes.NestedMap(data.get_next()), device)
    state, metrics = step_fn(state, batch, train_rng)
    losses.append(float(metrics["loss"]))
  return tuple(losses)


class ShardedTrainingTest(absltest.TestCase):
  def test_mesh_1_4_2_matches_one_device(self):
    self.assertEqual(jax.device_count(), 8, "the BUILD target sets 8 host devices")
    job_log_dir = self.create_tempdir().full_path
    final = trainer.train_and_evaluate(_TinyLm(), job_log_dir)
    self.assertEqual(final["step"], _STEPS)
    (sharded,) = event_files.scalars_by_file(job_log_dir)
    sharded = [sharded[step] for step in sorted(sharded)]
    self.assertLen(sharded, _STEPS)
    reference = _single_device_losses()
    np.testing.assert_allclose(sharded, reference, rtol=2e-5)
    # The reference itself must be a training run, or matching it would prove little.
    self.assertLess(reference[-1], reference[0] - 0.2)
    # The weights really were split: the text file records each variable's sharding.
    with open(os.path.join(job_log_dir, "post_init_model_params.txt")) as f:
      lines = {line.split()[0]: line for line in f if not line.startswith("#")}
    # The tied [D, V] table: D over data, V over mdl (Pax's w_vd, transposed).
    self.assertIn("sharding=('data', 'mdl')", lines["lm/softmax/logits_ffn/linear/w"])
    self.assertIn(
      "sharding=('data', 'mdl')", lines["lm/transformer/x_layers_0/ff_layer/ffn_layer1/linear/w"]
    )

  def test_resume_on_another_mesh_continues_the_same_run(self):
    # Steps 1-3 on (1, 8, 1): batch 8 ways, weights over data only. Steps 4-6 resume that
    # checkpoint on (1, 4, 2): each array is read straight into its new shards.
    class First(_TinyLm):
      ICI_MESH_SHAPE = (1, 8, 1)
      NUM_TRAIN_STEPS = _STEPS // 2

    job_log_dir = self.create_tempdir().full_path
    trainer.train_and_evaluate(First(), job_log_dir)
    final = trainer.train_and_evaluate(_TinyLm(), job_log_dir)
    # The second run resumed at step 3: it logged only steps 4-6 (a fresh start would log 1-6).
    by_file = event_files.scalars_by_file(job_log_dir)
    self.assertEqual([sorted(f) for f in by_file], [[1, 2, 3], [4, 5, 6]])
    self.assertEqual(final["step"], _STEPS)
    losses = [loss for f in by_file for _, loss in sorted(f.items())]
    np.testing.assert_allclose(losses, _single_device_losses(), rtol=2e-5)

  def test_checkpoint_restores_onto_another_mesh(self):
    task = _TinyLm().task()
    optimizer, _ = train_states.make_optimizer(task)
    batch = pytypes.NestedMap(fdl.build(_TinyLm().train_dataset()).get_next())
    layouts = [
      train_states.state_layout(
        task,
        optimizer,
        partitioning.Partitioner(partitioning.create_mesh(shape)),
        batch,
        jax.random.PRNGKey(0),
      )
      for shape in ((1, 8, 1), (2, 2, 2))
    ]
    saved = layouts[0].initialize(jax.random.PRNGKey(1))
    job_log_dir = self.create_tempdir().full_path
    with checkpoints.Checkpointer(job_log_dir, save_interval_steps=1, max_to_keep=1) as ckpt:
      ckpt.save(0, saved, {})
    with checkpoints.CheckpointReader(job_log_dir) as reader:
      restored = reader.restore(layouts[1].abstract).state
    for old, new, sharding in zip(
      jax.tree.leaves(saved), jax.tree.leaves(restored), jax.tree.leaves(layouts[1].shardings)
    ):
      self.assertEqual(new.sharding, sharding)
      np.testing.assert_array_equal(np.asarray(new), np.asarray(old))
    query = restored.mdl_vars["params"]["lm"]["transformer"]["x_layers_0"]["self_attention"][
      "query"
    ]["w"]
    # [D=32, N=2, H=16]: D over data (2 ways), N over mdl (2 ways), replicated over replica.
    self.assertEqual(query.addressable_shards[0].data.shape, (16, 1, 16))
    self.assertNotEqual(
      jax.tree.leaves(saved.mdl_vars)[0].sharding, jax.tree.leaves(restored.mdl_vars)[0].sharding
    )

  def test_state_shardings_follow_the_rules(self):
    task = _TinyLm().task()
    optimizer, _ = train_states.make_optimizer(task)
    partitioner = partitioning.Partitioner(partitioning.create_mesh((1, 4, 2)))
    batch = pytypes.NestedMap(fdl.build(_TinyLm().train_dataset()).get_next())
    layout = train_states.state_layout(task, optimizer, partitioner, batch, jax.random.PRNGKey(0))
    state = layout.initialize(jax.random.PRNGKey(0))
    attention = state.mdl_vars["params"]["lm"]["transformer"]["x_layers_0"]["self_attention"]
    query = attention["query"]["w"]  # [D=32, N=2, H=16]
    # D over data (4 ways) and N over mdl (2 ways): each device holds [8, 1, 16].
    self.assertEqual(query.addressable_shards[0].data.shape, (8, 1, 16))
    # Adam's moments of that weight are sharded like the weight.
    (adam,) = [
      s
      for s in jax.tree.leaves(
        state.opt_states, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState)
      )
      if isinstance(s, optax.ScaleByAdamState)
    ]
    for moment in (adam.mu, adam.nu):
      self.assertEqual(
        moment["lm"]["transformer"]["x_layers_0"]["self_attention"]["query"]["w"].sharding,
        query.sharding,
      )
    self.assertEqual(state.step.sharding.spec, jax.sharding.PartitionSpec())

  def test_mesh_that_does_not_fit_names_both_shapes_and_the_device_count(self):
    with self.assertRaisesRegex(
      partitioning.MeshError,
      r"ICI_MESH_SHAPE=\[1, 4, 4\] x DCN_MESH_SHAPE=\[1, 1, 1\] needs 16 devices, but 8 cpu",
    ):
      partitioning.create_mesh((1, 4, 4))

  def test_indivisible_weight_is_reported_by_name(self):
    class Odd(_TinyLm):
      ICI_MESH_SHAPE = (1, 1, 8)  # 2 heads cannot be split over mdl=8.

    task = Odd().task()
    optimizer, _ = train_states.make_optimizer(task)
    partitioner = partitioning.Partitioner(partitioning.create_mesh((1, 1, 8)))
    batch = pytypes.NestedMap(fdl.build(Odd().train_dataset()).get_next())
    with self.assertRaisesRegex(
      partitioning.MeshError,
      r"\['self_attention'\]\['key'\]\['w'\]: dim 1 of shape \(32, 2, 16\) has size 2",
    ):
      train_states.state_layout(task, optimizer, partitioner, batch, jax.random.PRNGKey(0))


if __name__ == "__main__":
  absltest.main()
