"""Tests of base_metrics against numpy: weighted means, maxima, histograms, loss weighting."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from paxml import base_metrics
from praxis import base_hyperparams
from praxis import pax_fiddle

_AXIS = base_metrics.PMAP_PARALLEL_AXIS_NAME


def _batch(values, weight):
  return {"m": (jnp.asarray(values), jnp.asarray(weight, jnp.float32))}


class AggregatorTest(absltest.TestCase):
  def test_mean_and_max_over_stored_batches(self):
    mean = base_hyperparams.instantiate(pax_fiddle.Config(base_metrics.MeanMetrics))
    maximum = base_hyperparams.instantiate(pax_fiddle.Config(base_metrics.MaxMetrics))
    batches = [(2.0, 1.0), (5.0, 3.0), (-1.0, 4.0)]
    for value, weight in batches:
      for agg in (mean, maximum):
        agg.store(_batch(value, weight), reshard=True)
    got_mean, total = mean.finalize()["m"]
    values, weights = np.array(batches).T
    np.testing.assert_allclose(got_mean, np.average(values, weights=weights), rtol=1e-6)
    np.testing.assert_allclose(total, weights.sum(), rtol=1e-6)
    self.assertEqual(float(maximum.finalize()["m"][0]), 5.0)
    self.assertEqual(mean.finalize(), {})  # finalize() cleared the store.

  def test_histogram_and_composite(self):
    composite = base_metrics.CompositeMetrics(
      metrics_p=[
        pax_fiddle.Config(base_metrics.HistogramMetrics, histogram_key="h"),
        pax_fiddle.Config(base_metrics.MeanMetrics, metric_keys=["m"]),
      ]
    )
    for counts in ([[1.0, 0.0, 1.0, 0.0]], [[1.0, 0.0, 1.0, 0.0]]):  # [groups=1, classes=4]
      batch = {
        "h": (jnp.asarray(counts), jnp.asarray(1.0)),
        "m": (jnp.asarray(3.0), jnp.asarray(2.0)),
      }
      composite.store(batch, reshard=True)
    out = composite.finalize()
    # Two classes seen equally often: perplexity 2, entropy log 2, half the classes covered.
    np.testing.assert_allclose(out["h_pplx"][0], 2.0, rtol=1e-5)
    np.testing.assert_allclose(out["h_entropy"][0], np.log(2.0), rtol=1e-5)
    np.testing.assert_allclose(out["h_coverage"][0], 0.5)
    np.testing.assert_allclose(out["m"][0], 3.0)

  def test_aggregate_outside_pmap_explains(self):
    with self.assertRaisesRegex(RuntimeError, "jax.pmap"):
      base_metrics.MeanMetrics().aggregate(_batch(1.0, 1.0))


class LossAggregatorTest(absltest.TestCase):
  def test_losses_under_pmap_and_outside(self):
    clu_loss = base_metrics.WeightedScalarCluMetric.create(
      jnp.asarray([1.0, 3.0]), jnp.asarray([1.0, 3.0])
    )
    np.testing.assert_allclose(clu_loss.compute(), 10.0 / 4.0)
    merged = clu_loss.merge(
      base_metrics.WeightedScalarCluMetric.create(jnp.asarray(2.0), jnp.asarray(4.0))
    )
    np.testing.assert_allclose(merged.compute(), 18.0 / 8.0)

    single = base_metrics.LossAggregator(loss_key="a")
    multi = base_metrics.MultiLossAggregator(loss_keys=["a", "b"])
    metrics = {"a": (jnp.asarray(2.0), jnp.asarray(4.0)), "b": (jnp.asarray(5.0), jnp.asarray(1.0))}
    self.assertEqual(float(single.aggregate(metrics)[0]), 2.0)
    self.assertEqual(float(multi.aggregate(metrics)[1]), 7.0)

    def step(_):
      return single.aggregate(metrics), multi.aggregate(metrics)[:2]

    (weighted, mean, weight), (multi_weighted, _) = jax.pmap(step, axis_name=_AXIS)(jnp.zeros(1))
    np.testing.assert_allclose(weight, [1.0], rtol=1e-6)  # One replica holds all the weight.
    np.testing.assert_allclose(weighted, [2.0], rtol=1e-6)
    np.testing.assert_allclose(mean, [2.0], rtol=1e-6)
    np.testing.assert_allclose(multi_weighted, [7.0], rtol=1e-6)
    with self.assertRaisesRegex(TypeError, "LossAggregator"):
      single.aggregate({"a": 1.0})


if __name__ == "__main__":
  absltest.main()
