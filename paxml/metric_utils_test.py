"""Tests of metric_utils against hand-computed values."""

from typing import Any

from absl.testing import absltest
import clu.metrics as clu_metrics
import clu.values as clu_values
import flax
import jax.numpy as jnp
import numpy as np
import seqio

from paxml import metric_utils


@flax.struct.dataclass
class _Fixed(clu_metrics.Metric):
  """A clu metric whose compute_value() is a class attribute (set per subclass)."""

  @classmethod
  def from_model_output(cls) -> "_Fixed":
    return cls()

  def merge(self, other):
    return self

  def compute(self):
    return jnp.zeros(())


class MetricUtilsTest(absltest.TestCase):
  def test_compute_metric_values_flattens(self):
    @flax.struct.dataclass
    class Mixed(_Fixed):
      def compute_value(self) -> Any:
        return {"a": clu_values.Scalar(1), "b": [clu_values.Scalar(2), clu_values.Text("t")]}

    @flax.struct.dataclass
    class Listed(_Fixed):
      def compute_value(self) -> Any:
        return [clu_values.Scalar(3)]

    @flax.struct.dataclass
    class Bad(_Fixed):
      def compute_value(self) -> Any:
        return 3.0

    values = metric_utils.compute_metric_values({"m": Mixed(), "l": Listed()})
    self.assertEqual(sorted(values), ["l/l_0", "m/a", "m/b_0", "m/b_1"])
    self.assertEqual(values["m/b_0"].value, 2)
    with self.assertRaisesRegex(ValueError, "'x'"):
      metric_utils.compute_metric_values({"x": Bad()})

  def test_floats(self):
    pairs = [(np.float32(1.0), np.float32(1.0)), (jnp.asarray(4.0), jnp.asarray(3.0))]
    self.assertAlmostEqual(float(metric_utils.as_float(pairs)), (1 + 12) / 4)
    self.assertEqual(metric_utils.as_float(seqio.metrics.Scalar(2.5)), 2.5)
    self.assertEqual(metric_utils.as_float(3), 3.0)
    self.assertFalse(metric_utils.is_float_convertible(clu_values.Text("x")))
    self.assertFalse(metric_utils.is_float_convertible((1.0, 2.0, 3.0)))
    out = metric_utils.as_float_dict({"a": (2.0, 1.0), "t": seqio.metrics.Text("x")})
    self.assertEqual(out, {"a": 2.0})
    with self.assertRaises(ValueError):
      metric_utils.as_float_dict({"t": "x"}, raise_on_non_float_convertible=True)
    self.assertEqual(
      metric_utils.update_float_dict({"k": 1.0}, {"a": 2.0}, "p"), {"k": 1.0, "p/a": 2.0}
    )

  def test_merge_and_extract(self):
    a = {"m": clu_metrics.Average.from_model_output(jnp.asarray([1.0, 3.0]))}
    b = {"m": clu_metrics.Average.from_model_output(jnp.asarray([5.0]))}
    merged = metric_utils.merge_clu_metrics(a, b)
    self.assertEqual(float(merged["m"].compute()), 3.0)
    self.assertIs(metric_utils.merge_clu_metrics({}, b), b)
    with self.assertRaises(ValueError):
      metric_utils.merge_clu_metrics(a, {"other": b["m"]})
    self.assertEqual(metric_utils.extract_weighted_scalars_and_clu_metrics(b), ({}, b))
    ws = {"loss": (jnp.asarray(1.0), jnp.asarray(2.0))}
    self.assertEqual(metric_utils.extract_weighted_scalars_and_clu_metrics(ws), (ws, {}))


if __name__ == "__main__":
  absltest.main()
