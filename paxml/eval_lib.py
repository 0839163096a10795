"""Eval and decode: the programs the trainer runs on its triggers, and the standalone jobs.

In training (trainer.py):
  eval_train   the model's metrics on the next training batch -> summaries/eval_train
  eval_test    each eval dataset (`is_training=False` in `datasets()`), with --eval_on_test
               -> summaries/eval_test_<name>
  decode       each of `decode_datasets()`, with --decode_during_train
               -> summaries/decode_test_<name> and decoder_out/<name>/decoder_out_%08d.jsonl

Standalone (`--mode=eval|decode|decode_once|infer`, `run_job`): the job follows the
checkpoints in `<job_log_dir>/checkpoints`, read-only (it never deletes the trainer's files),
runs its programs on each new one and stops after the one at `num_train_steps`. While waiting
it says what for, at most once a minute; with `wait_timeout_secs` (--eval_wait_timeout) it stops
after that long without a new checkpoint, with an error if none appeared at all. It reads only
the params of each checkpoint, verified against their checksums; a corrupt step is reported
once and skipped (left in place: the job never changes the trainer's files). `decode_once` decodes one checkpoint and exits;
`infer` does the same and writes to output/<name>/ instead of decoder_out/.

Eval batches follow Pax: an input with `reset_for_eval=True` is reset and read to its end (one
epoch); any other input gives `eval_loop_num_batches` (default 1) batches on a rolling basis.

SeqIO metrics: an input whose `has_seqio_metrics(score_metrics)` is true (paxml.seqio_input's
SeqIOInput over a task with score / predict metric fns) also gets every (global batch, model
output) pair of the eval or decode; its `process_outputs` computes the task's metrics, which go
to the same summaries as `scoring_eval/<metric>` (eval) and `decoder/<metric>` (decode), as Pax,
and as JSONL to <job_log_dir>/eval_out/<name>/ and decoder_out/<name>/.
"""

import dataclasses
import json
import os
import time
from typing import Any

from absl import logging
import fiddle as fdl
import flax.linen as nn
import jax
from jax.experimental import multihost_utils
import numpy as np

from paxml import base_experiment
from paxml import checkpoints
from paxml import leader
from paxml import memory_plan
from paxml import partitioning
from paxml import peekable_input
from paxml import summaries
from paxml import tasks_lib
from paxml import train_states
from paxml import triggers
from praxis import pytypes

WeightedScalars = dict[str, tuple[jax.Array, jax.Array]]


def eval_step(params: Any, batch: pytypes.NestedMap, *, model: nn.Module) -> WeightedScalars:
  """The model's metrics on `batch`, without dropout (no 'dropout' rng)."""
  metrics, _ = model.apply({"params": params}, batch)
  return metrics


def eval_step_with_outputs(
  params: Any, batch: pytypes.NestedMap, *, model: nn.Module
) -> tuple[WeightedScalars, pytypes.NestedMap]:
  """`eval_step` plus the model's per-example outputs (for SeqIO score metrics)."""
  return model.apply({"params": params}, batch)


def decode_step(
  params: Any, batch: pytypes.NestedMap, rng: jax.Array, *, model: nn.Module
) -> tuple[WeightedScalars, pytypes.NestedMap, Any]:
  """The model's decode on `batch` as Pax's DecodeOut: (weighted scalars, per-example outputs,
  decode metrics); `rng` is its "random" stream (sampling, temperature > 0).

  A model whose `decode` returns only (weighted scalars, outputs) gets empty decode metrics, so
  the jitted program always has Pax's three outputs.
  """
  out = model.apply({"params": params}, batch, method="decode", rngs={"random": rng})
  if len(out) == 2:
    return out[0], out[1], pytypes.NestedMap()
  if len(out) != 3:
    raise ValueError(
      f"{type(model).__name__}.decode returned {len(out)} values; Pax's decode returns "
      "(weighted scalars, decoder outputs NestedMap, metrics)."
    )
  return tuple(out)


def open_writer(job_log_dir: str, name: str, enabled: bool = True) -> Any:
  """summaries/<name>, written in a background thread; a no-op writer off process 0 and when
  not `enabled` (--enable_summary_writer=false)."""
  if not enabled or not leader.is_leader():
    return summaries.NullSummaryWriter()
  return summaries.ThreadedSummaryWriter(summaries.SummaryWriter(job_log_dir, name))


