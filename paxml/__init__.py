"""paxml: the experiment runner.

Public modules (import them directly; this file imports nothing, so
`import paxml.experiment_registry` does not pull in JAX or TensorFlow):
  experiment_registry: `@register` and name lookup for `--exp`.
  base_experiment: `BaseExperiment`, what every experiment implements.
  tasks_lib: what `BaseExperiment.task()` returns: Pax's `SingleTask` config or the seed's flat
    `TaskConfig` (`task_from_fields` builds one from UPPERCASE fields); `to_task_config`, the
    one function from either to what the trainer reads.
  base_task: Pax's `BaseTask`. learners: Pax's `Learner` (loss_name, optimizer, ...).
  trainer_lib: Pax's `RunningMode` (what Pax's experiment files import from there).
  partitioning: the (replica, data, mdl) mesh, the logical-axis rules, state/batch shardings.
  train_states: Pax's `TrainState(step, mdl_vars, opt_states, extra_state)`, the praxis
    optimizer built (`make_optimizer`), sharded initialisation (`state_layout`).
  train_state_names: checkpoints of the earlier train-state layout; warm-start array names.
  progress: steps/s, tokens/s, MFU (FLOPs formula and peak table) and ETA.
  job_files: model_params.txt, experiment_cls_vars.txt, post_init_model_params.txt,
    input_specs.json in job_log_dir.
  eval_lib: eval/decode programs and the --mode=eval|decode|decode_once|infer jobs.
  synthetic_input: a learnable synthetic LM input.
  seqio_input: `SeqIOInput` (Pax's SeqIO input: sharded, padded finite eval, the task's
    score/predict metrics) and the `LanguageModelFeatures` / `SequenceModelFeatures` converters.
  triggers: when periodic work runs (step/time intervals, first steps).
  checkpoints: Orbax checkpoints (`Checkpointer` under `<job_log_dir>/checkpoints`,
    `TreeCheckpointer` for any pytree + JSON metadata, `PreemptionGuard`; Pax's
    `save_checkpoint` / `restore_checkpoint`).
  checkpoint_types, checkpoint_paths, checkpoint_version, checkpoint_metadata: Pax's
    `CheckpointType`, step-directory names and lookups, format versions, `PaxMetadata`.
  io_utils: Pax's eval/decode output files and progress files; xla_passthrough: strings
    beside the jitted step; host_callback: Pax's string `Repository`.
  metric_utils: clu metric values, weighted scalars as floats; summary_utils: clu / SeqIO
    metric values written as summaries; base_metrics: Pax's metric and loss aggregators.
  base_inference_runner: Pax's `BaseInferenceRunner` (infer + output schema, serialized rows).
  summaries: TensorBoard writers (`SummaryWriter` under `<job_log_dir>/summaries/<name>`,
    null, threaded and multi-directory writers).
  trainer: `train_and_evaluate` and the pure `train_step`, the train loop.
  leader: `is_leader()`, the one process that writes what the job writes once.
  main: the command-line entry point; pax_flags: Pax's flags it accepts and what each does;
    fiddle_overrides: --fdl_config / --fdl_set applied to experiments.
  automl (automl_interfaces): Pax's tuning search spaces, rewards, early stopping and
    `parameter_sweep`; tuning_lib (tuning_trial): the tuning loop and `should_early_stop`.
  parameterized_experiment: Pax's `ParameterizedExperiment` (an experiment as one config);
    experiment_utils / experiment_vars_summary_parser: class-variable summaries;
    experiment_imports_test_helper: one smoke test per registered experiment.
Packages:
  toolkit: a bobbin-compatible training toolkit (`from paxml import toolkit as bobbin`).
  experiment_api: a JAXline-compatible experiment API (platform.main, AbstractExperiment).
"""

__all__ = [
  "base_experiment",
  "base_inference_runner",
  "base_metrics",
  "base_task",
  "checkpoint_metadata",
  "checkpoint_paths",
  "checkpoint_types",
  "checkpoint_version",
  "checkpoints",
  "eval_lib",
  "experiment_registry",
  "fiddle_overrides",
  "host_callback",
  "io_utils",
  "job_files",
  "leader",
  "learners",
  "main",
  "metric_utils",
  "pax_flags",
  "partitioning",
  "progress",
  "seqio_input",
  "summaries",
  "summary_utils",
  "synthetic_input",
  "tasks_lib",
  "train_state_names",
  "train_states",
  "trainer",
  "trainer_lib",
  "triggers",
  "xla_passthrough",
]
