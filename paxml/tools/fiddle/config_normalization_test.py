"""Tests of config_normalization on the test_fixtures experiments: shared sharding is unshared
(or kept, or removed), defaults are trimmed, dropped inputs are gone, the input is unchanged."""

from absl.testing import absltest
import fiddle as fdl
from paxml.tools.fiddle import config_normalization
from paxml.tools.fiddle import make_parameterized_experiment
from paxml.tools.fiddle import test_fixtures


def _shared_sharding_config():
  return make_parameterized_experiment.from_legacy(
    test_fixtures.SampleExperimentWithSharedShardingAnnotations,
    normalizer=None,
    has_train_dataset=False,
    has_input_specs_provider=False,
  )


def _sharding(config, i):
  return config.task.model.sublayers[i].activation_split_dims_mapping


class ConfigNormalizationTest(absltest.TestCase):
  def test_sharding_steps(self):
    config = _shared_sharding_config()
    self.assertIs(_sharding(config, 0), _sharding(config, 1))
    unshared = config_normalization.default_normalizer()(config)
    self.assertIsNot(_sharding(unshared, 0), _sharding(unshared, 1))
    self.assertEqual(_sharding(unshared, 0).out, ["foo_axis", "bar_axis"])
    self.assertIs(_sharding(config, 0), _sharding(config, 1))  # The input is unchanged.

    kept_cfg = config_normalization.default_normalizer().lowlevel_config()
    kept_cfg.task_normalizer.unshare_sharding_config = False
    kept = fdl.build(kept_cfg)(config)
    self.assertIs(_sharding(kept, 0), _sharding(kept, 1))

    removed = config_normalization.aggressive_normalizer()(config)
    self.assertNotIn(
      "activation_split_dims_mapping", fdl.ordered_arguments(removed.task.model.sublayers[0])
    )

  def test_defaults_trimmed_and_inputs_dropped(self):
    config = make_parameterized_experiment.from_legacy(
      test_fixtures.SampleExperimentWithDatasets,
      normalizer=config_normalization.noop_normalizer(),
      has_input_specs_provider=False,
    )
    self.assertEqual([d.batch_size for d in config.eval_datasets], [128])
    normalized = config_normalization.ConfigNormalizer(remove_eval_datasets=True)(config)
    self.assertNotIn("eval_datasets", fdl.ordered_arguments(normalized))
    self.assertEqual(normalized.train_datasets[0].batch_size, 1024)
    # SampleModel's list default [3, 4] was replaced by the experiment's; 1 is overridden too.
    model_args = fdl.ordered_arguments(normalized.task.model)
    self.assertEqual(model_args["derived_list_setting"], [4123, 8246])


if __name__ == "__main__":
  absltest.main()
