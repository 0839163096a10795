"""End-to-end tests of the train loop on a tiny model (a few seconds each)."""

import functools
import json
import os

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml import synthetic_input
from paxml import tasks_lib
from paxml import train_states
from paxml import trainer
from paxml.testing import event_files
from paxml.testing import tiny_lm
from praxis import optimizers
from praxis import pytypes


class _TinyLm(tiny_lm.TinyLm):
  """30 steps; subclasses change the step count."""

  NUM_TRAIN_STEPS = 30
  INPUT_SEED = 5


class _TinyLm40(_TinyLm):
  NUM_TRAIN_STEPS = 40


def _scalars(job_log_dir):
  """Returns {tag: {step: value}} from every train event file."""
  return event_files.read_scalars(os.path.join(job_log_dir, "summaries", "train"))


def _checkpoint_names(job_log_dir):
  return sorted(os.listdir(os.path.join(job_log_dir, "checkpoints")))


def _saved_input_position(job_log_dir, step):
  path = os.path.join(
    job_log_dir, "checkpoints", f"checkpoint_{step:08d}", "train_input", "metadata"
  )
  with open(path) as f:
    return json.load(f)["num_batches"]


class TrainAndEvaluateTest(absltest.TestCase):
  def test_trains_saves_summarizes_and_resumes(self):
    job_log_dir = self.create_tempdir().full_path

    first = trainer.train_and_evaluate(_TinyLm(), job_log_dir)

    self.assertEqual(first["step"], 30)
    scalars = _scalars(job_log_dir)
    for tag in (
      "loss",
      "Metrics/fraction_of_correct_next_step_preds",
      "lr",
      "learning/raw_grad_norm",
      "learning/clipped_grad_norm",
      "Steps/sec",
      "tokens/sec",
      "Metrics/total_loss",
      "Metrics/log_pplx",
    ):
      self.assertIn(tag, scalars)
    self.assertEqual(sorted(scalars["loss"]), [5, 10, 15, 20, 25, 30])
    self.assertAlmostEqual(scalars["lr"][30], 1e-2, places=6)
    # 8 rows x 16 tokens per step.
    self.assertAlmostEqual(scalars["tokens/sec"][30] / scalars["Steps/sec"][30], 128, places=3)
    self.assertNotIn("MFU", scalars)  # CPU: no known peak, so no invented MFU.
    # Learning: the loss falls well below its start (about ln(16) = 2.77).
    self.assertLess(scalars["loss"][30], scalars["loss"][5] - 0.5)
    self.assertAlmostEqual(first["loss"], scalars["loss"][30], places=5)
    # The initial state, every 10 steps, and the end.
    self.assertEqual(
      _checkpoint_names(job_log_dir),
      [
        "checkpoint_00000000",
        "checkpoint_00000010",
        "checkpoint_00000020",
        "checkpoint_00000030",
      ],
    )

    with self.assertLogs("absl", "INFO") as logs:
      second = trainer.train_and_evaluate(_TinyLm40(), job_log_dir)

    self.assertIn(
      f"Restored checkpoint at step 30 from {os.path.join(job_log_dir, 'checkpoints')}; resuming",
      "\n".join(logs.output),
    )
    self.assertTrue(any("step 40/40 loss" in line for line in logs.output))
    self.assertEqual(second["step"], 40)
    self.assertIn("checkpoint_00000040", _checkpoint_names(job_log_dir))
    scalars = _scalars(job_log_dir)
    # Summaries continue at 35, not again from 5.
    self.assertEqual(sorted(scalars["loss"]), [5, 10, 15, 20, 25, 30, 35, 40])
    # The restored model is the trained one, not a fresh initialisation.
    self.assertLess(scalars["loss"][35], scalars["loss"][5] - 0.5)
    # The input continued its stream: batch 40 is next, not batch 10.
    self.assertEqual(_saved_input_position(job_log_dir, 40), 40)

    with self.assertLogs("absl", "INFO") as logs:
      third = trainer.train_and_evaluate(_TinyLm40(), job_log_dir)
    self.assertEqual(third, {"step": 40.0})
    self.assertIn(
      "Already at step 40 of num_train_steps=40; nothing to train", "\n".join(logs.output)
    )

    # Same data, per-step randomness and optimizer state: stopping at 30 and
    # resuming must end where an uninterrupted 40-step run ends.
    straight = trainer.train_and_evaluate(_TinyLm40(), self.create_tempdir().full_path)
    for key in ("loss", "Metrics/fraction_of_correct_next_step_preds", "learning/raw_grad_norm"):
      self.assertAlmostEqual(second[key], straight[key], places=5, msg=key)


def _batch(batch_size=4, seed=0):
  return pytypes.NestedMap(
    synthetic_input.SyntheticLmInput(
      batch_size=batch_size, seq_len=16, vocab_size=16, seed=seed
    ).get_next()
  )


