"""Tests of paxml/automl.py: metric matching, rewards and aggregators against direct formulas,
and the search spaces experiments declare (class attributes, parameter sweeps)."""

import math

from absl.testing import absltest
import numpy as np
from paxml import automl
from paxml import base_experiment
from praxis import base_hyperparams
from praxis import pax_fiddle
import pyglove as pg

build = base_hyperparams.instantiate

# One step's flat tuning metrics, as tuning_lib.should_early_stop builds them.
_METRICS = {
  "train/loss": 2.0,
  "train_steps_per_sec": 4.0,
  "eval_test_wiki/metrics/accuracy": 0.25,
  "eval_test_c4/metrics/accuracy": 0.75,
  "eval_test_c4/metrics/accuracy:big": 0.5,
  "decode_test_c4/bleu": 30.0,
}


class MetricTest(absltest.TestCase):
  def test_matches_the_keys_a_prefix_filter_finds(self):
    # Independent reference: the keys of the eval accuracy, by string tests.
    expected = [
      v
      for k, v in _METRICS.items()
      if k.startswith("eval_test_") and k.split(":")[0].endswith("/metrics/accuracy")
    ]
    self.assertEqual(automl.Metric.eval("accuracy").get_values(_METRICS), expected)
    self.assertEqual(automl.Metric.eval("accuracy", "c4").get_values(_METRICS), [0.75, 0.5])
    self.assertEqual(
      automl.Metric.eval("accuracy", sub_experiment_id="big").get_values(_METRICS), [0.5]
    )

  def test_aggregators_reduce_several_matches(self):
    values = [0.25, 0.75, 0.5]
    for aggregator, reference in [
      (automl.MetricAggregator.MAX, np.max),
      (automl.MetricAggregator.MIN, np.min),
      (automl.MetricAggregator.AVERAGE, np.mean),
      (automl.MetricAggregator.SUM, np.sum),
      (np.median, np.median),
    ]:
      metric = automl.Metric.eval("accuracy", aggregator=aggregator)
      self.assertAlmostEqual(metric.get_value(_METRICS), float(reference(values)))
    with self.assertRaisesRegex(ValueError, "multiple metrics"):
      automl.Metric.eval("accuracy").get_value(_METRICS)
    with self.assertRaisesRegex(KeyError, "does not match"):
      automl.Metric.decode("rouge").get_value(_METRICS)

  def test_kinds(self):
    self.assertTrue(automl.Metric.train("loss").is_train_metric)
    self.assertTrue(automl.Metric.num_params().is_train_metric)
    self.assertTrue(automl.Metric.decode("bleu").is_decode_metric)
    self.assertFalse(automl.Metric.decode("bleu", "c4").applies_to_multiple_datasets)
    self.assertEqual(automl.Metric.decode("bleu").get_value(_METRICS), 30.0)


class RewardTest(absltest.TestCase):
  def test_single_objective_goal_and_nan(self):
    reward = build(
      pax_fiddle.Config(automl.SingleObjective, metric=automl.Metric.train("loss"), goal="minimize")
    )
    self.assertEqual(reward(_METRICS, 0), -2.0)
    self.assertTrue(reward.needs_train)
    self.assertFalse(reward.needs_eval)
    nan_reward = build(
      pax_fiddle.Config(
        automl.SingleObjective, metric=automl.Metric.train("loss"), reward_for_nan=-7.0
      )
    )
    self.assertEqual(nan_reward({"train/loss": math.nan}, 0), -7.0)

  def test_weighted_sum(self):
    reward = build(
      automl.weighted_sum_reward(
        [
          (automl.Metric.eval("accuracy", "wiki"), 3.0),
          (automl.Metric.decode("bleu"), -1.0),
        ]
      )
    )
    expected = (3.0 * 0.25 - 1.0 * 30.0) / (3.0 + 1.0)
    self.assertAlmostEqual(reward(_METRICS, 0), expected)
    self.assertTrue(reward.needs_decode)

  def test_two_objective_formulas(self):
    quality, cost, target, exponent = 0.8, 120.0, 100.0, -0.1
    cases = [
      (automl.TunasAbsolute, quality + exponent * abs(cost / target - 1)),
      (automl.MnasHard, quality * min((cost / target) ** exponent, 1.0)),
      (automl.MnasSoft, quality * (cost / target) ** exponent),
    ]
    for cls, expected in cases:
      aggregator = build(pax_fiddle.Config(cls, cost_objective=target, exponent=exponent))
      self.assertAlmostEqual(aggregator([quality, cost]), expected, msg=cls.__name__)
    # Below the target cost MnasHard does not reward the saving.
    hard = build(pax_fiddle.Config(automl.MnasHard, cost_objective=target))
    self.assertEqual(hard([quality, 50.0]), quality)


