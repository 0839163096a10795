"""Evaluation: results as a monoid, tasks, lock-step loops, cron actions
(bobbin's `evaluation`).

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
    state in `dest_path` and its results as `dest_path/results.json`, and
    re-reads that file after a restart.
"""

import collections.abc
from collections.abc import Callable, Iterable, Iterator, Mapping
import logging
import os
from typing import Any, Generic, TypeVar

from etils import epath
import flax.struct
import jax
import numpy as np

from paxml import checkpoints
from paxml import leader
from paxml.toolkit import pmap_util
from paxml.toolkit import pytypes
from paxml.toolkit import tensorboard
from paxml.toolkit import training
from paxml.toolkit.var_util import read_pytree_json_file
from paxml.toolkit.var_util import write_pytree_json_file

T = TypeVar("T")
Batch = pytypes.Batch
BatchGen = pytypes.BatchGen
TrainState = training.TrainState


class EvalResults(flax.struct.PyTreeNode):
  """Evaluation metrics; subclasses add fields and implement `reduce`."""

  def to_log_message(self) -> str:
    return str(self)

  def reduce(self, other: "EvalResults") -> "EvalResults":
    """Returns the results of both `self`'s and `other`'s batches."""
    raise NotImplementedError(f"{type(self).__name__} must implement reduce(other).")

  def unshard_and_reduce(self) -> "EvalResults":
    """Folds a result with a leading device axis (from pmap) by `reduce`."""
    first, *rest = pmap_util.unshard(self)
    for other in rest:
      first = first.reduce(other)
    return first

  def is_better_than(self, other: "EvalResults") -> bool:
    """Whether `self` beats `other` (used by keep-best)."""
    raise NotImplementedError("For comparing results, implement `EvalResults.is_better_than`")

  def write_to_tensorboard(self, current_train_state: Any, writer: Any) -> None:
    """Writes these results to `writer` (used by MultiDirectorySummaryWriter)."""
    raise NotImplementedError(
      "`EvalResults` is instructed to publish to TensorBoard. However, "
      f"`EvalResults.write_to_tensorboard` is not overridden in the subclass ({type(self)})"
    )


EvalResultProcessorFn = Callable[[dict[str, EvalResults], Any], Any]


class EvalTask:
  """How to evaluate: the zero results, one batch's results, the final touch."""

  def create_eval_results(self, dataset_name: str) -> EvalResults:
    raise NotImplementedError(f"{type(self).__name__} must implement create_eval_results.")

  def evaluate(self, batch: Batch, *args: Any, **kwargs: Any) -> EvalResults:
    raise NotImplementedError(f"{type(self).__name__} must implement evaluate(batch, ...).")

  def finalize_eval_results(self, metrics: EvalResults) -> EvalResults:
    return metrics

  def make_cron_action(
    self, batch_gens: Mapping[str, BatchGen], *, tensorboard_root_path: Any = None
  ) -> "RunEval":
    """A cron action evaluating every dataset of `batch_gens`."""
    return RunEval(self, batch_gens, tensorboard_root_path=tensorboard_root_path)


def eval_batches(
  eval_task: EvalTask, dataset_name: str, batches: Iterable[Batch], *args: Any, **kwargs: Any
) -> EvalResults:
  """Reduces `eval_task.evaluate` over `batches` (lock-step across processes)."""
  metrics = eval_task.create_eval_results(dataset_name)
  batches = iter(batches)
  multi_process = jax.process_count() > 1
  while True:
    try:
      batch, active = next(batches), True
    except StopIteration:
      batch, active = None, False
    if multi_process:
      if not np.asarray(pmap_util.gather_from_jax_processes(active)).any():
        break
    elif not active:
      break
    result = eval_task.evaluate(batch, *args, **kwargs)
    if active:
      if not isinstance(result, type(metrics)):
        raise TypeError(
          f"`eval_task.evaluate` returned {type(result)}. It must be compatible with the "
          f"return type of `eval_task.create_eval_results ({type(metrics)})."
        )
      metrics = metrics.reduce(result)
  if multi_process:
    for process, other in enumerate(pmap_util.gather_from_jax_processes(metrics)):
      if process != jax.process_index():
        metrics = metrics.reduce(other)
  return eval_task.finalize_eval_results(metrics)


def eval_datasets(
  eval_task: EvalTask, batch_gens: Mapping[str, BatchGen], *args: Any, **kwargs: Any
) -> dict[str, EvalResults]:
  """`eval_batches` over each dataset: {name: results}."""
  results = {}
  for name, batch_gen in batch_gens.items():
    logging.info("Start evaluation process over %s", name)
    results[name] = eval_batches(eval_task, name, batch_gen(), *args, **kwargs)
  return results


