"""Tests of checkpoint saving, naming, pruning and restoring."""

import datetime
import os
import shutil
import signal
import threading
import time
from unittest import mock

from absl.testing import absltest
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from paxml import checkpoints


class _State(flax.struct.PyTreeNode):
  step: jax.Array
  params: dict


def _state(step: int, scale: float = 1.0) -> _State:
  return _State(
    step=jnp.asarray(step, jnp.int32),
    params={"w": jnp.arange(6.0).reshape(2, 3) * scale, "b": jnp.ones(3) * scale},
  )


def _abstract(state):
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
    jax.eval_shape(lambda: state),
  )


def _step_dirs(directory):
  return sorted(os.listdir(directory))


class CheckpointerTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.job_log_dir = self.create_tempdir().full_path

  def _checkpointer(self, interval=5, keep=10):
    return checkpoints.Checkpointer(
      self.job_log_dir, save_interval_steps=interval, max_to_keep=keep
    )

  def test_saves_first_and_every_interval_with_8_digit_names(self):
    with self._checkpointer(interval=5) as ckpt:
      saved = [s for s in range(13) if ckpt.save(s, _state(s), {"num_batches": s})]
    self.assertEqual(saved, [0, 5, 10])
    directory = os.path.join(self.job_log_dir, "checkpoints")
    self.assertEqual(
      _step_dirs(directory),
      ["checkpoint_00000000", "checkpoint_00000005", "checkpoint_00000010"],
    )
    for name in _step_dirs(directory):
      self.assertRegex(name, r"^checkpoint_\d{8}$")
      step_dir = os.path.join(directory, name)
      items = [
        d
        for d in os.listdir(step_dir)
        if os.path.isdir(os.path.join(step_dir, d)) and not d.startswith("_")
      ]
      self.assertCountEqual(items, ["state", "train_input"])

  def test_restore_returns_what_was_saved(self):
    with self._checkpointer() as ckpt:
      ckpt.save(0, _state(0), {"seed": 2**100, "num_batches": 0})
      ckpt.save(5, _state(5, scale=3.0), {"seed": 2**100, "num_batches": 5})
    # A new Checkpointer, as after a restart.
    with self._checkpointer() as ckpt:
      self.assertEqual(ckpt.latest_step(), 5)
      restored = ckpt.restore(_abstract(_state(0)))
      self.assertEqual(restored.step, 5)
      self.assertIsInstance(restored.state, _State)
      self.assertEqual(int(restored.state.step), 5)
      np.testing.assert_array_equal(restored.state.params["w"], _state(5, 3.0).params["w"])
      np.testing.assert_array_equal(restored.state.params["b"], _state(5, 3.0).params["b"])
      self.assertEqual(restored.input_state, {"seed": 2**100, "num_batches": 5})
      older = ckpt.restore(_abstract(_state(0)), step=0)
      np.testing.assert_array_equal(older.state.params["b"], np.ones(3))

  def test_a_prepared_save_does_not_compile_the_checksums(self):
    with self._checkpointer() as ckpt:
      ckpt.prepare_save(_abstract(_state(0))).join()
      with mock.patch.object(
        checkpoints.integrity, "_checksums_jit", side_effect=AssertionError("compiled in save")
      ):
        self.assertTrue(ckpt.save(0, _state(0), {"num_batches": 0}))
    with self._checkpointer() as ckpt:  # The manifest's sums verify on restore.
      restored = ckpt.restore(_abstract(_state(0)))
      np.testing.assert_array_equal(restored.state.params["w"], _state(0).params["w"])

  def test_no_checkpoint_restores_nothing(self):
    with self._checkpointer() as ckpt:
      self.assertIsNone(ckpt.latest_step())
      self.assertIsNone(ckpt.restore(_abstract(_state(0))))

  def test_max_to_keep_prunes_the_oldest(self):
    with self._checkpointer(interval=5, keep=2) as ckpt:
      for s in range(0, 20, 5):
        self.assertTrue(ckpt.save(s, _state(s), {}))
      ckpt.close()
      self.assertEqual(ckpt.all_steps(), [10, 15])
    self.assertEqual(
      _step_dirs(os.path.join(self.job_log_dir, "checkpoints")),
      ["checkpoint_00000010", "checkpoint_00000015"],
    )

  def test_unverified_newer_steps_never_push_out_verified_ones(self):
    directory = os.path.join(self.job_log_dir, "checkpoints")
    with self._checkpointer(interval=1, keep=2) as ckpt:
      ckpt.save(0, _state(0), {})
      ckpt.save(1, _state(1), {})
      ckpt.wait_until_finished()
    # Steps 2 and 3 finished in Orbax but never got their manifest (killed in between).
    for step in (2, 3):
      shutil.copytree(
        os.path.join(directory, "checkpoint_00000001"),
        os.path.join(directory, f"checkpoint_{step:08d}"),
      )
      os.remove(os.path.join(directory, f"checkpoint_{step:08d}", "checksums.json"))
    with self._checkpointer(interval=1, keep=2) as ckpt:
      ckpt.save(4, _state(4), {}, force=True)
      ckpt.wait_until_finished()
    # The two newest verified ones are kept; the unverified ones are not counted (nor deleted).
    self.assertEqual(
      _step_dirs(directory),
      ["checkpoint_00000001", "checkpoint_00000002", "checkpoint_00000003", "checkpoint_00000004"],
    )

  def test_corrupt_latest_falls_back_and_is_moved_aside(self):
    with self._checkpointer(interval=1, keep=5) as ckpt:
      ckpt.save(0, _state(0), {"at": 0})
      ckpt.save(1, _state(1, scale=2.0), {"at": 1})
    os.remove(
      os.path.join(self.job_log_dir, "checkpoints", "checkpoint_00000001", "state", "_METADATA")
    )
    with self._checkpointer(interval=1, keep=5) as ckpt:
      with self.assertLogs("absl", "WARNING") as logs:
        restored = ckpt.restore(_abstract(_state(0)))
    self.assertEqual((restored.step, restored.input_state), (0, {"at": 0}))
    self.assertIn("checkpoint step 1 is corrupt: state/_METADATA is missing", logs.output[0])
    self.assertEqual(
      os.listdir(os.path.join(self.job_log_dir, "checkpoints_corrupt")), ["checkpoint_00000001"]
    )

  def test_a_missing_step_lists_the_steps(self):
    with self._checkpointer(interval=1) as ckpt:
      ckpt.save(0, _state(0), {})
      ckpt.save(2, _state(2), {})
      with self.assertRaisesRegex(
        checkpoints.CheckpointNotFoundError, r"no checkpoint at step 1 .* steps there are \[0, 2\]"
      ):
        ckpt.restore(_abstract(_state(0)), step=1)

  def test_force_saves_off_interval_but_never_an_old_step(self):
    with self._checkpointer(interval=5) as ckpt:
      self.assertTrue(ckpt.save(0, _state(0), {}))
      self.assertFalse(ckpt.save(3, _state(3), {}))
      self.assertTrue(ckpt.save(3, _state(3), {}, force=True))
      self.assertFalse(ckpt.save(0, _state(0), {}))
      ckpt.close()
      self.assertEqual(ckpt.all_steps(), [0, 3])

  def test_state_may_be_donated_right_after_save(self):
    # The trainer saves, then donates the same buffers to the next step. The
    # save must have copied them first, or the checkpoint holds garbage.
    state = _state(5, scale=2.0)
    want = np.asarray(state.params["w"]).copy()
    overwrite = jax.jit(lambda s: jax.tree.map(lambda x: x * 0 - 7, s), donate_argnums=0)
    with self._checkpointer() as ckpt:
      ckpt.save(5, state, {})
      new_state = overwrite(state)
      # Whether XLA could reuse the buffer depends on whether Orbax's background copy still
      # holds it at this moment (it varies run to run), so it is not asserted; when it did
      # reuse it, the buffer now holds -7s and only a copy made by save() keeps `want`.
      del new_state
    with self._checkpointer() as ckpt:
      restored = ckpt.restore(_abstract(_state(0)))
    np.testing.assert_array_equal(restored.state.params["w"], want)

  def test_keep_period_preserves_multiples_beyond_max_to_keep(self):
    ckpt = checkpoints.Checkpointer(
      self.job_log_dir, save_interval_steps=1, max_to_keep=2, keep_period=4
    )
    with ckpt:
      for s in range(10):
        ckpt.save(s, _state(s), {})
    with self._checkpointer() as ckpt:
      # Newest two (8, 9) plus every multiple of 4 that aged out (0, 4).
      self.assertEqual(ckpt.all_steps(), [0, 4, 8, 9])

  def test_keep_time_interval_preserves_old_checkpoints_spaced_in_time(self):
    ckpt = checkpoints.Checkpointer(
      self.job_log_dir, save_interval_steps=1, max_to_keep=1, save_keep_interval_duration="1s"
    )
    with ckpt:
      for s in range(6):
        ckpt.save(s, _state(s), {})
        ckpt.wait_until_finished()
        time.sleep(0.4)
    with self._checkpointer() as ckpt:
      steps = ckpt.all_steps()
    # Saved every ~0.4 s: an aged-out checkpoint survives when >= 1 s
    # passed since the previous survivor, so about every third one, plus
    # the newest (max_to_keep=1).
    self.assertEqual(steps[0], 0)
    self.assertEqual(steps[-1], 5)
    self.assertLess(len(steps), 6)
    self.assertGreater(len(steps), 2)
    for a, b in zip(steps[:-2], steps[1:-1]):
      self.assertGreaterEqual(b - a, 2)

  def test_interrupted_save_is_never_latest_and_is_cleaned_up(self):
    with self._checkpointer() as ckpt:
      ckpt.save(5, _state(5), {})
    directory = os.path.join(self.job_log_dir, "checkpoints")
    # What a save killed mid-write leaves behind: Orbax's temporary directory.
    tmp = os.path.join(directory, "checkpoint_00000010.orbax-checkpoint-tmp-1234")
    os.makedirs(os.path.join(tmp, "state"))
    with self._checkpointer() as ckpt:
      self.assertEqual(ckpt.latest_step(), 5)
      self.assertEqual(ckpt.all_steps(), [5])
      self.assertEqual(ckpt.restore(_abstract(_state(0))).step, 5)
    self.assertFalse(os.path.exists(tmp))

  def test_wait_until_finished_makes_the_save_visible(self):
    ckpt = self._checkpointer()
    ckpt.save(0, _state(0), {})
    ckpt.wait_until_finished()
    other = self._checkpointer()
    self.assertEqual(other.latest_step(), 0)
    other.close()
    ckpt.close()


