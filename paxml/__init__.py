"""paxml: the experiment runner.

Public modules (import them directly; this file imports nothing, so
`import paxml.experiment_registry` does not pull in JAX or TensorFlow):
  experiment_registry: `@register` and name lookup for `--exp`.
  base_experiment: `BaseExperiment`, what every experiment implements.
  tasks_lib: `TaskConfig`, what `BaseExperiment.task()` returns.
  synthetic_input: a learnable synthetic LM input.
  triggers: when periodic work runs (step/time intervals, first steps).
  checkpoints: Orbax checkpoints (`Checkpointer` under `<job_log_dir>/checkpoints`,
    `TreeCheckpointer` for any pytree + JSON metadata, `PreemptionGuard`).
  summaries: TensorBoard writers (`SummaryWriter` under `<job_log_dir>/summaries/<name>`,
    null, threaded and multi-directory writers).
  trainer: `train_and_evaluate`, the train loop.
  main: the command-line entry point.
"""

__all__ = [
    "base_experiment",
    "checkpoints",
    "experiment_registry",
    "main",
    "summaries",
    "synthetic_input",
    "tasks_lib",
    "trainer",
    "triggers",
]