def dataset_name(data: Any, index: int) -> str:
  return getattr(data, "name", None) or f"{type(data).__name__}{index}"


def batches_to_evaluate(data: Any):
  """Pax's eval reading: a full epoch after `reset()` if `reset_for_eval`, else N batches."""
  if getattr(data, "reset_for_eval", False):
    data.reset()
    while True:
      try:
        yield data.get_next()
      except StopIteration:
        return
  else:
    for _ in range(getattr(data, "eval_loop_num_batches", 1)):
      yield data.get_next()


class MetricSums:
  """Combines (value, weight) metrics over batches: sum(v * w) / sum(w)."""

  def __init__(self):
    self._sums: dict[str, list[float]] = {}

  def add(self, metrics: Any) -> None:
    for name, (value, weight) in jax.device_get(metrics).items():
      s = self._sums.setdefault(name, [0.0, 0.0])
      s[0] += float(value) * float(weight)
      s[1] += float(weight)

  def result(self) -> dict[str, float]:
    return {name: (s / w if w else 0.0) for name, (s, w) in self._sums.items()}


def _host_value(x: Any) -> np.ndarray:
  # A global array spans every process; each needs the whole of it to write the outputs.
  if jax.process_count() > 1:
    return multihost_utils.process_allgather(x, tiled=True)
  return np.asarray(jax.device_get(x))


