"""Evaluation: results as a monoid, tasks, lock-step loops, cron actions.

  EvalResults: a flax PyTreeNode the user subclasses; `reduce(other)` merges
    two batches' results, `is_better_than(other)` ranks them for keep-best,
    `write_to_tensorboard(train_state, writer)` and `to_log_message()`
    report them; `unshard_and_reduce()` folds a pmapped (per-device) result.
  EvalTask: `create_eval_results(dataset_name)` (the zero), `evaluate(batch,
    *args) -> EvalResults`, `finalize_eval_results(results)`.
  eval_batches / eval_datasets: the reduce loops. Across processes they stay
    in lock-step: a host that ran out of batches keeps calling
    `evaluate(None, ...)` (pmapped evaluators hold collectives every host must
    join) until every host is out, then the hosts' results are reduced.
  SampledSet: a fixed-size uniform random sample (e.g. example outputs).
  RunEval / RunEvalKeepBest: cron actions; keep-best saves the best train
    state with its results as JSON metadata and reloads them after a restart.
"""

from collections.abc import Callable, Iterable, Mapping
import dataclasses
import random
from typing import Any, Generic, TypeVar

from absl import logging
import flax.struct
import jax
import numpy as np

from paxml import summaries
from paxml.toolkit import pmap_utils
from paxml.toolkit import training
from paxml.toolkit import var_utils

BatchGen = Callable[[], Iterable[Any]]
T = TypeVar("T")


class EvalResults(flax.struct.PyTreeNode):
  """Metrics accumulated over batches; subclasses add fields and `reduce`."""

  def reduce(self, other: "EvalResults") -> "EvalResults":
    raise NotImplementedError(f"{type(self).__name__} must implement reduce(other).")

  def is_better_than(self, other: "EvalResults") -> bool:
    raise NotImplementedError(
        f"{type(self).__name__} must implement is_better_than(other) to keep the best "
        "checkpoint.")

  def write_to_tensorboard(self, current_train_state: Any, writer: Any) -> None:
    """Writes the metrics; the default writes nothing."""
    del current_train_state, writer

  def to_log_message(self) -> str:
    return repr(self)

  def unshard_and_reduce(self) -> "EvalResults":
    """Reduces a result whose leaves have a leading device axis."""
    shards = pmap_utils.unshard(self)
    if not shards:
      return self
    result = shards[0]
    for s in shards[1:]:
      result = result.reduce(s)
    return result


class EvalTask:
  """What to evaluate; subclasses implement `create_eval_results`, `evaluate`."""

  def create_eval_results(self, dataset_name: str) -> EvalResults:
    raise NotImplementedError(f"{type(self).__name__} must implement create_eval_results.")

  def evaluate(self, batch: Any, *args: Any) -> EvalResults:
    """Returns the results of one batch. `batch` is None on a host that ran out
    of batches while others have not; return a result that `reduce` ignores
    (it is discarded), but run the same collectives."""
    raise NotImplementedError(f"{type(self).__name__} must implement evaluate(batch, ...).")

  def finalize_eval_results(self, results: EvalResults) -> EvalResults:
    return results

  def make_cron_action(self, eval_batch_gens: Mapping[str, BatchGen], *,
                       tensorboard_root_path: str | None = None) -> "RunEval":
    return RunEval(self, eval_batch_gens, tensorboard_root_path=tensorboard_root_path)


def _any_process_active(active: bool) -> bool:
  flags = pmap_utils.gather_from_jax_processes(np.asarray(active, np.int32))
  return bool(np.any(flags))


def _reduce_across_processes(results: EvalResults) -> EvalResults:
  if jax.process_count() == 1:
    return results
  # One result per process along a new leading axis, folded like per-device results.
  return pmap_utils.gather_from_jax_processes(results).unshard_and_reduce()


def eval_batches(eval_task: EvalTask, dataset_name: str, batches: Iterable[Any],
                 *args: Any) -> EvalResults:
  """Reduces `evaluate` over `batches`, in lock-step with the other processes."""
  results = eval_task.create_eval_results(dataset_name)
  iterator = iter(batches)
  multi_process = jax.process_count() > 1
  active = True
  while True:
    batch = next(iterator, None) if active else None
    active = batch is not None
    if multi_process:
      if not _any_process_active(active):
        break
    elif not active:
      break
    batch_results = eval_task.evaluate(batch, *args)
    if not isinstance(batch_results, EvalResults):
      raise TypeError(
          f"{type(eval_task).__name__}.evaluate must return an EvalResults, got "
          f"{type(batch_results).__name__}.")
    if active:
      results = results.reduce(batch_results)
  return eval_task.finalize_eval_results(_reduce_across_processes(results))