class ParseDurationTest(absltest.TestCase):
  def test_units_numbers_and_errors(self):
    self.assertEqual(checkpoints.parse_duration("12h"), datetime.timedelta(hours=12))
    self.assertEqual(checkpoints.parse_duration("1h30m"), datetime.timedelta(minutes=90))
    self.assertEqual(checkpoints.parse_duration(90), datetime.timedelta(seconds=90))
    self.assertIsNone(checkpoints.parse_duration(None))
    for bad in ("12 hours", "h", "10x", ""):
      with self.assertRaisesRegex(ValueError, "duration"):
        checkpoints.parse_duration(bad)
    with self.assertRaisesRegex(ValueError, "whole seconds"):
      checkpoints.Checkpointer(
        self.create_tempdir().full_path,
        save_interval_steps=1,
        max_to_keep=1,
        save_keep_interval_duration="0.5s",
      )


class TreeCheckpointerTest(absltest.TestCase):
  def test_round_trip_of_mixed_tree_and_metadata(self):
    directory = self.create_tempdir().full_path
    tree = {
      "params": {"w": jnp.arange(6.0).reshape(2, 3)},
      "count": 7,  # A Python int (flax TrainState.step).
      "host": np.array([1, 2], np.int64),
      "scalar": np.float32(2.5),
      "empty": {},
    }
    with checkpoints.TreeCheckpointer(directory) as ckpt:
      self.assertTrue(ckpt.save(3, tree, metadata={"accuracy": 0.75}))
      self.assertFalse(ckpt.save(3, tree))  # Same step again: skipped.
    self.assertEqual(os.listdir(directory), ["checkpoint_00000003"])
    target = jax.tree.map(lambda x: x * 0, tree)
    with checkpoints.TreeCheckpointer(directory) as ckpt:
      restored = ckpt.restore(target)
      self.assertEqual(ckpt.read_metadata(), {"accuracy": 0.75})
    self.assertEqual(restored.step, 3)
    self.assertEqual(restored.metadata, {"accuracy": 0.75})
    self.assertEqual(restored.tree["count"], 7)
    self.assertIsInstance(restored.tree["count"], int)
    self.assertIsInstance(restored.tree["scalar"], np.float32)
    self.assertIsInstance(restored.tree["params"]["w"], jax.Array)
    self.assertIsInstance(restored.tree["host"], np.ndarray)
    np.testing.assert_array_equal(restored.tree["params"]["w"], tree["params"]["w"])
    np.testing.assert_array_equal(restored.tree["host"], [1, 2])

  def test_empty_directory_restores_none(self):
    with checkpoints.TreeCheckpointer(self.create_tempdir().full_path) as ckpt:
      self.assertIsNone(ckpt.restore({"a": np.zeros(2)}))
      self.assertIsNone(ckpt.read_metadata())

  def test_max_to_keep(self):
    directory = self.create_tempdir().full_path
    with checkpoints.TreeCheckpointer(directory, max_to_keep=2) as ckpt:
      for s in (1, 2, 3):
        ckpt.save(s, {"a": np.full(2, s)}, metadata=s)
      ckpt.wait_until_finished()
      self.assertEqual(ckpt.all_steps(), [2, 3])
      self.assertEqual(ckpt.read_metadata(2), 2)


