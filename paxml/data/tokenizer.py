"""SentencePiece tokenizer: train one offline, then encode and decode with it.

The ids are fixed so that every model of this repo agrees on them: pad 0, unk 1, bos 2, eos 3
(padding is id 0, as Pax's LM inputs assume). Training uses the identity normaliser and byte
fallback, so `decode(encode(text)) == text` for any Unicode text: nothing is lowercased, no
whitespace collapsed, and a character outside the vocabulary becomes its UTF-8 bytes instead of
`<unk>`.
"""

from __future__ import annotations

import io
import os
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class Tokenizer:
  """A loaded SentencePiece model.

  Attributes:
    path: the .model file it was loaded from.
    vocab_size: number of ids; every id lies in [0, vocab_size).
  """

  def __init__(self, path: str):
    path = os.fspath(path)
    if not os.path.isfile(path):
      raise FileNotFoundError(
        f"SentencePiece model {path!r} does not exist. Make one from a corpus with "
        "`bazel run //paxml/data:prepare -- --output_dir=DIR` (it writes DIR/spm.model), "
        "or point tokenizer_path at an existing .model file."
      )
    self.path = path
    self._sp = spm.SentencePieceProcessor()
    try:
      self._sp.Load(path)
    except (OSError, RuntimeError) as e:
      raise ValueError(f"{path!r} is not a SentencePiece model ({e}).") from e
    self.vocab_size = int(self._sp.GetPieceSize())
    for name, want, got in (
      ("pad", PAD_ID, self._sp.pad_id()),
      ("bos", BOS_ID, self._sp.bos_id()),
      ("eos", EOS_ID, self._sp.eos_id()),
    ):
      if got != want:
        raise ValueError(
          f"{path!r} has {name}_id={got}, expected {want}: this repo's inputs assume pad 0, "
          "unk 1, bos 2, eos 3. Train the model with paxml.data.tokenizer.train."
        )

  @property
  def pad_id(self) -> int:
    return PAD_ID

  @property
  def bos_id(self) -> int:
    return BOS_ID

  @property
  def eos_id(self) -> int:
    return EOS_ID

  def encode(self, texts: Sequence[str], num_threads: int = 1) -> list[np.ndarray]:
    """Token ids of each text (no BOS/EOS), as int32 arrays."""
    ids = self._sp.Encode(list(texts), out_type=int, num_threads=num_threads)
    return [np.asarray(x, np.int32) for x in ids]

  def decode(self, ids: Iterable[int]) -> str:
    """Text of a sequence of ids; pad, bos and eos are dropped."""
    return self._sp.Decode([int(i) for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

  def ids_to_strings(self, ids: np.ndarray, lengths: Sequence[int] | np.ndarray) -> list[str]:
    """Decodes the first lengths[i] ids of each row of ids [B, T]."""
    return [self.decode(row[: int(n)]) for row, n in zip(np.asarray(ids), lengths)]

  def id_to_piece(self, token_id: int) -> str:
    return self._sp.IdToPiece(int(token_id))


def train(
  texts: Iterable[str],
  model_path: str,
  vocab_size: int,
  model_type: str = "unigram",
  input_sentence_size: int = 200_000,
  seed_sentencepiece_size: int = 200_000,
) -> Tokenizer:
  """Trains a SentencePiece model on `texts` (offline) and writes it to `model_path`.

  Args:
    texts: training sentences or paragraphs; SentencePiece samples up to `input_sentence_size`.
    model_path: where the .model file goes (its directory must exist).
    vocab_size: size of the vocabulary, special ids and the 256 byte-fallback pieces included
      (so at least ~300).
    model_type: "unigram" or "bpe".
    input_sentence_size: how many of `texts` the trainer samples (0: all).
    seed_sentencepiece_size: candidate pieces the unigram trainer starts from.
  """
  model = io.BytesIO()
  spm.SentencePieceTrainer.Train(
    sentence_iterator=iter(texts),
    model_writer=model,
    vocab_size=vocab_size,
    model_type=model_type,
    pad_id=PAD_ID,
    unk_id=UNK_ID,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    # Exact round trips: no NFKC, keep every space, bytes for unknown characters.
    normalization_rule_name="identity",
    remove_extra_whitespaces=False,
    byte_fallback=True,
    input_sentence_size=input_sentence_size,
    shuffle_input_sentence=True,
    seed_sentencepiece_size=seed_sentencepiece_size,
    # Long paragraphs are fine: the trainer would otherwise skip lines over 4192 bytes.
    max_sentence_length=1 << 16,
    minloglevel=2,
  )
  with open(model_path, "wb") as f:
    f.write(model.getvalue())
  return Tokenizer(model_path)