@dataclasses.dataclass
class Programs:
  """Jitted eval/decode steps over one mesh, the inputs they read and their writers."""

  model: nn.Module
  partitioner: partitioning.Partitioner
  param_shardings: Any
  job_log_dir: str
  eval_inputs: list[tuple[str, Any]]
  decode_inputs: list[tuple[str, Any]]
  decode_dir: str = "decoder_out"
  random_seed: int = 0
  """Seeds sampling in decode: batch i at checkpoint step s uses fold_in(fold_in(seed, s), i),
  so decoding one checkpoint twice gives the same samples."""
  summaries_enabled: bool = True
  """False (--enable_summary_writer=false): no summaries/ event files."""

  @classmethod
  def create(
    cls,
    experiment: base_experiment.BaseExperiment,
    model: nn.Module,
    partitioner: partitioning.Partitioner,
    param_shardings: Any,
    job_log_dir: str,
    *,
    with_eval_test: bool,
    with_decode: bool,
    decode_dir: str = "decoder_out",
    random_seed: int = 0,
    summaries_enabled: bool = True,
  ):
    """Builds the eval datasets only if `with_eval_test`, the decode ones only if `with_decode`."""
    eval_inputs, decode_inputs = [], []
    preprocess = partitioner.preprocess_input_config
    if with_eval_test:
      built = [fdl.build(preprocess(c)) for c in experiment.datasets() if not c.is_training]
      eval_inputs = [(dataset_name(d, i), d) for i, d in enumerate(built)]
    if with_decode:
      if not hasattr(model, "decode"):
        raise ValueError(f"{type(model).__name__} has no decode() method; decoding needs one")
      built = [fdl.build(preprocess(c)) for c in experiment.decode_datasets()]
      decode_inputs = [(dataset_name(d, i), d) for i, d in enumerate(built)]
    return cls(
      model,
      partitioner,
      param_shardings,
      job_log_dir,
      eval_inputs,
      decode_inputs,
      decode_dir,
      random_seed,
      summaries_enabled,
    )

  def __post_init__(self):
    batch = self.partitioner.batch_sharding()
    replicated = self.partitioner.replicated()
    self._eval_fn = jax.jit(
      lambda p, b: eval_step(p, b, model=self.model),
      in_shardings=(self.param_shardings, batch),
      out_shardings=replicated,
    )
    self._decode_fn = jax.jit(
      lambda p, b, r: decode_step(p, b, r, model=self.model),
      in_shardings=(self.param_shardings, batch, replicated),
      out_shardings=(replicated, batch, replicated),  # Pax's DecodeOut (see decode_step).
    )
    # Eval with the per-example outputs too, for inputs with SeqIO score metrics.
    self._score_fn = jax.jit(
      lambda p, b: eval_step_with_outputs(p, b, model=self.model),
      in_shardings=(self.param_shardings, batch),
      out_shardings=(replicated, batch),
    )
    # Each new program (step, input shapes) checks its memory before it first runs.
    for attr, program in (
      ("_eval_fn", "the eval step"),
      ("_score_fn", "the eval step"),
      ("_decode_fn", "the decode step"),
    ):
      jitted = getattr(self, attr)
      mesh = self.partitioner.mesh
      setattr(self, attr, memory_plan.Preflighted(jitted, program, model=self.model, mesh=mesh))
    self._writers: dict[str, Any] = {}

  def _writer(self, name: str) -> Any:
    if name not in self._writers:
      self._writers[name] = open_writer(self.job_log_dir, name, self.summaries_enabled)
    return self._writers[name]

  def _evaluate(self, params: Any, batches, outputs: list | None = None) -> dict[str, float]:
    """Combined metrics of `batches`; appends (global batch, per-example output) pairs, on the
    host, to `outputs` when given."""
    sums = MetricSums()
    with self.partitioner.rules_context():
      for batch in batches:
        batch = self.partitioner.global_batch(pytypes.NestedMap(batch))
        if outputs is None:
          sums.add(self._eval_fn(params, batch))
        else:
          metrics, out = self._score_fn(params, batch)
          sums.add(metrics)
          outputs.append((jax.tree.map(_host_value, batch), jax.tree.map(_host_value, out)))
    return sums.result()

  def _seqio_metrics(
    self, data: Any, outputs: list, *, score: bool, step: int, name: str
  ) -> dict[str, float]:
    """The SeqIO task's metrics of one eval (score) or decode (predict), prefixed as Pax's."""
    if not leader.is_leader():
      return {}  # The outputs are global; process 0 computes and writes, as Pax.
    out_dir = os.path.join(self.job_log_dir, "eval_out" if score else self.decode_dir, name)
    metrics = data.process_outputs(outputs, score_metrics=score, step=step, output_dir=out_dir)
    prefix = "scoring_eval" if score else "decoder"
    return {f"{prefix}/{k}": v for k, v in metrics.items()}

  def eval_train(self, params: Any, step: int, batch: Any) -> dict[str, float]:
    """Metrics on one training batch (not trained on yet) -> summaries/eval_train."""
    result = self._evaluate(params, [batch])
    self._writer("eval_train").scalars(step, {f"Metrics/{k}": v for k, v in result.items()})
    logging.info("eval_train at step %d: %s", step, _brief(result))
    return result

  def eval_test(self, params: Any, step: int) -> dict[str, dict[str, float]]:
    """Every eval dataset -> summaries/eval_test_<name>; returns {name: metrics}."""
    results = {}
    for name, data in self.eval_inputs:
      outputs = [] if _has_seqio_metrics(data, score=True) else None
      results[name] = self._evaluate(params, batches_to_evaluate(data), outputs)
      scalars = {f"Metrics/{k}": v for k, v in results[name].items()}
      if outputs is not None:
        seqio_metrics = self._seqio_metrics(data, outputs, score=True, step=step, name=name)
        results[name].update(seqio_metrics)
        scalars.update(seqio_metrics)
      self._writer(f"eval_test_{name}").scalars(step, scalars)
      logging.info("eval_test_%s at step %d: %s", name, step, _brief(results[name]))
    return results

  def decode(
    self, params: Any, step: int, *, write_summaries: bool = True
  ) -> dict[str, dict[str, float]]:
    """Every decode dataset: metrics -> summaries/decode_test_<name>, outputs ->
    <decode_dir>/<name>/decoder_out_%08d.jsonl (one JSON object per example)."""
    results = {}
    for name, data in self.decode_inputs:
      sums = MetricSums()
      rows = []
      outputs = [] if _has_seqio_metrics(data, score=False) else None
      step_rng = jax.random.fold_in(jax.random.PRNGKey(self.random_seed), step)
      with self.partitioner.rules_context():
        for index, batch in enumerate(batches_to_evaluate(data)):
          batch = self.partitioner.global_batch(pytypes.NestedMap(batch))
          # Pax's DecodeOut; the decode metrics (clu metrics, empty for LanguageModel) are unused.
          metrics, out, _ = self._decode_fn(params, batch, jax.random.fold_in(step_rng, index))
          sums.add(metrics)
          out = {k: _host_value(v) for k, v in out.items()}
          if outputs is not None:
            outputs.append((jax.tree.map(_host_value, batch), out))
          texts = _detokenize(data, out)
          rows.extend(
            {**{k: v[i].tolist() for k, v in out.items()}, **{k: v[i] for k, v in texts.items()}}
            for i in range(len(next(iter(out.values()))))
          )
      results[name] = sums.result()
      scalars = {f"Metrics/{k}": v for k, v in results[name].items()}
      if outputs is not None:
        seqio_metrics = self._seqio_metrics(data, outputs, score=False, step=step, name=name)
        results[name].update(seqio_metrics)
        scalars.update(seqio_metrics)
      if write_summaries:
        self._writer(f"decode_test_{name}").scalars(step, scalars)
      if leader.is_leader():
        out_dir = os.path.join(self.job_log_dir, self.decode_dir, name)
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, f"decoder_out_{step:08d}.jsonl"), "w") as f:
          f.writelines(json.dumps(r) + "\n" for r in rows)
      logging.info(
        "decode_test_%s at step %d (%d examples): %s", name, step, len(rows), _brief(results[name])
      )
      for row in rows[:_NUM_LOGGED_TEXTS]:
        if "prefix" in row:
          logging.info("  %r -> %r", row["prefix"], row["decoded"])
    return results

  def __enter__(self) -> "Programs":
    return self

  def __exit__(self, *exc_info) -> None:
    for writer in self._writers.values():
      writer.close()


