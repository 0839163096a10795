"""A JAXline-compatible experiment API (`jaxline`) on durable Orbax checkpoints.

Port JAXline code by changing `from jaxline import X` to
`from paxml.experiment_api import X`; the modules have JAXline's names:
  experiment: AbstractExperiment (the contract: step, evaluate, hooks).
  platform: main(experiment_class, argv, checkpointer_factory=...), the flags.
  base_config: get_base_config, validate_config (every JAXline field).
  train: the train and evaluate drivers.
  utils: PeriodicAction, make_async, py_prefetch, double_buffer, get_first,
    bcast_local_devices, RNG specialisation, InMemoryCheckpointer, ...
Ours besides: checkpointer (OrbaxCheckpointer, the default of
platform.main) and writers (TensorBoardLogger). Deliberate differences from
JAXline: docs/toolkit.md.

This file imports nothing, so importing a submodule stays cheap.
"""
