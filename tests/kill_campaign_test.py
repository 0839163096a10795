"""A short kill campaign (tests/kill_campaign.py): 2 SIGKILLs of `python -m paxml.main` at random
moments, restarts, and every step's loss bit-identical to an uninterrupted run. The full campaign
(10 kills) is `python -m tests.kill_campaign`."""

import tempfile

from absl.testing import absltest

from paxml.testing import compile_cache
from tests import kill_campaign

# The reference and every restart compile the same programs: the later compiles read the first's.
compile_cache.use_for_this_test()


class KillCampaignTest(absltest.TestCase):
  def test_random_sigkills_leave_the_losses_bit_identical(self):
    workdir = tempfile.mkdtemp(dir=absltest.get_default_test_tmpdir())
    outcome = kill_campaign.run_campaign(kills=2, seed=1, workdir=workdir)
    self.assertLen(outcome.kills, 2)
    self.assertEqual(outcome.runs, 3)

  def test_a_changed_loss_is_caught(self):
    """The comparison can fail: one float32 ulp apart is a difference."""
    a = 1.2345678
    b = float(kill_campaign.np.nextafter(kill_campaign.np.float32(a), kill_campaign.np.float32(2)))
    self.assertNotEqual(kill_campaign._bits(a), kill_campaign._bits(b))
    with self.assertRaisesRegex(AssertionError, "starts at step 7"):
      kill_campaign._check_no_gaps([{1: 0.0, 2: 0.0, 5: 0.0}, {7: 0.0}])


if __name__ == "__main__":
  absltest.main()
