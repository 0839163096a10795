"""Tests of the retention rule."""

from absl.testing import absltest

from paxml import checkpoint_retention


class StepsToRemoveTest(absltest.TestCase):
  def test_newest_max_to_keep_of_the_verified_steps(self):
    self.assertEqual(
      checkpoint_retention.steps_to_remove([0, 10, 20, 30], {}, max_to_keep=2), [0, 10]
    )
    self.assertEqual(checkpoint_retention.steps_to_remove([0, 10], {}, max_to_keep=None), [])

  def test_keep_period_and_time_interval(self):
    complete = [0, 10, 20, 30, 40, 50]
    self.assertEqual(
      checkpoint_retention.steps_to_remove(complete, {}, max_to_keep=1, keep_period=20), [10, 30]
    )
    saved_at = {0: 0.0, 10: 30.0, 20: 70.0, 30: 100.0, 40: 150.0, 50: 160.0}
    # Kept for time: 0, then the first at least 60 s later (20 at 70 s), then 40 (150 s).
    self.assertEqual(
      checkpoint_retention.steps_to_remove(complete, saved_at, max_to_keep=1, keep_seconds=60),
      [10, 30],
    )

  def test_set_aside_steps_are_bounded_once_a_newer_step_verifies(self):
    names = [
      "checkpoint_00000002",
      "checkpoint_00000004",
      "checkpoint_00000004.1",
      "checkpoint_00000006.unfinished",
      "checkpoint_00000008",
      "checkpoint_00000010.unfinished",
      "checkpoint_00000012",
      "notes.txt",
    ]
    remove = checkpoint_retention.set_aside_to_remove
    # Nothing verifies yet: everything stays.
    self.assertEqual(remove(names, None), [])
    # Step 10 verifies: the unfinished 6 goes, and of the damaged 2, 4, 4.1, 8 the three newest
    # stay; 10 and 12 are not older than the verified step.
    self.assertEqual(remove(names, 10), ["checkpoint_00000002", "checkpoint_00000006.unfinished"])
    self.assertEqual(
      remove(names, 14),
      [
        "checkpoint_00000002",
        "checkpoint_00000004",
        "checkpoint_00000006.unfinished",
        "checkpoint_00000010.unfinished",
      ],
    )


if __name__ == "__main__":
  absltest.main()
