"""Tests of the warning for misspelt UPPERCASE experiment fields."""

from absl.testing import absltest

from paxml import experiment_lint


class _Base:
  NUM_TRAIN_STEPS = 100
  LEARNING_RATE = 1e-3
  MODEL_DIMS = 8

  def task(self):
    return (self.NUM_TRAIN_STEPS, self.LEARNING_RATE, self.MODEL_DIMS)

  def datasets(self):
    return []


class _Typo(_Base):
  NUM_TRIAN_STEPS = 5  # Two letters swapped: one edit.
  LEARNING_RATES = 1.0  # One letter added.
  MY_OWN_SETTING = 3  # Not near any read field: the experiment's own business.


class ExperimentLintTest(absltest.TestCase):
  def test_one_edit_covers_swaps_inserts_deletes_and_replacements(self):
    for a, b in [
      ("NUM_TRIAN_STEPS", "NUM_TRAIN_STEPS"),
      ("LR", "LRS"),
      ("ABC", "AC"),
      ("MODEL_DIMS", "MODEL_DIMZ"),
    ]:
      self.assertTrue(experiment_lint._one_edit_apart(a, b), (a, b))
    for a, b in [("ABC", "ABC"), ("ABCD", "BADC"), ("NUM_LAYERS", "NUM_HEADS")]:
      self.assertFalse(experiment_lint._one_edit_apart(a, b), (a, b))

  def test_unread_near_misses_are_warned_about_once_each(self):
    with self.assertLogs("absl", "WARNING") as logs:
      pairs = experiment_lint.warn_near_misses(_Typo(), "Typo")
    self.assertEqual(
      pairs, [("LEARNING_RATES", "LEARNING_RATE"), ("NUM_TRIAN_STEPS", "NUM_TRAIN_STEPS")]
    )
    self.assertLen(logs.output, 2)
    self.assertIn(
      "Typo.NUM_TRIAN_STEPS is never read; did you mean NUM_TRAIN_STEPS? "
      "(NUM_TRAIN_STEPS stays at 100.)",
      logs.output[1],
    )

  def test_a_clean_experiment_gives_no_warning(self):
    self.assertEqual(experiment_lint.unread_near_misses(_Base()), [])


if __name__ == "__main__":
  absltest.main()
