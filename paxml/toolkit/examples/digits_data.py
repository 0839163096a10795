"""The 8x8 digits data set shipped with scikit-learn (no download), split 3 ways.

1797 images of 64 pixels scaled to [0, 1]; a fixed permutation gives
train (1297), dev (250) and test (250).
"""

from collections.abc import Iterator

import numpy as np
from sklearn import datasets

SPLIT_SIZES = {"dev": 250, "test": 250}


def load_splits() -> dict[str, dict[str, np.ndarray]]:
  """Returns {split: {"image": [N, 64] float32, "label": [N] int32}}."""
  digits = datasets.load_digits()
  order = np.random.default_rng(0).permutation(len(digits.target))
  images = (digits.data[order] / 16.0).astype(np.float32)  # [N, 64]
  labels = digits.target[order].astype(np.int32)           # [N]
  dev_end = SPLIT_SIZES["dev"]
  test_end = dev_end + SPLIT_SIZES["test"]
  cut = {"dev": slice(0, dev_end), "test": slice(dev_end, test_end),
         "train": slice(test_end, None)}
  return {name: {"image": images[s], "label": labels[s]} for name, s in cut.items()}


def train_batches(split: dict[str, np.ndarray], batch_size: int, seed: int
                  ) -> Iterator[dict[str, np.ndarray]]:
  """Endless shuffled batches; a new permutation each epoch."""
  rng = np.random.default_rng(seed)
  n = len(split["label"])
  while True:
    order = rng.permutation(n)
    for start in range(0, n - batch_size + 1, batch_size):
      idx = order[start:start + batch_size]
      yield {k: v[idx] for k, v in split.items()}


def eval_batches(split: dict[str, np.ndarray], batch_size: int
                 ) -> Iterator[dict[str, np.ndarray]]:
  """One pass in order; the last batch may be smaller."""
  n = len(split["label"])
  for start in range(0, n, batch_size):
    yield {k: v[start:start + batch_size] for k, v in split.items()}