class CrossStepTest(absltest.TestCase):
  def test_average_and_select(self):
    reports = [
      (10, {"reward": 1.0, "x": 5.0}),
      (20, {"reward": 3.0, "x": 1.0}),
      (30, {"reward": 2.0, "x": 3.0}),
    ]
    average = build(pax_fiddle.Config(automl.AverageMetricValues))(reports)
    self.assertAlmostEqual(average["x"], np.mean([5.0, 1.0, 3.0]))
    last_two = build(pax_fiddle.Config(automl.AverageMetricValues, last_n=2))(reports)
    self.assertAlmostEqual(last_two["reward"], np.mean([3.0, 2.0]))
    best = build(pax_fiddle.Config(automl.MetricsWithMaxValue))(reports)
    self.assertEqual(best, reports[int(np.argmax([1.0, 3.0, 2.0]))][1])
    lowest_x = build(pax_fiddle.Config(automl.MetricsWithMinValue, metric=automl.Metric("x")))
    self.assertEqual(lowest_x(reports)["reward"], 3.0)

  def test_sub_experiments_fold_onto_one_step_range(self):
    offset = automl.SUB_EXPERIMENT_STEP_OFFSET
    reports = [(10, {"a:1x": 1.0}), (offset + 10, {"a:2x": 2.0})]
    merged = build(pax_fiddle.Config(automl.LastReportedMetricValues))(reports)
    self.assertEqual(merged, {"a:1x": 1.0, "a:2x": 2.0})


class _Exp(base_experiment.BaseExperiment):
  LEARNING_RATE = pg.oneof([0.1, 0.2])
  LAYERS = 2

  def datasets(self):
    return []

  def task(self):
    return {"lr": self.LEARNING_RATE, "layers": self.LAYERS, "dim": pg.oneof([8, 16], name="dim")}


@automl.parameter_sweep([("LEARNING_RATE", "LAYERS"), (0.3, 4), (0.4, 6)])
class _Sweep(_Exp):
  def task(self):
    return {"lr": self.LEARNING_RATE, "layers": self.LAYERS}


class SearchSpaceTest(absltest.TestCase):
  def test_class_attribute_is_a_named_decision_point(self):
    space = pg.hyper.trace(lambda: _Exp().task(), require_hyper_name=True)
    self.assertEqual(sorted(space.hyper_dict), ["LEARNING_RATE", "dim"])
    self.assertEqual(space.dna_spec.space_size, 4)
    with space.apply(pg.DNA([1, 0])):
      self.assertEqual(_Exp().task(), {"lr": 0.2, "layers": 2, "dim": 8})

  def test_parameter_sweep_reads_rows(self):
    space = pg.hyper.trace(lambda: _Sweep().task(), require_hyper_name=True)
    self.assertEqual(list(space.hyper_dict), [automl.COMBINED_DECISION_ATTR])
    with space.apply(pg.DNA(1)):
      self.assertEqual(_Sweep().task(), {"lr": 0.4, "layers": 6})
    self.assertIs(_Sweep().search().search_algorithm.__fn_or_cls__, automl.Sweeping)
    self.assertEqual(_Sweep.__name__, "_Sweep")

  def test_bad_sweeps_say_what_is_wrong(self):
    with self.assertRaisesRegex(ValueError, "does not exist"):
      automl.parameter_sweep([("NOPE",), (1,), (2,)])(_Exp)
    with self.assertRaisesRegex(ValueError, "equal length"):
      automl.parameter_sweep([("LAYERS",), (1, 2)])

  def test_presets(self):
    nas = automl.neural_architecture_search(
      [automl.Metric.eval("accuracy", "wiki"), automl.Metric.train_steps_per_second()],
      100.0,
      reward_type="mnas_soft",
    )
    reward = build(nas.search_reward)
    self.assertAlmostEqual(reward(_METRICS, 0), 0.25 * (4.0 / 100.0) ** -0.07)
    self.assertIsInstance(build(nas.search_algorithm)(), pg.evolution.Evolution)
    self.assertIsInstance(
      build(automl.hyperparameter_tuning(automl.Metric.train("loss")).search_algorithm)(),
      pg.geno.Sweeping,
    )


if __name__ == "__main__":
  absltest.main()
