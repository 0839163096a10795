"""Small experiments for testing the Fiddle tools (normalization, code generation): a model
with plain and derived settings, variants with sharding annotations (shared between layers),
train/eval/decode inputs, an input specs provider, warm-start rules, a non-config value, and
the same experiment written as a `BaselineExperiment`. Pax's tests of these tools import
these names."""

import dataclasses

import jax
from jax import numpy as jnp
from paxml import base_experiment
from paxml import parameterized_experiment
from paxml import tasks_lib
from paxml.experimental import baseline_experiment
from praxis import base_input
from praxis import base_layer
from praxis import base_model
from praxis import pax_fiddle


class TestLayer(base_layer.BaseLayer):
  x: int = 12


class SampleModel(base_model.BaseModel):
  my_setting: int = 1
  derived_setting: int = 2
  derived_list_setting: list[int] = dataclasses.field(default_factory=lambda: [3, 4])
  sublayers: list[base_layer.BaseLayer] = dataclasses.field(default_factory=list)


def _input(is_training: bool, batch_size: int) -> pax_fiddle.Config:
  return pax_fiddle.Config(base_input.BaseInput, is_training=is_training, batch_size=batch_size)


class SampleExperiment(base_experiment.BaseExperiment):
  """One high-level setting, FOO_SETTING; the model's other two settings derive from it."""

  FOO_SETTING = 4123

  @property
  def derived_setting(self):
    return 2 * self.FOO_SETTING

  @property
  def derived_list_setting(self):
    return [self.FOO_SETTING, self.derived_setting]

  def datasets(self):
    return []

  def task(self):
    model = pax_fiddle.Config(
      SampleModel,
      my_setting=self.FOO_SETTING,
      derived_setting=self.derived_setting,
      derived_list_setting=self.derived_list_setting,
    )
    return pax_fiddle.Config(tasks_lib.SingleTask, model=model)


class SampleShardedExperiment(SampleExperiment):
  def task(self):
    task = super().task()
    task.model.activation_split_dims_mapping.out = ["foo_axis", "bar_axis"]
    return task


class SampleExperimentWithSharedShardingAnnotations(SampleShardedExperiment):
  """Two sublayers share (the same object) the model's activation sharding."""

  def task(self):
    task = super().task()
    shared = task.model.activation_split_dims_mapping
    task.model.sublayers = [
      pax_fiddle.Config(TestLayer, activation_split_dims_mapping=shared) for _ in range(2)
    ]
    return task


class SampleExperimentWithDatasets(SampleExperiment):
  def datasets(self):
    return [_input(True, 1024), _input(False, 128)]


class SampleExperimentWithDecodeDatasets(SampleExperiment):
  def decode_datasets(self):
    return [_input(False, 256)]


class SampleInputSpecsProvider(base_input.BaseInputSpecsProvider):
  def get_input_specs(self):
    return {"inputs": jax.ShapeDtypeStruct([16, 32], jnp.int32)}


class SampleExperimentWithInputSpecsProvider(SampleExperiment):
  def get_input_specs_provider_params(self):
    return pax_fiddle.Config(SampleInputSpecsProvider)


class SampleExperimentWithInitFromCheckpointRules(SampleExperiment):
  """Warm-starts everything from one checkpoint (rules written as a config)."""

  def task(self):
    task = super().task()
    source = SampleExperimentWithInputSpecsProvider()
    task.train.init_from_checkpoint_rules = {
      "/path/to/my/checkpoint": pax_fiddle.Config(
        tasks_lib.CheckpointLoadingRules,
        task_p=source.task(),
        load_rules=[(r"(.*)", "{}")],
        ignore_rules=[],
        load_opt_states=False,
        load_step=False,
        safe_load=True,
        step=532000,
        input_specs_provider_p=source.get_input_specs_provider_params(),
      )
    }
    return task


class SampleExperimentCustomObject(SampleExperiment):
  """A setting holding a value no config can express."""

  def task(self):
    task = super().task()
    task.model.my_setting = object()
    return task


@dataclasses.dataclass
class SampleExperimentNewBaseline(baseline_experiment.BaselineExperiment):
  """SampleExperiment as a baseline: its settings are the dataclass fields."""

  foo_setting: int = 4123
  derived_setting: int = 8246
  derived_list_setting: list[int] = dataclasses.field(default_factory=lambda: [4123, 8246])

  def experiment_fixture(self):
    task = pax_fiddle.PaxConfig(tasks_lib.SingleTask, model=self.model_fixture())
    return pax_fiddle.PaxConfig(
      parameterized_experiment.ParameterizedExperiment, task=task, eval_datasets=[]
    )

  def model_fixture(self):
    return pax_fiddle.PaxConfig(
      SampleModel,
      my_setting=self.foo_setting,
      derived_setting=self.derived_setting,
      derived_list_setting=self.derived_list_setting,
    )


class SampleDerivedExperiment(SampleExperiment):
  def task(self):
    task = super().task()
    task.model.my_setting = 4217
    return task


class SampleDerivedExperimentHighlevel(SampleExperiment):
  FOO_SETTING = 4217