class PreemptionGuardTest(absltest.TestCase):
  def test_sigterm_sets_the_flag_and_handlers_are_restored(self):
    previous = signal.getsignal(signal.SIGTERM)
    with checkpoints.PreemptionGuard() as guard:
      self.assertFalse(guard.requested)
      os.kill(os.getpid(), signal.SIGTERM)
      # The handler runs at the next bytecode boundary of the main thread.
      for _ in range(100):
        if guard.requested:
          break
        time.sleep(0.01)
      self.assertTrue(guard.requested)
      self.assertTrue(guard.requested_on_any_process())
    self.assertIs(signal.getsignal(signal.SIGTERM), previous)

  def test_loop_saves_then_stops_and_resumes_from_that_step(self):
    job_log_dir = self.create_tempdir().full_path
    with (
      checkpoints.Checkpointer(job_log_dir, save_interval_steps=100, max_to_keep=3) as ckpt,
      checkpoints.PreemptionGuard() as guard,
    ):
      step = 0
      while step < 50:
        ckpt.save(step, _state(step), {"pos": step})
        step += 1
        if step == 7:
          os.kill(os.getpid(), signal.SIGTERM)
          time.sleep(0.05)
        if guard.requested:
          ckpt.save(step, _state(step), {"pos": step}, force=True)
          break
    with checkpoints.Checkpointer(job_log_dir, save_interval_steps=100, max_to_keep=3) as ckpt:
      restored = ckpt.restore(_abstract(_state(0)))
    self.assertEqual(restored.step, 7)
    self.assertEqual(restored.input_state, {"pos": 7})

  def test_outside_main_thread_request_still_works(self):
    result = {}

    def body():
      with checkpoints.PreemptionGuard() as guard:
        guard.request()
        result["requested"] = guard.requested

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    self.assertTrue(result["requested"])


if __name__ == "__main__":
  absltest.main()
