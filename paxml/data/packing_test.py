"""Tests of concat / pack / pad against hand-worked rows and a reconstruction invariant."""

from absl.testing import absltest
import numpy as np

from paxml.data import packing

BOS, EOS = 2, 3


def _rows(docs, seq_len, mode, max_open_rows=8):
  return list(packing.pack_all([np.array(d) for d in docs], seq_len, mode, BOS, EOS, max_open_rows))


class PackingTest(absltest.TestCase):
  def test_pack_by_hand(self):
    # Examples: [2,5,6]->[5,6,3] (3 tokens), [2,7,8,9]->[7,8,9,3] (4), [2,10]->[10,3] (2).
    # First fit: row 1 takes ex 1, ex 2 does not fit (room 3) and opens row 2, ex 3 fits row 1.
    r1, r2 = _rows([[5, 6], [7, 8, 9], [10]], seq_len=6, mode="pack")
    np.testing.assert_array_equal(r1["ids"], [2, 5, 6, 2, 10, 0])
    np.testing.assert_array_equal(r1["labels"], [5, 6, 3, 10, 3, 0])
    np.testing.assert_array_equal(r1["segment_ids"], [1, 1, 1, 2, 2, 0])
    np.testing.assert_array_equal(r1["segment_pos"], [0, 1, 2, 0, 1, 0])
    np.testing.assert_array_equal(r1["weights"], [1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(r1["paddings"], [0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(r2["ids"], [2, 7, 8, 9, 0, 0])
    np.testing.assert_array_equal(r2["segment_ids"], [1, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(r2["segment_pos"], [0, 1, 2, 3, 0, 0])

  def test_concat_by_hand(self):
    rows = _rows([[5, 6], [7, 8, 9], [10]], seq_len=4, mode="concat")
    np.testing.assert_array_equal(
      [r["ids"] for r in rows], [[2, 5, 6, 2], [7, 8, 9, 2], [10, 0, 0, 0]]
    )
    np.testing.assert_array_equal(
      [r["labels"] for r in rows], [[5, 6, 3, 7], [8, 9, 3, 10], [3, 0, 0, 0]]
    )
    np.testing.assert_array_equal(rows[0]["segment_ids"], [1, 1, 1, 1])
    np.testing.assert_array_equal(rows[1]["segment_pos"], [0, 1, 2, 3])
    np.testing.assert_array_equal(rows[2]["weights"], [1, 0, 0, 0])

  def test_pad_truncates_long_documents(self):
    rows = _rows([[5, 6, 7, 8, 9, 10], [11]], seq_len=4, mode="pad")
    np.testing.assert_array_equal([r["ids"] for r in rows], [[2, 5, 6, 7], [2, 11, 0, 0]])
    np.testing.assert_array_equal(rows[1]["labels"], [11, 3, 0, 0])

  def test_packed_segments_reconstruct_every_document(self):
    rng = np.random.default_rng(0)
    docs = [rng.integers(4, 100, rng.integers(0, 40)) for _ in range(200)]
    seq_len = 16
    rows = _rows(docs, seq_len, "pack", max_open_rows=4)
    pieces = []
    for row in rows:
      seg = row["segment_ids"]
      # Segments are 1..k in order, then only padding.
      k = seg.max()
      used = int(row["weights"].sum())
      np.testing.assert_array_equal(
        seg[:used], np.repeat(np.arange(1, k + 1), np.bincount(seg[:used])[1:])
      )
      np.testing.assert_array_equal(seg[used:], 0)
      for s in range(1, k + 1):
        mask = seg == s
        np.testing.assert_array_equal(row["segment_pos"][mask], np.arange(mask.sum()))
        pieces.append((row["ids"][mask], row["labels"][mask]))
    # Every document's example appears as consecutive pieces of <= seq_len, in order.
    want = []
    for doc in docs:
      tokens = np.concatenate([[BOS], doc, [EOS]])
      for start in range(0, len(tokens) - 1, seq_len):
        want.append((tokens[:-1][start : start + seq_len], tokens[1:][start : start + seq_len]))
    key = lambda p: (tuple(p[0]), tuple(p[1]))
    self.assertEqual(sorted(map(key, pieces)), sorted(map(key, want)))
    # First fit packs densely: well under one row per document.
    total = sum(len(d) + 1 for d in docs)
    self.assertLess(len(rows), 1.15 * -(-total // seq_len) + 4)

  def test_bad_mode(self):
    with self.assertRaisesRegex(ValueError, "one of .*concat.*got 'zip'"):
      packing.Packer(8, "zip")


if __name__ == "__main__":
  absltest.main()