def eval_datasets(eval_task: EvalTask, batch_gens: Mapping[str, BatchGen],
                  *args: Any) -> dict[str, EvalResults]:
  """Runs `eval_batches` on each dataset; a batch gen is a nullary function."""
  return {name: eval_batches(eval_task, name, gen(), *args)
          for name, gen in batch_gens.items()}


class SampledSet(Generic[T]):
  """An immutable uniform random sample of at most `max_size` elements.

  Each element gets a random priority; the set keeps the `max_size` highest,
  so the union of two samples is a sample of the union.
  """

  def __init__(self, max_size: int, items: tuple[tuple[float, T], ...] = (),
               seed: int | None = None):
    self.max_size = max_size
    self._items = tuple(sorted(items, key=lambda p: p[0], reverse=True)[:max_size])
    self._rng = random.Random(seed)

  def add(self, value: T) -> "SampledSet[T]":
    return SampledSet(self.max_size, self._items + ((self._rng.random(), value),),
                      seed=self._rng.random())

  def union(self, other: "SampledSet[T]") -> "SampledSet[T]":
    return SampledSet(self.max_size, self._items + other._items, seed=self._rng.random())

  def __iter__(self):
    return iter([v for _, v in self._items])

  def __len__(self) -> int:
    return len(self._items)

  def __repr__(self) -> str:
    return f"SampledSet({list(self)!r}, max_size={self.max_size})"


ResultProcessor = Callable[[dict[str, EvalResults], Any], Any]


class RunEval:
  """A cron action: evaluate `train_state.model_vars` on every dataset."""

  def __init__(self, eval_task: EvalTask, eval_batch_gens: Mapping[str, BatchGen], *,
               tensorboard_root_path: str | None = None):
    self.eval_task = eval_task
    self.eval_batch_gens = dict(eval_batch_gens)
    self._processors: list[ResultProcessor] = []
    self.writer = None
    if tensorboard_root_path is not None:
      self.writer = summaries.MultiDirectorySummaryWriter(tensorboard_root_path)
      self.add_result_processor(self.writer.as_result_processor())

  def add_result_processor(self, processor: ResultProcessor) -> "RunEval":
    """Calls `processor(results_by_dataset, train_state)` after each eval."""
    self._processors.append(processor)
    return self

  def keep_best_checkpoint(self, tune_on: str, dest_path: str) -> "RunEvalKeepBest":
    return RunEvalKeepBest(self, tune_on=tune_on, dest_path=dest_path)

  def __call__(self, train_state: Any, *args, **kwargs) -> dict[str, EvalResults]:
    del args, kwargs
    results = eval_datasets(self.eval_task, self.eval_batch_gens, train_state.model_vars)
    for name, r in results.items():
      logging.info("eval on %s at step %d: %s", name, int(np.asarray(train_state.step)),
                   r.to_log_message())
    for processor in self._processors:
      processor(results, train_state)
    if self.writer is not None:
      self.writer.flush()
    return results


@dataclasses.dataclass
class KeepBestOutcome:
  results: dict[str, EvalResults]
  is_new_best: bool


class RunEvalKeepBest:
  """Runs `run_eval`; when `tune_on`'s results beat the best, saves the state.

  The best state goes to `dest_path/checkpoint_%08d` (one kept) with the
  results as JSON metadata, so a restarted job reloads the best results and
  keeps comparing against them. Only the leader process does I/O.
  """

  def __init__(self, run_eval: RunEval, *, tune_on: str, dest_path: str):
    if tune_on not in run_eval.eval_batch_gens:
      raise ValueError(f"tune_on={tune_on!r} is not an eval dataset; datasets are "
                       f"{sorted(run_eval.eval_batch_gens)}.")
    self.run_eval = run_eval
    self.tune_on = tune_on
    self.dest_path = dest_path
    self.best_results: EvalResults | None = None
    # A leader-only saver: the other processes keep their best results in memory.
    self._saver = training.SaveCheckpoint(dest_path, max_to_keep=1)
    saved = self._saver.read_metadata()
    if saved is not None:
      template = run_eval.eval_task.create_eval_results(tune_on)
      self.best_results = var_utils.parse_pytree_json(saved, template)
      logging.info("Best %s results so far (from %s): %s", tune_on, dest_path,
                   self.best_results.to_log_message())

  def __call__(self, train_state: Any, *args, **kwargs) -> KeepBestOutcome:
    results = self.run_eval(train_state, *args, **kwargs)
    current = results[self.tune_on]
    is_new_best = self.best_results is None or current.is_better_than(self.best_results)
    if is_new_best:
      self.best_results = current
      self._saver.save(train_state, metadata=var_utils.dump_pytree_json(current))
    return KeepBestOutcome(results=results, is_new_best=bool(is_new_best))

  def wait_until_finished(self) -> None:
    self._saver.wait_until_finished()

  def close(self) -> None:
    self._saver.close()
