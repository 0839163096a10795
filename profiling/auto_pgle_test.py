import jax
from absl.testing import absltest

from profiling import auto_pgle


class AutoPgleTest(absltest.TestCase):
  def test_env_uses_jax_variable_names(self):
    self.assertEqual(
      auto_pgle.auto_pgle_env(runs=5, percentile=50),
      {
        "JAX_ENABLE_PGLE": "true",
        "JAX_PGLE_PROFILING_RUNS": "5",
        "JAX_PGLE_AGGREGATION_PERCENTILE": "50",
      },
    )
    # JAX's own defaults.
    self.assertEqual(
      auto_pgle.auto_pgle_env()["JAX_PGLE_PROFILING_RUNS"], str(jax.config.jax_pgle_profiling_runs)
    )
    self.assertEqual(
      auto_pgle.auto_pgle_env()["JAX_PGLE_AGGREGATION_PERCENTILE"],
      str(jax.config.jax_pgle_aggregation_percentile),
    )

  def test_invalid_settings(self):
    with self.assertRaisesRegex(ValueError, "runs"):
      auto_pgle.auto_pgle_env(runs=0)
    with self.assertRaisesRegex(ValueError, "percentile"):
      auto_pgle.auto_pgle_env(percentile=101)

  def test_enable_sets_jax_config_and_warns_about_aot(self):
    saved = {
      name: getattr(jax.config, name)
      for name in ("jax_enable_pgle", "jax_pgle_profiling_runs", "jax_pgle_aggregation_percentile")
    }
    with self.assertWarnsRegex(UserWarning, "ahead of time"):
      auto_pgle.enable_auto_pgle(runs=2, percentile=75)
    try:
      self.assertTrue(jax.config.jax_enable_pgle)
      self.assertEqual(jax.config.jax_pgle_profiling_runs, 2)
      self.assertEqual(jax.config.jax_pgle_aggregation_percentile, 75)
    finally:
      for name, value in saved.items():
        jax.config.update(name, value)

  def test_from_env(self):
    self.assertIsNone(auto_pgle.auto_pgle_from_env({}))
    self.assertIsNone(auto_pgle.auto_pgle_from_env({"JAX_ENABLE_PGLE": "false"}))
    self.assertEqual(
      auto_pgle.auto_pgle_from_env({"JAX_ENABLE_PGLE": "1"})["JAX_PGLE_PROFILING_RUNS"], "3"
    )


if __name__ == "__main__":
  absltest.main()