def _sgd(**kwargs) -> train_states.Optimizer:
  task = tasks_lib.TaskConfig(
    model=tiny_lm.tiny_language_model(),
    num_train_steps=1,
    optimizer=optimizers.Sgd.HParams.config(**kwargs),
  )
  return train_states.make_optimizer(task)[0]


def _xent(logits, labels, weights):
  """Weighted mean cross-entropy in numpy: the reference for the model's total_loss."""
  logits = np.asarray(logits, np.float64)
  log_probs = (
    logits
    - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
    - logits.max(-1, keepdims=True)
  )
  picked = np.take_along_axis(log_probs, np.asarray(labels)[..., None], -1)[..., 0]
  return float(-(picked * weights).sum() / weights.sum())


class TrainStepTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.task = _TinyLm().task()
    cls.optimizer, cls.learning_rate_fn = train_states.make_optimizer(cls.task)
    cls.batch = _batch()
    # Jitted: op-by-op (eager) execution of these takes several seconds.
    cls.state = jax.jit(
      lambda r: nn.unbox(train_states.init_state(cls.task.model, cls.optimizer, r, cls.batch))
    )(jax.random.PRNGKey(0))

  def _step_fn(self, model=None, **kwargs):
    kwargs.setdefault("optimizer", self.optimizer)
    return jax.jit(functools.partial(trainer.train_step, model=model or self.task.model, **kwargs))

  def _state(self, optimizer):
    return jax.jit(
      lambda r: nn.unbox(train_states.init_state(self.task.model, optimizer, r, self.batch))
    )(jax.random.PRNGKey(0))

  def _step(self, state, batch=None, **kwargs):
    return self._step_fn(**kwargs)(
      state, self.batch if batch is None else batch, jax.random.PRNGKey(1)
    )

  def test_one_step_updates_params_and_reports_the_loss(self):
    new_state, metrics = self._step(self.state)
    self.assertEqual(int(new_state.step), 1)
    moved = jax.tree.map(
      lambda a, b: float(np.abs(a - b).max()),
      new_state.mdl_vars["params"],
      self.state.mdl_vars["params"],
    )
    self.assertTrue(all(d > 0 for d in jax.tree.leaves(moved)))
    logits = jax.jit(
      lambda p, b: self.task.model.apply(
        {"params": p}, b.ids, b.paddings, method=lambda m, i, pad: m.lm(i, pad).logits
      )
    )(self.state.mdl_vars["params"], self.batch)
    loss = _xent(logits, self.batch["labels"], self.batch["weights"])
    self.assertAlmostEqual(float(metrics["loss"]), loss, places=5)
    self.assertAlmostEqual(float(metrics["Metrics/total_loss"]), loss, places=5)

  def test_sown_aux_losses_are_part_of_the_training_loss(self):
    model = tiny_lm.tiny_language_model(z_loss_weight=0.5)
    _, metrics = self._step(self.state, model=model)
    aux = float(metrics["Metrics/aux_loss"])
    self.assertGreater(aux, 0.0)
    self.assertAlmostEqual(
      float(metrics["loss"]), float(metrics["Metrics/avg_xent"]) + aux, places=5
    )

  def test_step_is_a_pure_function(self):
    _, a = self._step(self.state)
    _, b = self._step(self.state)
    self.assertEqual(float(a["loss"]), float(b["loss"]))
    self.assertEqual(float(a["learning/raw_grad_norm"]), float(b["learning/raw_grad_norm"]))

  def test_the_optimizer_clips_and_the_step_reports_raw_and_clipped_norms(self):
    # SGD with learning rate 1: the update is minus the (clipped) gradient, so the weights move
    # by exactly the clipped norm.
    sgd = _sgd(learning_rate=1.0, clip_gradient_norm_to_value=1e-3)
    new_state, metrics = self._step(self._state(sgd), optimizer=sgd)
    raw = float(metrics["learning/raw_grad_norm"])
    self.assertGreater(raw, 1e-3)
    self.assertAlmostEqual(float(metrics["learning/clipped_grad_norm"]), 1e-3, places=7)
    moved = optax.global_norm(
      jax.tree.map(jnp.subtract, new_state.mdl_vars["params"], self.state.mdl_vars["params"])
    )
    self.assertAlmostEqual(float(moved), 1e-3, places=6)
    sgd = _sgd(learning_rate=1.0)
    new_state, unclipped = self._step(self._state(sgd), optimizer=sgd)
    self.assertAlmostEqual(float(unclipped["learning/clipped_grad_norm"]), raw, places=5)
    moved = optax.global_norm(
      jax.tree.map(jnp.subtract, new_state.mdl_vars["params"], self.state.mdl_vars["params"])
    )
    self.assertAlmostEqual(float(moved), raw, places=4)

  def test_weight_decay_follows_the_optimizer_config(self):
    # Zero gradients (all weights 0) leave only the decay: w -= lr * wd * w.
    batch = pytypes.NestedMap(self.batch, weights=np.zeros_like(self.batch.weights))
    sgd = _sgd(
      learning_rate=0.5, weight_decay=0.1, weight_decay_exclude=optimizers.EXCLUDE_BIASES_AND_NORMS
    )
    new_state, _ = self._step(self._state(sgd), batch, optimizer=sgd)
    for path, new in jax.tree_util.tree_flatten_with_path(new_state.mdl_vars["params"])[0]:
      old = self.state.mdl_vars["params"]
      for key in path:
        old = old[key.key]
      name = jax.tree_util.keystr(path)
      expected = old if name.endswith(("['b']", "['bias']", "['scale']")) else old * 0.95
      np.testing.assert_allclose(new, expected, rtol=1e-6, atol=1e-8, err_msg=name)

  def test_microbatches_give_the_full_batch_update(self):
    batch = _batch(batch_size=8, seed=3)
    # Unequal weights per microbatch: plain averaging of microbatch means would differ.
    batch.weights = np.where(np.arange(8)[:, None] % 4 == 1, 0.0, batch.weights)
    whole_state, whole = self._step(self.state, batch)
    micro_state, micro = self._step(self.state, batch, num_microbatches=4)
    self.assertAlmostEqual(float(micro["loss"]), float(whole["loss"]), places=5)
    self.assertAlmostEqual(
      float(micro["learning/raw_grad_norm"]), float(whole["learning/raw_grad_norm"]), places=5
    )
    self.assertAlmostEqual(
      float(micro["Metrics/num_predictions"]), float(whole["Metrics/num_predictions"]) / 4, places=3
    )
    # Adam's first step is lr * g / (|g| + 1e-6): for a weight whose gradient is near 1e-6 the
    # summation-order rounding of g is amplified ~lr / (4 * 1e-6) times, so a few weights differ
    # by ~1e-5; a wrong combination of microbatches would move them by ~lr = 1e-2.
    for a, b in zip(
      jax.tree.leaves(micro_state.mdl_vars["params"]),
      jax.tree.leaves(whole_state.mdl_vars["params"]),
    ):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=3e-5)

  def test_nan_loss_skips_the_update_and_counts_it(self):
    bad = pytypes.NestedMap(self.batch, weights=np.full_like(self.batch.weights, np.nan))
    new_state, metrics = self._step(self.state, bad)
    self.assertEqual(int(new_state.step), 1)
    self.assertEqual(int(new_state.extra_state["skipped_steps"]), 1)
    self.assertEqual(float(metrics["learning/is_valid_step"]), 0.0)
    for a, b in zip(
      jax.tree.leaves((new_state.mdl_vars["params"], new_state.opt_states)),
      jax.tree.leaves((self.state.mdl_vars["params"], self.state.opt_states)),
    ):
      np.testing.assert_array_equal(a, b)
    # The next good step applies Adam's *first* update (its count did not advance).
    after, good = self._step(new_state)
    fresh, first = self._step(self.state)
    self.assertEqual(int(after.extra_state["skipped_steps"]), 1)
    self.assertAlmostEqual(float(good["loss"]), float(first["loss"]), places=6)
    self.assertEqual(float(good["lr"]), float(first["lr"]))
    for a, b in zip(
      jax.tree.leaves(after.mdl_vars["params"]), jax.tree.leaves(fresh.mdl_vars["params"])
    ):
      np.testing.assert_allclose(a, b, rtol=1e-6)

  def test_warmup_shorthand_and_the_lr_summary(self):
    task = tasks_lib.TaskConfig(
      model=self.task.model, learning_rate=0.1, num_train_steps=10, warmup_steps=4
    )
    optimizer, learning_rate_fn = train_states.make_optimizer(task)
    np.testing.assert_allclose(
      [float(learning_rate_fn(s)) for s in (0, 2, 4, 9)], [0.0, 0.05, 0.1, 0.1], atol=1e-7
    )
    state = self._state(optimizer)
    step = self._step_fn(optimizer=optimizer)
    lrs = []
    for _ in range(3):
      state, metrics = step(state, self.batch, jax.random.PRNGKey(1))
      lrs.append(float(metrics["lr"]))
    np.testing.assert_allclose(lrs, [0.0, 0.025, 0.05], atol=1e-7)

  def test_task_needs_an_optimizer(self):
    with self.assertRaisesRegex(ValueError, "needs an optimizer"):
      tasks_lib.TaskConfig(model=self.task.model, num_train_steps=1)
    with self.assertRaisesRegex(ValueError, "shorthand"):
      tasks_lib.TaskConfig(
        model=self.task.model,
        num_train_steps=1,
        learning_rate=0.1,
        optimizer=optimizers.Sgd.HParams.config(),
      )


if __name__ == "__main__":
  absltest.main()
