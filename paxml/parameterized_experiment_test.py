"""Tests of ParameterizedExperiment: its parts come back from the methods BaseExperiment has,
inputs with the wrong `is_training` are refused, the default input specs come from the
training input."""

from absl.testing import absltest
from paxml import parameterized_experiment
from praxis import base_input
from praxis import pax_fiddle


def _input(name, is_training):
  return pax_fiddle.Config(base_input.BaseInput, name=name, is_training=is_training, batch_size=2)


def _config(**overrides):
  kwargs = dict(
    task={"model": "m"},
    train_datasets=[_input("train", True)],
    eval_datasets=[_input("dev", False), _input("test", False)],
    decode_datasets=[_input("decode", False)],
  )
  kwargs.update(overrides)
  return pax_fiddle.Config(parameterized_experiment.ParameterizedExperiment, **kwargs)


class ParameterizedExperimentTest(absltest.TestCase):
  def test_parts(self):
    config = _config()
    experiment = pax_fiddle.build(config)
    self.assertEqual(experiment.task(), {"model": "m"})
    self.assertEqual([d.name for d in experiment.datasets()], ["train", "dev", "test"])
    self.assertEqual([d.name for d in experiment.eval_datasets()], ["dev", "test"])
    self.assertEqual([d.name for d in experiment.decode_datasets()], ["decode"])
    specs = experiment.get_input_specs_provider_params()
    self.assertIs(pax_fiddle.get_callable(specs), base_input.DatasetInputSpecsProvider)
    self.assertEqual(specs.input_p.name, "train")

  def test_wrong_is_training_is_refused(self):
    with self.assertRaisesRegex(ValueError, "'dev' must have `is_training` set to `False`"):
      pax_fiddle.build(_config(eval_datasets=[_input("dev", True)]))
    with self.assertRaisesRegex(ValueError, "'train' must have `is_training` set to `True`"):
      pax_fiddle.build(_config(train_datasets=[_input("train", False)]))

  def test_deprecated_spellings_are_appended(self):
    with self.assertWarns(DeprecationWarning):
      experiment = pax_fiddle.build(
        _config(train_datasets=[], training_dataset=_input("old", True))
      )
    self.assertEqual([d.name for d in experiment.train_datasets()], ["old"])


if __name__ == "__main__":
  absltest.main()