class RunEval:
  """A cron action evaluating `train_state.model_vars` on every dataset."""

  def __init__(
    self,
    eval_task: EvalTask,
    eval_batch_gens: Mapping[str, BatchGen],
    tensorboard_root_path: Any = None,
  ):
    self._eval_task = eval_task
    self._eval_batch_gens = eval_batch_gens
    self._result_processors: list[EvalResultProcessorFn] = []
    if tensorboard_root_path is not None:
      writer = tensorboard.MultiDirectorySummaryWriter(
        tensorboard_root_path, keys=eval_batch_gens.keys()
      )
      self.add_result_processor(writer.as_result_processor())

  def __call__(self, train_state: Any, **unused_kwargs: Any) -> dict[str, EvalResults]:
    if not isinstance(train_state, TrainState):
      raise ValueError(
        "`RunEval` action must be used with `bobbin.TrainState` (paxml.toolkit.TrainState)."
      )
    results = eval_datasets(self._eval_task, self._eval_batch_gens, train_state.model_vars)
    for name, r in results.items():
      logging.info(
        "Evaluation results for dataset=%s @step=%d\n%s",
        name,
        int(np.asarray(train_state.step)),
        r.to_log_message(),
      )
    for process in self._result_processors:
      process(results, train_state)
    return results

  def keep_best_checkpoint(self, tune_on: str, dest_path: Any) -> "RunEvalKeepBest":
    return RunEvalKeepBest(self, tune_on, dest_path)

  def add_result_processor(self, f: EvalResultProcessorFn) -> "RunEval":
    self._result_processors.append(f)
    return self


class RunEvalKeepBestResult(flax.struct.PyTreeNode):
  """What `RunEvalKeepBest` returns."""

  eval_results: dict[str, EvalResults]
  current_best: EvalResults | None
  saved_train_state: Any


class RunEvalKeepBest:
  """Runs an eval action and keeps the train state of the best results.

  The best state is `dest_path/checkpoint_<step>` (only the newest kept) and
  its results `dest_path/results.json`; after a restart the first call
  re-reads that file, so a worse result does not replace the saved best.
  Only process 0 reads or writes.
  """

  def __init__(
    self, run_eval_action: Callable[..., dict[str, EvalResults]], tune_on: str, dest_path: Any
  ):
    self._run_eval_action = run_eval_action
    self._tune_on = tune_on
    self._dest_path = epath.Path(dest_path)
    self._results_path = self._dest_path / "results.json"
    self._current_best = None
    self._store = None

  def _save_state(self, train_state: Any) -> None:
    if self._store is None:
      self._store = checkpoints.TreeCheckpointer(
        os.fspath(self._dest_path), max_to_keep=1, finish_at_exit=True
      )
    self._store.save(int(np.asarray(train_state.step)), train_state)

  def __call__(self, train_state: Any, **kwargs: Any) -> RunEvalKeepBestResult:
    results = self._run_eval_action(train_state, **kwargs)
    result = results[self._tune_on]
    saved = None
    if self._current_best is None and leader.is_leader():
      try:
        self._current_best = read_pytree_json_file(self._results_path, result)
      except Exception:  # pylint: disable=broad-except
        self._current_best = None  # No (readable) earlier best.
    if self._current_best is None or result.is_better_than(self._current_best):
      self._current_best = result
      if leader.is_leader():
        self._save_state(train_state)
        write_pytree_json_file(self._results_path, result)
      saved = train_state
    return RunEvalKeepBestResult(
      eval_results=results, current_best=self._current_best, saved_train_state=saved
    )

  def wait_until_finished(self) -> None:
    if self._store is not None:
      self._store.wait_until_finished()


class SampledSet(collections.abc.Collection, Generic[T], flax.struct.PyTreeNode):
  """An immutable uniform random sample of at most `max_size` added elements.

  Each element gets a random priority; the `max_size` lowest are kept.
  `union` takes another SampledSet (keeping its priorities) or any iterable.
  """

  max_size: int
  values: tuple[Any, ...] = ()
  priorities: tuple[float, ...] = ()

  def __contains__(self, q: Any) -> bool:
    return q in self.values

  def __iter__(self) -> Iterator[Any]:
    return iter(self.values)

  def __len__(self) -> int:
    return len(self.values)

  def _draw_priority(self, x: Any) -> float:
    del x
    return np.random.uniform()

  def _keep_lowest(self, pairs: list[tuple[Any, float]]) -> "SampledSet":
    pairs = sorted(pairs, key=lambda p: p[1])[: self.max_size]
    return self.replace(values=tuple(v for v, _ in pairs), priorities=tuple(p for _, p in pairs))

  def add(self, x: Any) -> "SampledSet":
    """Returns this set with `x` added."""
    return self._keep_lowest(
      list(zip(self.values, self.priorities)) + [(x, self._draw_priority(x))]
    )

  def union(self, iterable: Iterable[Any]) -> "SampledSet":
    """Returns the union with another SampledSet or with any iterable."""
    if isinstance(iterable, SampledSet):
      other = list(zip(iterable.values, iterable.priorities))
    else:
      other = [(x, self._draw_priority(x)) for x in iterable]
    return self._keep_lowest(list(zip(self.values, self.priorities)) + other)
