"""The bobbin-style digits example, shrunken: trains, evaluates, keeps the best, resumes."""

import os

from absl.testing import absltest

from paxml.toolkit.examples import digits


class DigitsExampleTest(absltest.TestCase):

  def test_trains_evaluates_keeps_best_and_resumes(self):
    log_dir = self.create_tempdir().full_path
    results = digits.run(log_dir, max_steps=120, eval_interval=60)
    self.assertGreater(results["dev"], 0.8)  # Chance is 0.1.
    self.assertGreater(results["test"], 0.8)
    self.assertGreaterEqual(results["best_dev"], results["dev"])
    self.assertCountEqual(os.listdir(os.path.join(log_dir, "tensorboard")),
                          ["train", "dev", "test"])
    self.assertEqual(sorted(os.listdir(os.path.join(log_dir, "all_ckpts"))),
                     ["checkpoint_00000060", "checkpoint_00000120"])
    self.assertLen(os.listdir(os.path.join(log_dir, "best_ckpts")), 1)
    # A second run continues from step 120 instead of starting over.
    more = digits.run(log_dir, max_steps=150, eval_interval=1000)
    self.assertIn("checkpoint_00000150", os.listdir(os.path.join(log_dir, "all_ckpts")))
    self.assertGreater(more["test"], 0.8)


if __name__ == "__main__":
  absltest.main()
