"""`SeqIOInput`: a SeqIO task or mixture as a Pax input, with the task's eval metrics.

Pax's class, field for field where this project's `BaseInput` allows:

    inp = SeqIOInput.HParams(
        mixture_name="kjv_lm", split_name="train", is_training=True, batch_size=16,
        task_feature_lengths={"targets": 128},
        feature_converter=LanguageModelFeatures(pack=False, bos_id=2)).Instantiate()
    batch = inp.get_next()   # NestedMap(ids, labels, paddings, weights, segment_ids, ...)

Sharding: host `infeed_host_index` reads `seqio.ShardInfo(infeed_host_index,
num_infeed_hosts)` of the split (SeqIO shards the files, or the examples when there are fewer
files than hosts), so hosts never share an example.

Eval (`reset_for_eval=True`): one epoch, padded so that every host yields the same number of
batches. Pax asks the other hosts for their counts with a collective; here each host counts
every shard itself (the eval split is read once per shard when the input is built), which needs no
collective and also works for hosts simulated in one process. Pad rows repeat an example with
`eval_sample_weights = 0` and `weights = 0`, so they add nothing to the LM's metrics.

Metrics: a task's `score_metric_fns` get per-example scores from eval (the negated summed
cross-entropy of each example: its log-likelihood) and its `predict_metric_fns` get the decoded
text; `process_outputs` computes them on the whole split (all hosts' rows), writes them as JSONL
with SeqIO's JSONLogger and returns floats that eval_lib writes to TensorBoard under
`scoring_eval/<metric>` (eval_test_<name>) and `decoder/<metric>` (decode_test_<name>), as Pax.
Each example carries `enum_shard_index` / `enum_index_within_shard`, its key in the targets.

Input position in O(1): a repeating training input over a `seqio.Task` reads the task's rows by
index from the row cache (paxml/data/seqio_cache.py: the split after its preprocessors and the
feature converter, written once into ArrayRecord shards, read with Grain, shuffled per epoch by
(seed, epoch); hosts read disjoint rows of one global stream). Batch i is computed from i, so its
state is {"num_batches", "seed"} and `set_state` costs the same at batch 10 as at 10^6. Mixtures,
finite and eval inputs, a split over the cache's size limit and `PAXML_SEQIO_CACHE=off` keep the
tf.data pipeline below.

Input checkpointing (tf.data): `get_state()` is {"num_batches", "seed"} plus, for a training input, the
tf.data iterator's own checkpoint ("iterator": its files, base64; Pax too stores the iterator's
bytes). `set_state` restores that iterator, which costs the size of its state (the shuffle buffer)
whatever the position. A state without it (an eval input's, or one written before), or one tf.data
cannot restore into the rebuilt pipeline, rebuilds the iterator and skips `num_batches` batches, reading each of them:
time proportional to the position, since a tf.data pipeline cannot seek. It skips on the iterator
of the pipeline itself, so the iterator saved next restores (an earlier version wrapped it in
`dataset.skip(n)`, whose saved graph no restore matched: "Failed to restore dataset iterator ...
MapAndBatch::Zip", and every later restore skipped again).
"""

from __future__ import annotations

import base64
import os
import tempfile
from typing import Any, Mapping, Sequence

from absl import logging
import numpy as np

from praxis import base_input
from praxis import py_utils
from praxis import pytypes
from hostenv import quiet_tensorflow
from paxml.data import seqio_cache

tf = quiet_tensorflow.import_tensorflow()
import seqio  # After TensorFlow's quiet import: seqio imports TensorFlow too.

NestedMap = pytypes.NestedMap

# Pax's summary prefixes for SeqIO metrics and the keys of model outputs they read.
EVAL_METRICS_PREFIX = "scoring_eval"
DECODE_METRICS_PREFIX = "decoder"
SCORE_KEY = "scores"
DECODER_OUT_KEY = "decoded_substr"
# The per-example provenance fields every batch carries (-1 in pad rows).
SHARD_FIELD = "enum_shard_index"
INDEX_FIELD = "enum_index_within_shard"
# Pax's names for SeqIO's provenance keys (praxis.py_utils), which its tests and callers import.
SHARD_INDEX_KEY = py_utils.SHARD_INDEX_KEY
NUM_SHARDS_KEY = py_utils.NUM_SHARDS_KEY
INDEX_WITHIN_SHARD_KEY = py_utils.INDEX_WITHIN_SHARD_KEY


