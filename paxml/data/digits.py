"""`DigitsInput`: scikit-learn's 8x8 handwritten digits as a classification input.

The data ship inside scikit-learn (`sklearn.datasets.load_digits`: 1,797 images of 8x8 pixels,
values 0..16, classes 0..9), so it works offline; MNIST cannot be downloaded here. A fixed,
seeded split holds out `num_eval_examples` images for eval (stratified by nothing: a seeded
permutation of all images, the same on every host and run). The held-out images divide further
into "dev" (the first half, rounded down) and "test" (the rest), for loops that tune on one set
(keep-best) and report on another; "eval" is their union.

Batches: image [B, 8, 8, 1] float32 scaled to [0, 1], label [B] int32, weights [B] float32
(0 on padding rows of a padded eval pass).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from paxml.data import indexed_input

_SPLIT_SEED = 20_240_611  # fixes the train/eval split; not the shuffling seed
_SPLITS = ("train", "eval", "dev", "test")


@functools.cache
def _load() -> tuple[np.ndarray, np.ndarray]:
  from sklearn import datasets  # pylint: disable=import-outside-toplevel  (slow import, used once)

  digits = datasets.load_digits()
  images = (digits.images / 16.0).astype(np.float32)[..., None]  # [N, 8, 8, 1]
  return images, digits.target.astype(np.int32)


@dataclasses.dataclass
class DigitsInput(indexed_input.IndexedInput):
  """Train or eval split of the digits.

  Attributes:
    split: "train", "eval", or one of its halves "dev" and "test".
    num_eval_examples: images held out for eval (the rest are train).
  """

  split: str = "train"
  num_eval_examples: int = 297

  def __post_init__(self):
    if self.split not in _SPLITS:
      raise ValueError(
        f"{self.name}: split must be one of {', '.join(map(repr, _SPLITS))}, got {self.split!r}."
      )
    images, labels = _load()
    # dev and test must each get at least one image.
    if not 2 <= self.num_eval_examples < len(labels):
      raise ValueError(
        f"{self.name}: num_eval_examples must lie in [2, {len(labels)}), got "
        f"{self.num_eval_examples}."
      )
    order = np.random.default_rng(_SPLIT_SEED).permutation(len(labels))
    held_out, num_dev = self.num_eval_examples, self.num_eval_examples // 2
    rows = order[
      {
        "train": slice(held_out, None),
        "eval": slice(0, held_out),
        "dev": slice(0, num_dev),
        "test": slice(num_dev, held_out),
      }[self.split]
    ]
    self._images, self._labels = images[rows], labels[rows]
    super().__post_init__()

  def _num_examples(self) -> int:
    return len(self._labels)

  def _examples(self, indices: np.ndarray) -> dict[str, np.ndarray]:
    return {
      "image": self._images[indices],  # [B, 8, 8, 1]
      "label": self._labels[indices],  # [B]
      "weights": np.ones(len(indices), np.float32),
    }
