"""EvalResults/EvalTask loops, multi-process lock-step, keep-best across restarts."""

import os
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml.toolkit import evaluation
from paxml.toolkit import pmap_util
from paxml.toolkit import training


class Accuracy(evaluation.EvalResults):
  correct: np.ndarray
  total: np.ndarray

  def reduce(self, other):
    return Accuracy(self.correct + other.correct, self.total + other.total)

  def is_better_than(self, other):
    return self.accuracy > other.accuracy

  @property
  def accuracy(self):
    return float(self.correct) / max(float(self.total), 1.0)

  def write_to_tensorboard(self, current_train_state, writer):
    writer.scalar("accuracy", self.accuracy, int(current_train_state.step))


class ThresholdTask(evaluation.EvalTask):
  """Predicts x > threshold, where threshold is params['t']."""

  def __init__(self):
    self.calls = []

  def create_eval_results(self, dataset_name):
    return Accuracy(np.int64(0), np.int64(0))

  def evaluate(self, batch, model_vars):
    self.calls.append(batch is None)
    if batch is None:
      return Accuracy(np.int64(0), np.int64(0))
    pred = batch["x"] > model_vars["params"]["t"]
    return Accuracy(np.int64(np.sum(pred == batch["y"])), np.int64(len(pred)))


def _batches(xs, ys, size=2):
  return lambda: [
    {"x": np.asarray(xs[i : i + size]), "y": np.asarray(ys[i : i + size])}
    for i in range(0, len(xs), size)
  ]


def _state(t, step):
  return training.TrainState.create(
    apply_fn=None, params={"t": jnp.float32(t)}, tx=optax.sgd(1.0)
  ).replace(step=jnp.int32(step))


class EvalLoopTest(absltest.TestCase):
  def test_eval_batches_reduces_all_batches(self):
    task = ThresholdTask()
    xs = [0.1, 0.6, 0.9, 0.4, 0.7]
    ys = [False, True, True, True, False]
    results = evaluation.eval_batches(task, "dev", _batches(xs, ys)(), {"params": {"t": 0.5}})
    want = sum((x > 0.5) == y for x, y in zip(xs, ys))
    self.assertEqual((int(results.correct), int(results.total)), (want, 5))

  def test_wrong_result_type_is_a_type_error(self):
    task = ThresholdTask()
    task.evaluate = lambda batch, mv: {"correct": 1}
    with self.assertRaisesRegex(TypeError, "must be compatible"):
      evaluation.eval_batches(task, "dev", [{"x": 1}], None)

  def test_exhausted_host_keeps_calling_until_every_host_is_done(self):
    # This host has 2 batches, another has 4: it must call evaluate(None)
    # twice more, and the final result adds the other host's counts.
    other_host_active = iter([True, True, True, True, False])
    task = ThresholdTask()

    def gather(tree):  # A list with one tree per process.
      if isinstance(tree, bool):  # The "still active?" flag.
        return [tree, next(other_host_active)]
      return [tree, jax.tree.map(lambda x: np.asarray(10, x.dtype), tree)]

    with (
      mock.patch.object(jax, "process_count", return_value=2),
      mock.patch.object(pmap_util, "gather_from_jax_processes", side_effect=gather),
    ):
      results = evaluation.eval_batches(
        task, "dev", _batches([0.9, 0.1, 0.8, 0.2], [True] * 4)(), {"params": {"t": 0.5}}
      )
    self.assertEqual(task.calls, [False, False, True, True])
    self.assertEqual((int(results.correct), int(results.total)), (2 + 10, 4 + 10))

  def test_unshard_and_reduce(self):
    sharded = Accuracy(np.array([1, 2, 3]), np.array([4, 4, 4]))
    r = sharded.unshard_and_reduce()
    self.assertEqual((int(r.correct), int(r.total)), (6, 12))

  def test_sampled_set_is_a_bounded_uniform_sample(self):
    np.random.seed(0)
    s = evaluation.SampledSet(3)
    for i in range(10):
      s = s.add(i)
    self.assertLen(s, 3)
    self.assertTrue(set(s) <= set(range(10)))
    self.assertLen(s.union(range(100, 105)), 3)  # any iterable
    self.assertLen(evaluation.SampledSet(5).union(range(2)), 2)
    # Uniformity: over many draws every element is picked about equally.
    counts = np.zeros(10)
    for _ in range(600):
      for v in evaluation.SampledSet(3).union(range(10)):
        counts[v] += 1
    self.assertLess(np.abs(counts / 600 - 0.3).max(), 0.1)


class RunEvalKeepBestTest(absltest.TestCase):
  def _run_eval(self, tb=None):
    gens = {
      "dev": _batches([0.1, 0.6, 0.9, 0.4], [False, True, True, True]),
      "test": _batches([0.3, 0.8], [False, True]),
    }
    return ThresholdTask().make_cron_action(gens, tensorboard_root_path=tb)

  def test_keep_best_saves_only_improvements_and_survives_restart(self):
    dest = self.create_tempdir().full_path
    tb = self.create_tempdir().full_path
    run_eval = self._run_eval(tb)
    processed = []
    run_eval.add_result_processor(lambda r, s: processed.append(int(s.step)))
    action = run_eval.keep_best_checkpoint("dev", dest)
    # dev accuracy: t=0.95 -> 1/4, t=0.5 -> 3/4, t=0.7 -> 2/4, t=0.3 -> 4/4.
    self.assertIsNotNone(action(_state(0.95, 1)).saved_train_state)
    self.assertIsNotNone(action(_state(0.5, 2)).saved_train_state)
    out = action(_state(0.7, 3))
    self.assertIsNone(out.saved_train_state)
    self.assertEqual(out.current_best.accuracy, 0.75)
    action.wait_until_finished()
    self.assertEqual(processed, [1, 2, 3])
    # A restarted job re-reads results.json: 0.7 (2/4) is still worse.
    restarted = self._run_eval().keep_best_checkpoint("dev", dest)
    self.assertIsNone(restarted(_state(0.7, 4)).saved_train_state)
    self.assertIsNotNone(restarted(_state(0.3, 5)).saved_train_state)
    restarted.wait_until_finished()
    best = training.initialize_train_state(
      None, {"params": {"t": jnp.float32(0)}}, optax.sgd(1.0), checkpoint_path=dest
    )
    self.assertEqual(int(best.step), 5)
    self.assertAlmostEqual(float(best.params["t"]), 0.3, places=6)
    self.assertCountEqual(os.listdir(tb), ["dev", "test"])

  def test_no_io_in_follower_processes(self):
    dest = self.create_tempdir().full_path
    with mock.patch.object(jax, "process_index", return_value=1):
      action = self._run_eval().keep_best_checkpoint("dev", dest)
      self.assertIsNotNone(action(_state(0.5, 2)).saved_train_state)
    self.assertEqual(os.listdir(dest), [])


if __name__ == "__main__":
  absltest.main()