def _shift_left_and_pad(x: tf.Tensor, value: Any) -> tf.Tensor:
  """x[..., 1:] followed by `value`: [..., T] -> [..., T]."""
  return tf.concat([x[..., 1:], tf.fill(tf.shape(x[..., :1]), tf.cast(value, x.dtype))], -1)


class LanguageModelFeatures(seqio.DecoderFeatureConverter):
  """SeqIO's decoder feature converter, then Pax's LM field names.

  Output per example: `ids` (inputs shifted right, `bos_id` first), `labels`, `weights`,
  `paddings`, `segment_ids`, `segment_pos` and, for a prefix LM (a task with "inputs"),
  `inputs_indicator` (1 on the prompt positions) and `prefix_lengths` (their count, which
  LanguageModel.decode continues from).
  """

  def __init__(
    self,
    pack: bool = False,
    weights_on_targets_only: bool | None = None,
    apply_length_check: bool = True,
    bos_id: int = 0,
    use_custom_packing_ops: bool = False,
    reverse_bos_padding: bool = False,
    eos_id: int = 1,
  ):
    """Pax's arguments; `reverse_bos_padding` feeds the targets themselves as `ids` (no BOS
    shift) and predicts the next target, the last position predicting `eos_id` (Pax's C4
    GPT setting)."""
    self._weights_on_targets_only = weights_on_targets_only
    self._reverse_bos_padding = reverse_bos_padding
    self._eos_id = eos_id
    super().__init__(
      loss_on_targets_only=True,
      pack=pack,
      use_custom_packing_ops=use_custom_packing_ops,
      apply_length_check=apply_length_check,
      bos_id=bos_id,
    )

  @property
  def weights_on_targets_only(self) -> bool | None:
    return self._weights_on_targets_only

  def __str__(self) -> str:
    return (
      f"{type(self).__name__}(pack={self.pack}, weights_on_targets_only="
      f"{self._weights_on_targets_only}, bos_id={self.bos_id})"
    )

  def _to_pax(self, b: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    ret = {"ids": b["decoder_input_tokens"], "labels": b["decoder_target_tokens"]}
    non_padding = b["decoder_loss_weights"] > 0
    if "decoder_causal_attention" in b:
      # A prefix LM: the prompt positions are not padding even though they carry no loss.
      non_padding = tf.logical_or(b["decoder_causal_attention"] > 0, non_padding)
      ret["inputs_indicator"] = b["decoder_causal_attention"]
      ret["prefix_lengths"] = tf.reduce_sum(b["decoder_causal_attention"], axis=-1)
    weights = tf.cast(non_padding, tf.float32)
    ret["paddings"] = 1.0 - weights
    if "decoder_segment_ids" in b:
      ret["segment_ids"] = b["decoder_segment_ids"]
      ret["segment_pos"] = b["decoder_positions"]
    else:
      ret["segment_ids"] = tf.cast(non_padding, tf.int32)
      ret["segment_pos"] = ret["segment_ids"] * tf.range(tf.shape(weights)[-1])
    if self._weights_on_targets_only:
      weights *= tf.cast(b["decoder_loss_weights"] > 0, tf.float32)
    ret["weights"] = weights
    if self._reverse_bos_padding:
      ret["ids"] = ret["labels"]
      ret["labels"] = _shift_left_and_pad(ret["labels"], self._eos_id)
      ret["weights"] = _shift_left_and_pad(ret["weights"], 0.0)
      ret["paddings"] = _shift_left_and_pad(ret["paddings"], 1.0)
    return ret

  def __call__(self, ds: tf.data.Dataset, task_feature_lengths: Mapping[str, int]):
    return super().__call__(ds, task_feature_lengths).map(self._to_pax)


class SequenceModelFeatures(seqio.EncDecFeatureConverter):
  """SeqIO's encoder-decoder converter, then Pax's `src` / `tgt` NestedMaps (ids, labels,
  paddings, weights, segment_ids, segment_pos) of a sequence model."""

  def __init__(self, pack: bool = False, bos_id: int = 0):
    super().__init__(pack=pack, bos_id=bos_id)

  def _to_pax(self, b: Mapping[str, tf.Tensor]) -> dict[str, Any]:
    src_ids = b["encoder_input_tokens"]
    src_weights = tf.cast(src_ids != 0, tf.float32)
    tgt_weights = tf.cast(b["decoder_loss_weights"], tf.float32)
    src = {"ids": src_ids, "paddings": 1.0 - src_weights}
    tgt = {
      "ids": b["decoder_input_tokens"],
      "labels": b["decoder_target_tokens"],
      "paddings": 1.0 - tgt_weights,
      "weights": tgt_weights,
    }
    for out, prefix, weights in ((src, "encoder", src_weights), (tgt, "decoder", tgt_weights)):
      if f"{prefix}_segment_ids" in b:
        out["segment_ids"] = b[f"{prefix}_segment_ids"]
        out["segment_pos"] = b[f"{prefix}_positions"]
      else:
        out["segment_ids"] = tf.cast(weights, tf.int32)
        out["segment_pos"] = out["segment_ids"] * tf.range(tf.shape(weights)[-1])
    return {"src": src, "tgt": tgt}

  def __call__(self, ds: tf.data.Dataset, task_feature_lengths: Mapping[str, int]):
    return super().__call__(ds, task_feature_lengths).map(self._to_pax)


class SeqIOInput(base_input.BaseInput):
  """A SeqIO task or mixture as a BaseInput (module docstring).

  Attributes:
    mixture_name: name of a registered SeqIO task or mixture (import the module that registers
      it first). Exactly one of this and `mixture_or_task`.
    mixture_or_task: a seqio.Task or seqio.Mixture object.
    split_name: the split to read ("train", "validation", ...).
    deterministic_input: Pax's deterministic (index-addressed) SeqIO input; not supported in
      open-source Pax either, so True raises.
    task_feature_lengths: feature name -> length ({"targets": 128}, {"inputs": .., "targets": ..});
      longer examples are truncated.
    feature_converter: turns the task's features into the model's (LanguageModelFeatures,
      SequenceModelFeatures, or any seqio.FeatureConverter).
    shuffle: None shuffles exactly the training data; eval/decode never shuffles (the targets
      of the metrics are matched by position).
    repeat: None repeats exactly when not `reset_for_eval` (BaseInput's table).
    use_cached: read the task's offline cache (seqio `use_cached`).
    eval_auto_pad: with `reset_for_eval`, pad every host to the same number of full batches.
    drop_remainder: drop a last partial batch (padding makes eval batches full anyway).
    num_batches_to_skip: training only: batches to skip at the start.
    trim_output_features: truncate features to `task_feature_lengths`.
    overridden_vocab: the vocabulary of `ids_to_strings`; None takes the task's "targets" one.
    annotate_padding_fields: Pax's switch to zero the `weights` (and set `paddings`) of eval
      padding rows; here they are always zeroed, so it changes nothing.
  """

  mixture_name: str | None = None
  mixture_or_task: Any = None
  split_name: str | None = None
  deterministic_input: bool = False
  task_feature_lengths: Mapping[str, int] | None = None
  feature_converter: Any = None
  shuffle: bool | None = None
  use_cached: bool = False
  eval_auto_pad: bool = True
  drop_remainder: bool = True
  num_batches_to_skip: int | None = None
  trim_output_features: bool = True
  overridden_vocab: Any = None
  annotate_padding_fields: bool = False

  def __post_init__(self):
    if self.name in ("", "input"):  # BaseInput's default: Pax names it after the data.
      source = self.mixture_name or getattr(self.mixture_or_task, "name", "seqio")
      self.name = f"{source}_{self.split_name}"
    if not self.is_training and self.input_random_seed is None:
      self.input_random_seed = 42  # As Pax: eval data in the same order in every run.
    super().__post_init__()
    self._validate()
    self._shard_info = seqio.ShardInfo(
      index=self.infeed_host_index, num_shards=self.num_infeed_hosts
    )
    self._shard_examples: list[list[dict[str, Any]]] | None = None
    self.dataset = self._get_dataset()
    self._num_batches = 0
    self._row_seed = self.input_random_seed
    if self._row_seed is None:  # Unseeded: a seed of this run, which the saved state records.
      self._row_seed = int(np.random.SeedSequence().entropy % (2**31))
    self._rows = self._row_reader()  # Index-addressed rows (seqio_cache.py), or None: tf.data.
    # A tf.data iterator, not a numpy one: it can be saved.
    self._iter = None if self._rows is not None else iter(self.dataset)
    self._iterator_saves = self.is_training and self._rows is None

  def _validate(self) -> None:
    where = f"SeqIOInput {self.name}"
    if bool(self.mixture_name) == (self.mixture_or_task is not None):
      raise base_input.InputConfigError(
        f"{where}: set exactly one of mixture_name (a registered task or mixture) and "
        f"mixture_or_task (the object); got {self.mixture_name!r} and {self.mixture_or_task!r}."
      )
    if self.deterministic_input:
      raise base_input.InputConfigError(
        f"{where}: deterministic_input is not supported (nor in open-source Pax); input "
        "checkpointing (get_state/set_state) already resumes at the next batch."
      )
    if not self.split_name:
      raise base_input.InputConfigError(f"{where}: split_name is required (e.g. 'train').")
    if self.feature_converter is None:
      raise base_input.InputConfigError(
        f"{where}: feature_converter is required, e.g. seqio_input.LanguageModelFeatures()."
      )
    if self.is_training and self.split_name != "train":
      logging.warning("%s: is_training=True reads split %r, not 'train'.", where, self.split_name)
    task = self.mixture_or_task_inst
    if (
      not self.is_training
      and isinstance(task, seqio.Task)
      and task.score_metric_fns
      and isinstance(self.feature_converter, LanguageModelFeatures)
      and "inputs" in task.output_features
      and not self.feature_converter.weights_on_targets_only
    ):
      raise base_input.InputConfigError(
        f"{where}: a prefix-LM task with score_metric_fns must score the targets only; use "
        "LanguageModelFeatures(weights_on_targets_only=True)."
      )

  @property
  def mixture_or_task_inst(self) -> seqio.Task | seqio.Mixture:
    return self.mixture_or_task or seqio.get_mixture_or_task(self.mixture_name)

  @property
  def should_shuffle(self) -> bool:
    if self.shuffle is None:
      return self.is_training
    return self.shuffle and self.is_training

  # -- the dataset --------------------------------------------------------------------------

  def _task_dataset(
    self, shard_info: seqio.ShardInfo | None, *, shuffle: bool, num_epochs: int | None
  ) -> tf.data.Dataset:
    """The task's examples (before feature conversion) of one shard."""
    return self.mixture_or_task_inst.get_dataset(
      sequence_length=self.task_feature_lengths,
      split=self.split_name,
      shuffle=shuffle,
      num_epochs=num_epochs,
      shard_info=shard_info,
      use_cached=self.use_cached,
      seed=self.input_random_seed,
      trim_output_features=self.trim_output_features,
    )

  def _converted(self, ds: tf.data.Dataset, shard_index: int) -> tf.data.Dataset:
    """Feature conversion, then the provenance fields and a sample weight of 1."""
    ds = self.feature_converter(ds, task_feature_lengths=self.task_feature_lengths)

    def enumerate_fn(index, ex):
      return {
        **ex,
        SHARD_FIELD: tf.constant(shard_index, tf.int32),
        INDEX_FIELD: tf.cast(index, tf.int32),
        "eval_sample_weights": tf.constant(1.0, tf.float32),
      }

    return ds.enumerate().map(enumerate_fn)

  def _get_dataset(self) -> tf.data.Dataset:
    repeat = bool(self.repeat)
    ds = self._task_dataset(
      self._shard_info, shuffle=self.should_shuffle, num_epochs=None if repeat else 1
    )
    ds = self._converted(ds, self.infeed_host_index)
    if not self.is_training and self.reset_for_eval and self.eval_auto_pad and not repeat:
      ds = self._pad_to_equal_batches(ds)
    ds = ds.batch(self.batch_size, drop_remainder=self.drop_remainder)
    if self.num_batches_to_skip and self.is_training:
      ds = ds.skip(self.num_batches_to_skip)
    return ds

  def shard_examples(self) -> list[list[dict[str, Any]]]:
    """Every shard's examples of the split in reading order (the targets of the metrics)."""
    if self._shard_examples is None:
      self._shard_examples = [
        list(
          self._task_dataset(
            seqio.ShardInfo(s, self.num_infeed_hosts), shuffle=False, num_epochs=1
          ).as_numpy_iterator()
        )
        for s in range(self.num_infeed_hosts)
      ]
    return self._shard_examples

  def _pad_to_equal_batches(self, ds: tf.data.Dataset) -> tf.data.Dataset:
    counts = [len(s) for s in self.shard_examples()]
    num_batches = max(-(-c // self.batch_size) for c in counts)
    pad = num_batches * self.batch_size - counts[self.infeed_host_index]
    logging.info(
      "%s: %d examples on this host (hosts: %s), padded with %d to %d batches of %d",
      self.name,
      counts[self.infeed_host_index],
      counts,
      pad,
      num_batches,
      self.batch_size,
    )
    if pad == 0:
      return ds
    # A host whose shard is empty repeats the first example of another shard.
    source = next(s for s in range(self.num_infeed_hosts) if counts[s]) if any(counts) else None
    if source is None:
      raise base_input.InputConfigError(
        f"SeqIOInput {self.name}: split {self.split_name!r} has no examples to evaluate."
      )
    one = self._converted(
      self._task_dataset(
        seqio.ShardInfo(source, self.num_infeed_hosts), shuffle=False, num_epochs=1
      ).take(1),
      source,
    )

    def as_pad(ex):
      out = {
        **ex,
        SHARD_FIELD: tf.constant(-1, tf.int32),
        INDEX_FIELD: tf.constant(-1, tf.int32),
        "eval_sample_weights": tf.constant(0.0, tf.float32),
      }
      if "weights" in out:  # The LM's metrics weigh tokens by `weights`: pad rows add nothing.
        out["weights"] = tf.zeros_like(out["weights"])
      return out

    return ds.concatenate(one.map(as_pad).repeat(pad))

  # -- the row cache (position in O(1)) ------------------------------------------------------

  def _row_reader(self) -> seqio_cache.RowReader | None:
    """A repeating training input over a Task reads its rows by index from the row cache
    (paxml/data/seqio_cache.py: built once, then batch i computed from i); None keeps tf.data
    (eval inputs, finite inputs, mixtures, a split over the size limit, PAXML_SEQIO_CACHE=off)."""
    task = self.mixture_or_task_inst
    if not (
      self.is_training
      and self.repeat
      and not self.reset_for_eval
      and isinstance(task, seqio.Task)
      and seqio_cache.enabled()
    ):
      return None
    settings = {
      "task_feature_lengths": dict(self.task_feature_lengths or {}),
      "converter": (type(self.feature_converter), sorted(vars(self.feature_converter).items())),
      "trim_output_features": self.trim_output_features,
      "use_cached": self.use_cached,
    }
    summary = seqio_cache.ensure(
      seqio_cache.fingerprint(task, self.split_name, settings),
      f"{task.name}-{self.split_name}",
      self._rows_to_cache,
      task,
      expected_rows=_num_examples(task, self.split_name),
    )
    if summary is None:
      return None
    return self._new_row_reader(summary, self._row_seed)

  def _new_row_reader(self, summary, seed: int) -> seqio_cache.RowReader:
    return seqio_cache.RowReader(
      summary,
      batch_size=self.batch_size,
      host_index=self.infeed_host_index,
      num_hosts=self.num_infeed_hosts,
      shuffle=self.should_shuffle,
      seed=seed,
    )

  def _rows_to_cache(self):
    """The whole split's converted rows in the task's stored order (packing runs over it once)."""
    ds = self._task_dataset(None, shuffle=False, num_epochs=1)
    return self.feature_converter(
      ds, task_feature_lengths=self.task_feature_lengths
    ).as_numpy_iterator()

  def _cached_batch(self) -> NestedMap:
    index = self._num_batches + (self.num_batches_to_skip or 0)
    batch = self._rows.batch(index)
    batch[SHARD_FIELD] = np.full([self.batch_size], self.infeed_host_index, np.int32)
    batch[INDEX_FIELD] = np.arange(
      index * self.batch_size, (index + 1) * self.batch_size, dtype=np.int64
    ).astype(np.int32)
    batch["eval_sample_weights"] = np.ones([self.batch_size], np.float32)
    return _to_nested_map(batch)

  # -- BaseInput ------------------------------------------------------------------------------

  def get_next(self) -> NestedMap:
    if self._rows is not None:
      batch = self._cached_batch()
      self._num_batches += 1
      return batch
    batch = next(self._iter)  # StopIteration at the end of a finite input, as BaseInput says.
    self._num_batches += 1
    return _to_nested_map(tf.nest.map_structure(lambda t: t.numpy(), batch))

  def get_state(self) -> dict[str, Any]:
    state = {"num_batches": self._num_batches, "seed": self.input_random_seed}
    if self._rows is not None:
      if self.input_random_seed is None:
        state["row_seed"] = self._row_seed  # This run's own seed: a restore continues its stream.
      return state
    if self._iterator_saves:
      try:
        state["iterator"] = _save_iterator(self._iter)
      except (tf.errors.OpError, ValueError) as e:  # A pipeline op tf.data cannot checkpoint.
        self._iterator_saves = False
        logging.warning(
          "SeqIOInput %s: tf.data cannot checkpoint this pipeline's iterator (%s); restores "
          "will skip the consumed batches instead, which takes time proportional to them.",
          self.name,
          str(e).splitlines()[0][:200],
        )
    return state

  def set_state(self, state: dict[str, Any]) -> None:
    if state.get("seed", self.input_random_seed) != self.input_random_seed:
      raise base_input.InputConfigError(
        f"SeqIOInput {self.name}: the saved state has seed {state['seed']} but this input "
        f"{self.input_random_seed}; build the input with input_random_seed={state['seed']} "
        "to continue that stream."
      )
    self._num_batches = int(state["num_batches"])
    if self._rows is not None:  # Batch i is computed from i: nothing to rebuild or replay.
      row_seed = state.get("row_seed", self._row_seed)
      if self.input_random_seed is None and row_seed != self._row_seed:
        self._row_seed = int(row_seed)
        self._rows = self._new_row_reader(self._rows.summary, self._row_seed)
      return
    # A new dataset object, not a second iterator over the old one: tf.data's seeded shuffle
    # reshuffles on every iteration of one dataset, so only a fresh one replays the stream.
    self.dataset = self._get_dataset()
    self._iter = iter(self.dataset)
    if "iterator" in state:
      try:
        _restore_iterator(self._iter, state["iterator"])
        return
      except tf.errors.OpError as e:  # E.g. a pipeline whose graph differs from the saved one.
        logging.warning(
          "SeqIOInput %s: tf.data could not restore the saved iterator (%s); skipping the %d "
          "consumed batches instead.",
          self.name,
          str(e).splitlines()[0][:200],
          self._num_batches,
        )
        self.dataset = self._get_dataset()
        self._iter = iter(self.dataset)
    self._skip(self._num_batches)

  def _skip(self, num_batches: int) -> None:
    """Reads `num_batches` batches of the fresh iterator (time proportional to them).

    On the iterator of `self.dataset` itself, not of `dataset.skip(n)`: the iterator saved by the
    next get_state must be one of the pipeline a restore rebuilds (a `skip` in the saved graph
    made every later restore fail and skip again).
    """
    for done in range(num_batches):
      try:
        next(self._iter)
      except StopIteration:  # A finite input shorter than the position: at its end.
        logging.warning(
          "SeqIOInput %s: the input ended after %d of the %d batches to skip.",
          self.name,
          done,
          num_batches,
        )
        return

  def ids_to_strings(
    self, ids: np.ndarray, lengths: Sequence[int] | np.ndarray | None, key: str | None = None
  ) -> list[str]:
    """Rows of `ids` [B, T] (their first `lengths[b]` ids) as text, with the task's vocabulary
    ("targets"; key "src" takes the "inputs" one)."""
    vocab = self._vocab(key)
    ids = np.asarray(ids)
    if ids.ndim == 1:
      ids = ids[np.newaxis]
      lengths = None if lengths is None else np.atleast_1d(lengths)
    if lengths is None:
      lengths = [ids.shape[1]] * ids.shape[0]
    return [vocab.decode(ids[i, : int(n)].tolist()) for i, n in enumerate(lengths)]

  def _vocab(self, key: str | None = None) -> seqio.Vocabulary:
    if self.overridden_vocab is not None:
      return self.overridden_vocab
    if key not in (None, "src", "tgt"):
      raise ValueError(f"ids_to_strings: key must be None, 'src' or 'tgt', got {key!r}.")
    features = self.mixture_or_task_inst.output_features
    return features["inputs" if key == "src" else "targets"].vocabulary

  # -- metrics --------------------------------------------------------------------------------

  def has_seqio_metrics(self, score_metrics: bool) -> bool:
    """Whether eval (score) or decode (predict) has SeqIO metrics to compute on this input."""
    task = self.mixture_or_task_inst
    if not isinstance(task, seqio.Task) or getattr(self.feature_converter, "pack", False):
      return False  # As Pax: metrics need a Task and unpacked rows (one example per row).
    return bool(task.score_metric_fns if score_metrics else task.predict_metric_fns)

  def compute_metrics(
    self, outputs: Sequence[tuple[tuple[int, int], Mapping[str, Any]]], score_metrics: bool = False
  ) -> list[dict[str, Any]]:
    """The task's metrics on model outputs keyed by (shard, index): `scores` for score
    metrics, `decoded_substr` (token ids) for predict metrics. Every example of the split needs
    an output; a missing one raises (a shorter eval than the split)."""
    if not self.has_seqio_metrics(score_metrics):
      return []
    by_key = dict(outputs)
    task = self.task_inst
    targets, model_outs = [], []
    for shard, examples in enumerate(self.shard_examples()):
      for index, ex in enumerate(examples):
        if (shard, index) not in by_key:
          raise ValueError(
            f"SeqIOInput {self.name}: no model output for example {index} of shard {shard} "
            f"({len(by_key)} outputs for {sum(map(len, self.shard_examples()))} examples); "
            "the metrics need the whole split: evaluate with reset_for_eval=True."
          )
        targets.append(ex)
        model_outs.append(by_key[(shard, index)][SCORE_KEY if score_metrics else DECODER_OUT_KEY])
    if score_metrics:
      model_outs = np.asarray(model_outs, np.float32)
    else:
      width = max((len(o) for o in model_outs), default=0)
      model_outs = np.array(
        [np.pad(np.asarray(o, np.int32), (0, width - len(o))) for o in model_outs]
      )
    wanted = (
      seqio.metrics.ModelOutputType.SCORE
      if score_metrics
      else seqio.metrics.ModelOutputType.PREDICTION
    )
    results = []
    for metric in task.metric_objs:
      if metric.model_output_type != wanted:
        continue
      metric = metric.from_model_output(targets, model_outs, task.output_features)
      if isinstance(metric, seqio.metrics.CollectingMetric):  # The task's metric_fns.
        results.append(metric.actual_compute(targets, task.output_features)[0])
      else:
        results.append(metric.compute())
    return results

  @property
  def task_inst(self) -> seqio.Task:
    return self.mixture_or_task_inst

  def process_outputs(
    self,
    outputs: Sequence[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]],
    score_metrics: bool,
    step: int,
    output_dir: str,
  ) -> dict[str, float]:
    """(global batch, model output) pairs of one eval or decode -> the task's metrics.

    Reads each row's key from the batch's provenance fields (pad rows skipped) and its score
    (`scores`, else minus LanguageModel's `per_sequence_xent`) or its generated ids
    (LanguageModel.decode's output_ids between prefix_lengths and decode_lengths); writes the
    metrics with SeqIO's JSONLogger into `output_dir` and returns them as floats.
    """
    keyed = []
    for batch, out in outputs:
      for row, (shard, index) in enumerate(zip(batch[SHARD_FIELD], batch[INDEX_FIELD])):
        if shard < 0:
          continue  # A pad row.
        keyed.append(
          (
            (int(shard), int(index)),
            {SCORE_KEY if score_metrics else DECODER_OUT_KEY: _row_output(out, row, score_metrics)},
          )
        )
    metrics = {}
    for result in self.compute_metrics(keyed, score_metrics=score_metrics):
      metrics.update(result)
    os.makedirs(output_dir, exist_ok=True)
    seqio.loggers.JSONLogger(output_dir)(
      task_name=self.mixture_or_task_inst.name,
      step=step,
      metrics={
        k: v if isinstance(v, seqio.metrics.MetricValue) else seqio.metrics.Scalar(v)
        for k, v in metrics.items()
      },
      dataset=None,
      inferences=None,
      targets=None,
    )
    return {
      k: float(v.value if isinstance(v, seqio.metrics.Scalar) else v)
      for k, v in metrics.items()
      if isinstance(v, (int, float, np.number, seqio.metrics.Scalar))
    }


def _row_output(out: Mapping[str, np.ndarray], row: int, score_metrics: bool) -> Any:
  if score_metrics:
    if SCORE_KEY in out:
      return float(out[SCORE_KEY][row])
    return -float(out["per_sequence_xent"][row])  # Summed token log-likelihood of the row.
  # Pax's decoders give [B, N, S] ids (samples or beams, best first) with [B, N] or [B] lengths:
  # the best one's.
  start, end = (int(np.ravel(out[k][row])[0]) for k in ("prefix_lengths", "decode_lengths"))
  ids = np.asarray(out["output_ids"][row])
  return (ids[0] if ids.ndim == 2 else ids)[start:end]


def _num_examples(task: seqio.Task, split: str) -> int | None:
  """The split's example count where SeqIO knows it without reading (TFDS metadata, a cache)."""
  try:
    return int(task.num_input_examples(split)) or None
  except Exception:  # pylint: disable=broad-exception-caught  # Sources raise various errors.
    return None


def _save_iterator(iterator) -> dict[str, str]:
  """A tf.data iterator's checkpoint as {file name: base64 contents} (JSON-serialisable)."""
  with tempfile.TemporaryDirectory() as tmp:
    tf.train.Checkpoint(iterator=iterator).write(os.path.join(tmp, "iterator"))
    files = {}
    for name in sorted(os.listdir(tmp)):
      with open(os.path.join(tmp, name), "rb") as f:
        files[name] = base64.b64encode(f.read()).decode("ascii")
  return files


def _restore_iterator(iterator, files: dict[str, str]) -> None:
  """Moves a fresh iterator of the same pipeline to the position `_save_iterator` recorded."""
  with tempfile.TemporaryDirectory() as tmp:
    for name, data in files.items():
      with open(os.path.join(tmp, os.path.basename(name)), "wb") as f:
        f.write(base64.b64decode(data))
    tf.train.Checkpoint(iterator=iterator).read(os.path.join(tmp, "iterator")).assert_consumed()


def _to_nested_map(tree: Any) -> Any:
  if isinstance(tree, dict):
    return NestedMap({k: _to_nested_map(v) for k, v in tree.items()})
  return tree
