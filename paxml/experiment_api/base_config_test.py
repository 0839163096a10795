"""Base config defaults and the validation rules."""

from absl.testing import absltest
from ml_collections import config_dict

from paxml.experiment_api import base_config


class BaseConfigTest(absltest.TestCase):
  def test_jaxline_defaults(self):
    c = base_config.get_base_config()
    self.assertEqual(
      (
        c.training_steps,
        c.interval_type,
        c.save_checkpoint_interval,
        c.log_tensors_interval,
        c.log_train_data_interval,
        c.max_checkpoints_to_keep,
        c.random_seed,
      ),
      (10000, "secs", 300, 60, 120.0, 5, 42),
    )
    self.assertEqual(
      (c.random_mode_train, c.random_mode_eval),
      ("unique_host_unique_device", "same_host_same_device"),
    )
    self.assertTrue(c.log_async)
    self.assertTrue(c.best_model_eval_metric_higher_is_better)
    c.log_train_data_interval = None  # "None to turn off" must be allowed.
    base_config.validate_config(c)

  def test_missing_keys_are_named(self):
    with self.assertRaisesRegex(ValueError, "training_steps"):
      base_config.validate_config(config_dict.ConfigDict({"random_seed": 1}))

  def test_constraints(self):
    c = base_config.get_base_config()
    c.periodic_action_growth_ratios = [1, 2, 5]
    with self.assertRaisesRegex(ValueError, "steps-based"):
      base_config.validate_config(c)
    c.interval_type = "steps"
    base_config.validate_config(c)
    c = base_config.get_base_config()
    c.train_checkpoint_all_hosts = True
    with self.assertRaisesRegex(ValueError, "checkpoint_interval_type='steps'"):
      base_config.validate_config(c)
    c.checkpoint_interval_type = "steps"
    base_config.validate_config(c)


if __name__ == "__main__":
  absltest.main()
