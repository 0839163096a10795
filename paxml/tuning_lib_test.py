"""Tests of paxml/tuning_lib.py: a local study over a tiny experiment whose metric is a known
function of its decisions, the metric keys `should_early_stop` reports, and the last-report
rule."""

import itertools
import tempfile

from absl.testing import absltest
from clu import platform
from etils import epath
from paxml import automl
from paxml import base_experiment
from paxml import trainer_lib
from paxml import tuning_lib
from praxis import pax_fiddle
import pyglove as pg

_RATES = [0.5, 0.25, 0.125]
_WIDTHS = [1, 2, 4]


class _Quadratic(base_experiment.BaseExperiment):
  """Its eval 'score' is -(rate * width - 0.5)^2, best at rate * width = 0.5."""

  RATE = pg.oneof(_RATES)

  def datasets(self):
    return []

  def task(self):
    return {"rate": self.RATE, "width": pg.oneof(_WIDTHS, name="width")}

  def search(self):
    return automl.SearchHParams(
      search_algorithm=pax_fiddle.Config(automl.Sweeping),
      search_reward=pax_fiddle.Config(automl.SingleObjective, metric=automl.Metric.eval("score")),
      cross_step_metric_aggregator=pax_fiddle.Config(automl.MetricsWithMaxValue),
    )


def _score(rate, width, step):
  return -((rate * width - 0.5) ** 2) - 1.0 / step


def _trial(experiment, work_unit, job_log_dir, early_stopping_fn):
  del work_unit, job_log_dir
  task = experiment.task()
  for step in (10, 20):  # Scores improve with the step: the max-value aggregator picks step 20.
    metrics = tuning_lib.EvalMetrics(
      input_names=["dev"],
      metrics_list=[{"score": _score(task["rate"], task["width"], step)}],
      steps_per_sec=1.0,
    )
    if tuning_lib.should_early_stop(
      early_stopping_fn, global_step=step, is_last_ckpt=step == 20, eval_metrics=metrics
    ):
      return


class TuneTest(absltest.TestCase):
  def test_sweep_finds_the_known_optimum(self):
    job_dir = epath.Path(tempfile.mkdtemp())
    tuning_lib.tune(_trial, _Quadratic(), platform.work_unit(), job_dir, study="local_ours_quad")
    trials = pg.tuning.poll_result("local_ours_quad").trials
    self.assertLen(trials, len(_RATES) * len(_WIDTHS))  # The whole grid.
    grid = {(r, w): _score(r, w, 20) for r, w in itertools.product(_RATES, _WIDTHS)}
    rewards = sorted(t.final_measurement.reward for t in trials)
    self.assertSequenceAlmostEqual(rewards, sorted(grid.values()))
    best = max(trials, key=lambda t: t.final_measurement.reward)
    self.assertAlmostEqual(best.final_measurement.reward, max(grid.values()))
    self.assertTrue((job_dir / "search_space.txt").exists())

  def test_search_space_and_dirname(self):
    space = tuning_lib.get_search_space(_Quadratic())
    self.assertEqual(sorted(space.hyper_dict), ["RATE", "width"])
    names = tuning_lib.TrialDirectoryNameGenerator(epath.Path("/jobs"), space)
    with space.apply(pg.DNA([2, 1])):
      self.assertEqual(str(names.dirname(7)), "/jobs/7/RATE=1.250e-01|width=2")


class ShouldEarlyStopTest(absltest.TestCase):
  def test_reported_keys(self):
    seen = []

    def record(metrics, mode, step, is_last, ckpt):
      seen.append((metrics, mode, step, is_last, ckpt))
      return False

    self.assertFalse(
      tuning_lib.should_early_stop(
        record,
        global_step=5,
        is_last_ckpt=True,
        train_steps_per_sec=2.0,
        num_params=9.0,
        train_weighted_scalars={"loss": (3.0, 1.0)},
        decode_metrics=tuning_lib.DecodeMetrics(
          input_names=["a", "b"], metrics_list=[{"f1": 0.5}, None], steps_per_sec=3.0
        ),
      )
    )
    metrics, mode, step, is_last, _ = seen[0]
    self.assertEqual(
      metrics,
      {
        "train/loss": 3.0,
        "decode_test_a/f1": 0.5,
        "train_steps_per_sec": 2.0,
        "decode_steps_per_sec": 3.0,
        "num_params": 9.0,
      },
    )
    self.assertEqual(mode, trainer_lib.RunningMode.TRAIN | trainer_lib.RunningMode.DECODE)
    self.assertEqual((step, is_last), (5, True))
    self.assertFalse(tuning_lib.should_early_stop(None, global_step=1, is_last_ckpt=False))


class IsLastCheckpointTest(absltest.TestCase):
  def test_no_further_eval_is_the_last(self):
    mode = trainer_lib.RunningMode
    # 100 steps remain and evals come every 150: no eval is left.
    self.assertTrue(tuning_lib.is_last_checkpoint(mode.TRAIN | mode.EVAL, 900, 1000, 150, 10, 10))
    self.assertFalse(tuning_lib.is_last_checkpoint(mode.TRAIN | mode.EVAL, 900, 1000, 50, 10, 10))
    # A separate eval job waits for checkpoints: the save interval gates it.
    self.assertTrue(tuning_lib.is_last_checkpoint(mode.EVAL, 900, 1000, 50, 10, 200))
    self.assertFalse(
      tuning_lib.is_last_checkpoint(mode.EVAL, 900, 1000, 50, 10, 200, train_to_end=True)
    )


if __name__ == "__main__":
  absltest.main()