_NUM_LOGGED_TEXTS = 4  # Decoded texts also logged per decode dataset (all are in the .jsonl).


def _detokenize(data: Any, out: dict[str, np.ndarray]) -> dict[str, list[str]]:
  """`prefix` and `decoded` text per row, when the input has a vocabulary (`ids_to_strings`)
  and the model's output has LanguageModel.decode's output_ids / prefix_lengths /
  decode_lengths; else nothing."""
  if not {"output_ids", "prefix_lengths", "decode_lengths"} <= set(out):
    return {}
  ids, starts, ends = out["output_ids"], out["prefix_lengths"], out["decode_lengths"]  # [B, S]
  if ids.ndim == 3:  # Pax's decoders: [B, N, S] samples or beams, best first; the text is the best.
    # Their lengths come [B, N] or, from a decode of one sample, [B].
    ids, starts, ends = (x[:, 0] if np.ndim(x) >= 2 else x for x in (ids, starts, ends))
  try:
    prefix = data.ids_to_strings(ids, starts)
  except (AttributeError, NotImplementedError):
    return {}  # An input without a vocabulary (synthetic ids): ids only.
  # The generated part of row b is ids[b, starts[b]:ends[b]], left-aligned for ids_to_strings.
  generated = np.zeros_like(ids)
  for b, (start, end) in enumerate(zip(starts, ends)):
    generated[b, : end - start] = ids[b, start:end]
  return {"prefix": prefix, "decoded": data.ids_to_strings(generated, ends - starts)}


def _has_seqio_metrics(data: Any, *, score: bool) -> bool:
  has = getattr(data, "has_seqio_metrics", None)
  return bool(has and has(score))


def _brief(metrics: dict[str, float]) -> str:
  return " ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items()))


def wait_for_checkpoint(
  reader: checkpoints.CheckpointReader,
  after: int | None,
  *,
  poll_secs: float,
  timeout_secs: float | None,
  num_train_steps: int,
) -> int | None:
  """The newest checkpoint step greater than `after` (None: any), or None on timeout.

  Says what it waits for when it starts waiting and then at most once a minute.
  """
  say = triggers.TimeInterval(60.0)
  start = time.monotonic()
  while True:
    latest = reader.latest_step()
    if latest is not None and (after is None or latest > after):
      return latest
    if say.check(0):
      logging.info(
        "Waiting for a checkpoint %s in %s (the trainer saves up to step %d); checking every %gs",
        "to appear" if after is None else f"newer than step {after}",
        reader.directory,
        num_train_steps,
        poll_secs,
      )
    waited = time.monotonic() - start
    if timeout_secs is not None and waited >= timeout_secs:
      return None
    # Not past the timeout: a job given 1 s stops after 1 s, not after a whole poll interval.
    time.sleep(poll_secs if timeout_secs is None else min(poll_secs, timeout_secs - waited))


JOB_MODES = ("eval", "decode", "decode_once", "infer")


