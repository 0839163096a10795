"""A JAXline-compatible experiment API on durable Orbax checkpoints.

Port JAXline code by changing `from jaxline import X` to
`from paxml.experiment_api import X`:
  experiment: AbstractExperiment (the contract: step, evaluate, hooks).
  platform: main(experiment_class, argv, checkpointer_factory=...), the flags.
  base_config: get_base_config, validate_config (every JAXline field).
  train: the train and evaluate drivers.
  checkpointer: the Checkpointer protocol and OrbaxCheckpointer (default).
  writers: the Writer protocol and TensorBoardLogger.
  periodic: PeriodicAction (on paxml.triggers), make_async.
  rng: get_first, bcast_local_devices, specialize_rng_host_device.

This file imports nothing, so importing a submodule stays cheap.
"""
