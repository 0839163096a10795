"""Speech-recognition data tools (bobbin's `example_lib.asrio`).

Word-piece vocabularies and the greedy word-piece encoder, framing and the
mel filterbank matrix for log-mel features, edit distances for token, word
and character error rates, feature normalization and helpers that turn
padded batches back into lists (CTC blank removal included).

Padding convention (as in bobbin and Pax): `paddings[b, t] > 0.5` marks
element `t` of row `b` as padding.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
import dataclasses
from typing import Any

from etils import epath
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

Array = Any  # A numpy or JAX array.

# HTK's mel scale: mel = 1127 * ln(1 + hz / 700) (as tf.signal).
_MEL_BREAK_HZ = 700.0
_MEL_HIGH_FREQUENCY_Q = 1127.0


@dataclasses.dataclass
class WpmVocab:
  """A word-piece vocabulary: ids are line numbers of the vocabulary file."""

  str2id: dict[str, int]
  id2str: dict[int, str]

  @classmethod
  def load(cls, path: Any, *, size_limit: int | None = None) -> WpmVocab:
    """Reads the first token of each line of `path` (any epath, gs:// too).

    Args:
      path: the vocabulary file, one piece per line (extra columns, such as
        sentencepiece scores, are ignored).
      size_limit: keep only the first this many pieces.
    """
    str2id: dict[str, int] = {}
    for line in epath.Path(path).read_text().splitlines():
      if size_limit is not None and len(str2id) >= size_limit:
        break
      fields = line.split(maxsplit=1)
      if not fields:
        continue
      str2id[fields[0]] = len(str2id)
    return cls(str2id=str2id, id2str={i: s for s, i in str2id.items()})

  @property
  def no_token(self) -> int:
    """An id outside the vocabulary: "these two pieces do not merge"."""
    return len(self.str2id)

  def __len__(self) -> int:
    return len(self.id2str)


def wpm_encode(
  vocab: WpmVocab, w: str, unk_symbol: str = "<unk>", bow_symbol: str = "▁"
) -> list[int]:
  """Encodes one word into piece ids by greedy pairwise merging.

  The word starts as `bow_symbol` followed by its characters (unknown ones
  become `unk_symbol`). While two neighbours concatenate to a vocabulary
  piece, the pair whose merged piece has the smallest id (the most frequent
  piece, in vocabulary order) is merged; ties go to the leftmost pair.
  """
  unk_id = vocab.str2id.get(unk_symbol, vocab.no_token)
  ids = [vocab.str2id.get(ch, unk_id) for ch in [bow_symbol, *w]]

  def merged(left: int, right: int) -> int:
    piece = vocab.id2str.get(left, "") + vocab.id2str.get(right, "")
    return vocab.str2id.get(piece, vocab.no_token) if piece else vocab.no_token

  while len(ids) > 1:
    candidates = [merged(a, b) for a, b in zip(ids[:-1], ids[1:])]
    best = min(range(len(candidates)), key=candidates.__getitem__)
    if candidates[best] == vocab.no_token:
      break
    ids[best : best + 2] = [candidates[best]]
  return ids


def wpm_encode_sentence(vocab: WpmVocab, s: str | bytes | np.ndarray) -> list[int]:
  """Lower-cases `s`, splits it at spaces and encodes every word."""
  if isinstance(s, np.ndarray):
    s = s.tolist()
  if isinstance(s, bytes):
    s = s.decode("utf-8")
  return [i for word in s.lower().split(" ") for i in wpm_encode(vocab, word)]


def wpm_decode_sentence(
  wpm_vocab: WpmVocab,
  ids: Iterable[int],
  unk_text: str = "█",
  word_boundary_text: str = "▁",
) -> str:
  """Joins the pieces of `ids`; word-boundary marks become spaces."""
  text = "".join(wpm_vocab.id2str.get(int(i), unk_text) for i in ids)
  return text.replace(word_boundary_text, " ").strip()


def _pad_end_length(num_timesteps: int, frame_step: int, frame_size: int) -> int:
  """Samples to append so every frame that starts inside the signal is whole."""
  num_frames = -(-num_timesteps // frame_step)  # ceil
  return frame_step * (num_frames - 1) + frame_size - num_timesteps


def frame(
  x: Array,
  frame_length: int,
  frame_step: int,
  pad_end: bool = False,
  pad_value: int | float = 0.0,
) -> jax.Array:
  """Cuts the last axis into frames: `(*batch, T)` -> `(*batch, N, frame_length)`.

  Frame `n` is `x[..., n * frame_step : n * frame_step + frame_length]`.
  Without `pad_end` only whole frames are returned; with it the signal is
  padded with `pad_value` so that every start inside the signal gives a
  frame (as `tf.signal.frame(..., pad_end=True)`). The dtype is kept.
  """
  x = jnp.asarray(x)
  num_timesteps = x.shape[-1]
  if pad_end:
    extra = max(0, _pad_end_length(num_timesteps, frame_step, frame_length))
    pads = [(0, 0)] * (x.ndim - 1) + [(0, extra)]
    x = jnp.pad(x, pads, constant_values=jnp.asarray(pad_value, x.dtype))
    num_timesteps += extra
  num_frames = max(0, (num_timesteps - frame_length) // frame_step + 1)
  # Static gather indices: [num_frames, frame_length].
  index = np.arange(num_frames)[:, np.newaxis] * frame_step + np.arange(frame_length)[np.newaxis, :]
  return x[..., index]


def _hertz_to_mel(hz: Any) -> Any:
  return _MEL_HIGH_FREQUENCY_Q * np.log1p(np.asarray(hz) / _MEL_BREAK_HZ)


def linear_to_mel_weight_matrix(
  num_mel_bins: int = 20,
  num_spectrogram_bins: int = 129,
  sample_rate: int | float = 8000,
  lower_edge_hertz: int | float = 125.0,
  upper_edge_hertz: int | float = 3800.0,
  dtype: Any = np.float32,
) -> np.ndarray:
  """`tf.signal.linear_to_mel_weight_matrix` in numpy: `[spectrogram_bins, mel_bins]`.

  Triangular filters, equally spaced on the HTK mel scale between the two
  edges; the DC bin gets no weight. A numpy constant: it depends only on
  shapes, so it is folded into the compiled program.

  Raises:
    ValueError: for non-positive sizes or rate, or edges that are negative,
      out of order, or above the Nyquist frequency.
  """
  if num_mel_bins <= 0:
    raise ValueError(f"num_mel_bins must be positive, got {num_mel_bins}.")
  if num_spectrogram_bins <= 0:
    raise ValueError(f"num_spectrogram_bins must be positive, got {num_spectrogram_bins}.")
  if sample_rate <= 0.0:
    raise ValueError(f"sample_rate must be positive, got {sample_rate}.")
  if lower_edge_hertz < 0.0:
    raise ValueError(f"lower_edge_hertz must be non-negative, got {lower_edge_hertz}.")
  if lower_edge_hertz >= upper_edge_hertz:
    raise ValueError(
      f"lower_edge_hertz {lower_edge_hertz} must be below upper_edge_hertz {upper_edge_hertz}."
    )
  if upper_edge_hertz > sample_rate / 2:
    raise ValueError(
      f"upper_edge_hertz {upper_edge_hertz} is above the Nyquist frequency "
      f"{sample_rate / 2} of sample_rate {sample_rate}; lower it."
    )
  bin_hz = np.linspace(0.0, sample_rate / 2.0, num_spectrogram_bins, dtype=dtype)
  bin_mel = _hertz_to_mel(bin_hz[1:])[:, np.newaxis]  # Without the DC bin.
  edges = np.linspace(
    _hertz_to_mel(lower_edge_hertz), _hertz_to_mel(upper_edge_hertz), num_mel_bins + 2, dtype=dtype
  )
  left, center, right = edges[:-2], edges[1:-1], edges[2:]
  rising = (bin_mel - left) / (center - left)
  falling = (right - bin_mel) / (right - center)
  weights = np.maximum(0.0, np.minimum(rising, falling)).astype(dtype)
  return np.concatenate([np.zeros((1, num_mel_bins), dtype), weights], axis=0)


def next_pow_of_two(x: int | float) -> int:
  """The smallest power of two that is >= x."""
  return int(2 ** np.ceil(np.log2(x)))


def compute_edit_distance(hyp: Sequence[Any], ref: Sequence[Any]) -> tuple[int, int, int]:
  """Counts the edits of a minimum (Levenshtein) alignment of `hyp` to `ref`.

  Returns:
    `(substitutions, deletions, insertions)`: deletions are reference
    elements missing from the hypothesis, insertions are extra hypothesis
    elements. Among alignments with the fewest edits, the one with the most
    substitutions is chosen (so "ab" vs "cd" is 2 substitutions, not 2
    deletions and 2 insertions).
  """
  hyp, ref = list(hyp), list(ref)
  # cost[j] = (edits, -subs, subs, dels, inss) of aligning hyp[:i] to ref[:j].
  row = [(j, 0, 0, j, 0) for j in range(len(ref) + 1)]
  for i in range(1, len(hyp) + 1):
    new_row = [(i, 0, 0, 0, i)]
    for j in range(1, len(ref) + 1):
      e, ns, s, d, n = row[j - 1]
      if hyp[i - 1] == ref[j - 1]:
        diag = (e, ns, s, d, n)
      else:
        diag = (e + 1, ns - 1, s + 1, d, n)
      e, ns, s, d, n = new_row[j - 1]
      delete = (e + 1, ns, s, d + 1, n)
      e, ns, s, d, n = row[j]
      insert = (e + 1, ns, s, d, n + 1)
      new_row.append(min(diag, delete, insert))
    row = new_row
  _, _, subs, dels, inss = row[-1]
  return subs, dels, inss


class SequenceError(flax.struct.PyTreeNode):
  """Accumulated edit counts: reference length, substitutions, deletions, insertions."""

  refs: int = 0
  subs: int = 0
  dels: int = 0
  inss: int = 0

  @property
  def error_rate(self) -> float:
    """(subs + dels + inss) / refs: WER over words, CER over characters."""
    return (self.subs + self.dels + self.inss) / self.refs

  @property
  def hyps(self) -> int:
    """The total hypothesis length."""
    return self.refs + self.inss - self.dels

  def accumulate(self, hyp: Sequence[Any], ref: Sequence[Any]) -> SequenceError:
    """Returns these counts plus the edits between `hyp` and `ref`."""
    s, d, i = compute_edit_distance(hyp, ref)
    return type(self)(
      refs=self.refs + len(ref), subs=self.subs + s, dels=self.dels + d, inss=self.inss + i
    )


class MeanVarNormalizer(flax.struct.PyTreeNode):
  """Per-feature mean and standard deviation of input features.

  Attributes:
    mean: `[feature_dims]` means.
    stddev: `[feature_dims]` standard deviations.
    n: the number of frames the statistics came from (to update them), or None.
  """

  mean: Array
  stddev: Array
  n: Array | None

  def apply(self, features: Array) -> Array:
    """(features - mean) / stddev over the last axis."""
    shape = (1,) * (features.ndim - 1) + (-1,)
    return (features - self.mean.reshape(shape)) / self.stddev.reshape(shape)

  @classmethod
  def empty(cls) -> MeanVarNormalizer:
    """A placeholder with the right structure, e.g. for `parse_pytree_json`."""
    return cls(mean=np.zeros(1), stddev=np.zeros(1), n=0)


def make_list_from_padded_batch(data: Array, paddings: Array) -> list[list[Any]]:
  """`(batch, max_length, ...)` data -> one list per row without its padding."""
  data = np.asarray(data).tolist()
  paddings = np.asarray(paddings).tolist()
  return [[v for v, p in zip(row, pads) if p < 0.5] for row, pads in zip(data, paddings)]


def remove_ctc_blanks_and_repeats(
  token_ids: Array,
  token_paddings: Array,
  *,
  blank_id: int = 0,
  use_jnp: bool = False,
) -> list[list[int]]:
  """CTC's collapse rule: merge repeated ids, then drop blanks; one list per row.

  Args:
    token_ids: `(batch, max_length)` frame-wise ids (e.g. the argmax).
    token_paddings: padding indicators of `token_ids`.
    blank_id: the CTC blank.
    use_jnp: compute the mask with jax.numpy (on device) instead of numpy.
  """
  xp = jnp if use_jnp else np
  token_ids = xp.asarray(token_ids)
  repeats = xp.concatenate(
    [xp.zeros_like(token_ids[:, :1], dtype=bool), token_ids[:, 1:] == token_ids[:, :-1]], axis=1
  )
  drop = xp.logical_or(repeats, token_ids == blank_id)
  return make_list_from_padded_batch(token_ids, xp.where(drop, 1.0, token_paddings))
