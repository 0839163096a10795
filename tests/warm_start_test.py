"""Warm start (`TaskConfig.init_from_checkpoint_rules`): a new run's step-0 state takes the arrays
its rules name from another run's checkpoint, and keeps its own initial values elsewhere.

The source is a trained one-layer TinyLm; the target has two layers, both loaded from the
source's only layer, while its final layer norm is ignored by rule. The comparisons read the
target's own step-0 checkpoint back and compare it array by array with the source's checkpoint
(exact: a copy, no arithmetic).
"""

import dataclasses
import os
import shutil
import tempfile

from absl.testing import absltest
import jax
import numpy as np

from paxml import checkpoints
from paxml import tasks_lib
from paxml import trainer
from paxml import warm_start
from paxml.testing import compile_cache
from paxml.testing import tiny_lm

# The source and target runs compile the same programs again and again: the later
# compiles read the first's.
compile_cache.use_for_this_test()

_LAYER = "params/lm/transformer/x_layers_{}/"


class _Source(tiny_lm.TinyLm):
  INPUT_SEED = 5
  NUM_TRAIN_STEPS = 20
  SAVE_INTERVAL_STEPS = 100
  SUMMARY_INTERVAL_STEPS = 20


def _rules(source: str, **kwargs) -> dict[str, tasks_lib.CheckpointLoadingRules]:
  return {
    source: tasks_lib.CheckpointLoadingRules(
      load_rules=[
        (r"params/lm/transformer/x_layers_\d+/(.*)", "params/lm/transformer/x_layers_0/{}"),
        (r"params/(.*)", "params/{}"),
      ],
      ignore_rules=[r"params/lm/final_ln/.*"],
      **kwargs,
    )
  }


def _target(source: str, num_steps: int = 2, **rule_kwargs):
  class Target(tiny_lm.TinyLm):
    INPUT_SEED = 6
    NUM_LAYERS = 2
    NUM_TRAIN_STEPS = num_steps
    SAVE_INTERVAL_STEPS = 100
    SUMMARY_INTERVAL_STEPS = 1

    def task(self):
      return dataclasses.replace(
        super().task(), init_from_checkpoint_rules=_rules(source, **rule_kwargs)
      )

  return Target()


def _read_all(directory: str, step: int) -> dict[str, np.ndarray]:
  """Every array of the checkpoint at `step`, by name."""
  with checkpoints.CheckpointReader(directory) as reader:
    metadata = reader.state_metadata(step)
    targets = jax.tree.map(
      lambda m: jax.ShapeDtypeStruct(
        m.shape, m.dtype, sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0])
      ),
      metadata,
    )
    return {
      k: np.asarray(v)
      for k, v in warm_start.named_leaves(reader.restore_leaves(step, targets)).items()
    }


class PlanTest(absltest.TestCase):
  """The name mapping alone (no checkpoint)."""

  def test_first_matching_rule_wins_and_ignored_names_are_skipped(self):
    rules = tasks_lib.CheckpointLoadingRules(
      load_rules=[(r"params/a/(\d)/w", "params/a/0/w"), (r"params/(.*)", "params/{}")],
      ignore_rules=[r"params/b"],
    )
    loads = warm_start.plan(
      ["params/a/0/w", "params/a/1/w", "params/b", "step"],
      ["params/a/0/w", "params/b", "step"],
      rules,
    )
    self.assertEqual(loads, {"params/a/0/w": "params/a/0/w", "params/a/1/w": "params/a/0/w"})

  def test_patterns_match_the_whole_name(self):
    rules = tasks_lib.CheckpointLoadingRules(load_rules=[(r"params/a", "params/a")])
    self.assertEqual(
      warm_start.plan(["params/a", "params/ab", "x/params/a"], ["params/a", "params/ab"], rules),
      {"params/a": "params/a"},
    )

  def test_missing_source_name_names_the_rule_and_similar_names(self):
    rules = tasks_lib.CheckpointLoadingRules(load_rules=[(r"params/(.*)", "params/old/{}")])
    with self.assertRaisesRegex(
      KeyError,
      r"'params/old/dense/w'.*similar names there: "
      r"\['params/old/dense/kernel'\]",
    ):
      warm_start.plan(["params/dense/w"], ["params/old/dense/kernel", "step"], rules)

  def test_rules_matching_nothing_are_an_error(self):
    rules = tasks_lib.CheckpointLoadingRules(load_rules=[(r"parms/(.*)", "params/{}")])
    with self.assertRaisesRegex(ValueError, r"no array of the new state matches"):
      warm_start.plan(["params/w"], ["params/w"], rules)

  def test_bad_rules_are_rejected_when_written(self):
    with self.assertRaisesRegex(ValueError, "load_rules is empty"):
      tasks_lib.CheckpointLoadingRules(load_rules=[])
    with self.assertRaisesRegex(ValueError, "is not a regex"):
      tasks_lib.CheckpointLoadingRules(load_rules=[("params/(", "{}")])


class WarmStartTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.source_dir = tempfile.mkdtemp() + "/source"
    trainer.train_and_evaluate(_Source(), cls.source_dir)
    cls.source = _read_all(checkpoints.checkpoint_dir(cls.source_dir), _Source.NUM_TRAIN_STEPS)

  def test_step_zero_holds_the_mapped_arrays_then_a_restart_resumes_its_own_checkpoint(self):
    # One warm-started run serves both checks: its step-0 checkpoint, then its restart. The
    # source is a copy, deleted before the restart: a restart must not need the source any more.
    source_copy = self.create_tempdir().full_path + "/source"
    shutil.copytree(self.source_dir, source_copy)
    job_log_dir = self.create_tempdir().full_path
    trainer.train_and_evaluate(_target(source_copy, num_steps=2), job_log_dir)
    start = _read_all(checkpoints.checkpoint_dir(job_log_dir), 0)

    source_layer = {
      k[len(_LAYER.format(0)) :]: v
      for k, v in self.source.items()
      if k.startswith(_LAYER.format(0))
    }
    self.assertNotEmpty(source_layer)
    for layer in (0, 1):  # Both layers are copies of the source's only one.
      for name, value in source_layer.items():
        np.testing.assert_array_equal(start[_LAYER.format(layer) + name], value, err_msg=name)
    embedding = "params/lm/softmax/logits_ffn/linear/w"
    np.testing.assert_array_equal(start[embedding], self.source[embedding])
    # Ignored by rule: the target's own initial layer norm, not the trained one. Pax's LayerNorm
    # multiplies by `1 + scale`, so its initial scale and bias are both 0.
    for name in ("params/lm/final_ln/scale", "params/lm/final_ln/bias"):
      self.assertFalse(np.array_equal(self.source[name], start[name]), name)
      np.testing.assert_array_equal(start[name], 0.0)
    # No rule names the step or the optimizer state: they start fresh.
    self.assertEqual(int(start["step"]), 0)
    moments = [v for k, v in start.items() if k.startswith("opt_state") and "/mu/" in k]
    self.assertNotEmpty(moments)
    self.assertTrue(all(not np.any(m) for m in moments))

    shutil.rmtree(source_copy)
    final = trainer.train_and_evaluate(_target(source_copy, num_steps=4), job_log_dir)
    self.assertEqual(final["step"], 4)

  def test_source_checkpoint_step_is_chosen_by_rule_or_path(self):
    job_log_dir = self.create_tempdir().full_path
    with self.assertRaisesRegex(FileNotFoundError, r"no checkpoint at step 7 .*\[0, 20\]"):
      trainer.train_and_evaluate(_target(self.source_dir, step=7), job_log_dir)
    # A checkpoint_%08d path names its step: the source's initial state.
    step_dir = os.path.join(checkpoints.checkpoint_dir(self.source_dir), "checkpoint_00000000")
    initial = _read_all(checkpoints.checkpoint_dir(self.source_dir), 0)
    trainer.train_and_evaluate(_target(step_dir), job_log_dir)
    start = _read_all(checkpoints.checkpoint_dir(job_log_dir), 0)
    name = "params/lm/softmax/logits_ffn/linear/w"
    np.testing.assert_array_equal(start[name], initial[name])
    self.assertFalse(np.array_equal(start[name], self.source[name]))

  def test_shape_mismatch_names_both_shapes(self):
    class Wider(tiny_lm.TinyLm):
      MODEL_DIMS = 48

      def task(inner):  # pylint: disable=no-self-argument
        return dataclasses.replace(
          super().task(), init_from_checkpoint_rules=_rules(self.source_dir)
        )

    with self.assertRaisesRegex(ValueError, r"has shape \(48, 16\) but .* has \(32, 16\)"):
      trainer.train_and_evaluate(Wider(), self.create_tempdir().full_path)

  def test_source_without_checkpoints_is_an_error(self):
    empty = self.create_tempdir().full_path
    with self.assertRaisesRegex(FileNotFoundError, "has no finished checkpoint"):
      trainer.train_and_evaluate(_target(empty), self.create_tempdir().full_path)
    with self.assertRaisesRegex(FileNotFoundError, "no checkpoint directory at .*/missing"):
      trainer.train_and_evaluate(_target(empty + "/missing"), self.create_tempdir().full_path)


if __name__ == "__main__":
  absltest.main()