def run_job(
  experiment: base_experiment.BaseExperiment,
  job_log_dir: str,
  mode: str,
  *,
  restore_step: int | None = None,
  restore_dir: str | None = None,
  eval_during_decode: bool = False,
  enable_summary_writer: bool = True,
  poll_secs: float = 10.0,
  wait_timeout_secs: float | None = None,
) -> dict[str, Any]:
  """A standalone eval/decode job on the checkpoints of `job_log_dir` (module docstring).

  `restore_dir` (--restore_checkpoint_dir): read the checkpoints there instead (a job_log_dir,
  its checkpoints/ or one checkpoint_%08d directory); outputs still go to `job_log_dir`.
  `eval_during_decode`: decode jobs also evaluate the eval datasets (Pax's flag).

  Returns {'steps': the checkpoint steps it processed, 'results': the last results}.
  """
  if mode not in JOB_MODES:
    raise ValueError(f"mode {mode!r} is not one of {JOB_MODES}")
  from paxml import job_files  # pylint: disable=g-import-not-at-top

  job_files.prepare(job_log_dir)
  task = tasks_lib.to_task_config(experiment.task())
  job_files.write_config_files(job_log_dir, mode, experiment, experiment.datasets(), task)
  is_eval = mode == "eval"
  partitioner = partitioning.for_experiment(experiment, task)
  programs = Programs.create(
    experiment,
    task.model,
    partitioner,
    None,
    job_log_dir,
    with_eval_test=is_eval or eval_during_decode,
    with_decode=not is_eval,
    decode_dir="output" if mode == "infer" else "decoder_out",
    random_seed=task.random_seed,
    summaries_enabled=enable_summary_writer,
  )
  inputs = programs.eval_inputs if is_eval else programs.decode_inputs
  if not inputs:
    raise ValueError(
      f"--mode={mode} has nothing to run: {type(experiment).__name__}."
      f"{'datasets() has no is_training=False dataset' if is_eval else 'decode_datasets() is empty'}"
    )
  optimizer, _ = train_states.make_optimizer(task)
  init_rng, _ = jax.random.split(jax.random.PRNGKey(task.random_seed))
  first_batch = peekable_input.peek(inputs[0][1])
  layout = train_states.state_layout(task, optimizer, partitioner, first_batch, init_rng)
  programs = dataclasses.replace(programs, param_shardings=layout.shardings.mdl_vars["params"])

  reader = checkpoints.CheckpointReader(
    restore_dir or checkpoints.checkpoint_dir(job_log_dir), missing_ok=not restore_dir
  )
  done, results = [], {}
  follow = mode in ("eval", "decode") and restore_step is None
  try:
    with programs, jax.set_mesh(partitioner.mesh):
      while True:
        after = done[-1] if done else None
        if restore_step is None or done:
          latest = wait_for_checkpoint(
            reader,
            after,
            poll_secs=poll_secs,
            timeout_secs=wait_timeout_secs,
            num_train_steps=task.num_train_steps,
          )
          if latest is None:
            if not done:
              raise checkpoints.CheckpointNotFoundError(
                f"no checkpoint appeared in {reader.directory} within {wait_timeout_secs:g}s "
                "(--eval_wait_timeout); start the trainer on this --job_log_dir, or wait "
                "longer"
              )
            logging.info("No new checkpoint within %ss; stopping", wait_timeout_secs)
            break
        try:
          # Only the params: the optimizer state (twice their size for Adam) is never read.
          # Corrupt steps are reported once and skipped for the newest one that verifies.
          restored = reader.restore_params(
            layout.abstract.mdl_vars["params"], restore_step if not done else None, newer_than=after
          )
        except checkpoints.CheckpointError:
          if not follow:
            raise
          restored = None  # Every new step was corrupt (each reported).
        if restored is None:
          continue  # Wait for a newer one.
        step, params = restored
        logging.info("%s: restored the params of checkpoint step %d", mode, step)
        if is_eval:
          results = programs.eval_test(params, step)
        else:
          results = programs.decode(params, step, write_summaries=mode != "infer")
          if eval_during_decode:
            evals = programs.eval_test(params, step)
            results.update({f"eval_test_{k}": v for k, v in evals.items()})
        done.append(step)
        if mode in ("decode_once", "infer") or step >= task.num_train_steps:
          break
  finally:
    reader.close()
  return {"steps": done, "results": results}
