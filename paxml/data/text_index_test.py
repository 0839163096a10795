"""RowIndex against the reference: packing.Packer run over the epochs in order."""

from absl.testing import absltest
import numpy as np

from paxml.data import packing
from paxml.data import text_index

_SEQ_LEN = 64


def _docs(n=57, seed=0):
  rng = np.random.default_rng(seed)
  return [rng.integers(4, 50, rng.integers(1, 300)).astype(np.int32) for _ in range(n)]


def _reference(docs, index, mode, epochs):
  """Rows of epochs 0..epochs-1 made the slow way: concat runs one packer over all epochs (its
  stream does not restart), pack and pad pack each epoch alone and flush it."""
  rows = []
  if mode == "concat":
    packer = packing.Packer(_SEQ_LEN, mode, 2, 3)
    for e in range(epochs):
      for d in index.order(e):
        rows.extend(packer.add(docs[d]))
    return rows
  for e in range(epochs):
    rows.extend(packing.pack_all([docs[d] for d in index.order(e)], _SEQ_LEN, mode, 2, 3))
  return rows


class RowIndexTest(absltest.TestCase):
  def test_rows_by_number_equal_the_packer_in_every_mode(self):
    docs = _docs()
    table = text_index.DocTable.from_docs(docs)
    for mode in packing.MODES:
      for shuffle in (False, True):
        with self.subTest(mode=mode, shuffle=shuffle):
          make = lambda: text_index.RowIndex(
            table, _SEQ_LEN, mode, bos_id=2, eos_id=3, seed=5, shuffle=shuffle
          )
          index = make()
          want = _reference(docs, index, mode, epochs=3)
          got = index.rows(0, len(want))
          for r, (a, b) in enumerate(zip(want, got)):
            for key in a:
              np.testing.assert_array_equal(a[key], b[key], err_msg=f"row {r} {key}")
          # Straight to a late row, on a fresh index: the same row.
          late = len(want) - 7
          for key, value in make().rows(late, 1)[0].items():
            np.testing.assert_array_equal(value, want[late][key])

  def test_epochs_visit_every_document_in_a_new_order(self):
    table = text_index.DocTable.from_docs(_docs())
    index = text_index.RowIndex(table, _SEQ_LEN, "pad", bos_id=2, eos_id=3, seed=1, shuffle=True)
    first, second = index.order(0), index.order(1)
    self.assertEqual(sorted(first), list(range(len(table))))
    self.assertEqual(sorted(second), list(range(len(table))))
    self.assertFalse(np.array_equal(first, second))

  def test_pack_position_lets_a_fresh_index_skip_planning_earlier_epochs(self):
    table = text_index.DocTable.from_docs(_docs())
    make = lambda: text_index.RowIndex(
      table, _SEQ_LEN, "pack", bos_id=2, eos_id=3, seed=5, shuffle=True
    )
    walker = make()
    late = 5 * walker.rows_per_epoch(0) + 3  # In epoch 4 or 5.
    want = walker.rows(late, 1)[0]
    epoch, first = walker.pack_position()
    fresh = make()
    fresh.set_pack_position(epoch, first)
    planned = []
    original_plan = fresh._plan
    fresh._plan = lambda e: planned.append(e) or original_plan(e)
    np.testing.assert_array_equal(fresh.rows(late, 1)[0]["ids"], want["ids"])
    self.assertEqual(set(planned), {epoch})


if __name__ == "__main__":
  absltest.main()
