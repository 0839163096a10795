"""Tests of the BaseInput contract through IndexedInput and the synthetic inputs.

The reference for every sharding and padding rule is a plain enumeration of example indices: an
input whose examples carry their own index, so each test can say exactly which examples it expects.
"""

import dataclasses
import itertools
import json

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from praxis import base_input
from paxml.data import indexed_input
from paxml.data import synthetic


@dataclasses.dataclass
class _Numbered(indexed_input.IndexedInput):
  """Example i is {index: i, weights: 1}; num_examples=None makes it endless. (BaseInput needs a
  batch_size; the tests that do not care use 1.)"""

  batch_size: int | None = 1
  num_examples: int | None = 10

  def _num_examples(self):
    return self.num_examples

  def _examples(self, indices):
    return {"index": np.asarray(indices, np.int64), "weights": np.ones(len(indices), np.float32)}


def _hosts(num_hosts, **kwargs):
  return [
    _Numbered(num_infeed_hosts=num_hosts, infeed_host_index=h, **kwargs) for h in range(num_hosts)
  ]


class ConfigTest(absltest.TestCase):
  def test_hparams_config_instantiates_and_rejects_typos(self):
    cfg = synthetic.SyntheticLmData.HParams(batch_size=2, seq_len=8)
    inp = cfg.Instantiate()
    self.assertIsInstance(inp, synthetic.SyntheticLmData)
    self.assertEqual(inp.get_next().ids.shape, (2, 8))  # NestedMap attribute access
    with self.assertRaisesRegex(AttributeError, "seq_lenn"):
      cfg.seq_lenn = 3

  def test_global_batch_size(self):
    inp = _Numbered(batch_size=3, num_infeed_hosts=4)
    self.assertEqual(_Numbered.get_global_batch_size(inp), 12)

  def test_bad_sizes_are_explained(self):
    with self.assertRaisesRegex(base_input.InputConfigError, r"\[0, 2\), got 2"):
      _Numbered(num_infeed_hosts=2, infeed_host_index=2)
    with self.assertRaisesRegex(base_input.InputConfigError, "batch_size must be >= 1"):
      _Numbered(batch_size=0)


class EvalTableTest(parameterized.TestCase):
  @parameterized.parameters(
    (True, False, None, True),
    (True, False, False, False),
    (False, True, None, False),
    (False, False, None, True),
    (False, False, True, True),
    (False, True, False, False),
    (False, False, False, False),
  )
  def test_supported_rows(self, is_training, reset_for_eval, repeat, want_repeat):
    inp = _Numbered(is_training=is_training, reset_for_eval=reset_for_eval, repeat=repeat)
    self.assertEqual(inp.repeat, want_repeat)

  @parameterized.parameters(
    (True, True, None, "reset_for_eval is for eval inputs"),
    (True, True, False, "reset_for_eval is for eval inputs"),
    (False, True, True, "never raises"),
  )
  def test_unsupported_rows_raise(self, is_training, reset_for_eval, repeat, reason):
    with self.assertRaisesRegex(base_input.InputConfigError, reason):
      _Numbered(is_training=is_training, reset_for_eval=reset_for_eval, repeat=repeat)

  def test_endless_source_cannot_be_one_pass(self):
    with self.assertRaisesRegex(base_input.InputConfigError, "never end"):
      _Numbered(num_examples=None, is_training=False, reset_for_eval=True)


class ShardingTest(absltest.TestCase):
  def test_four_hosts_read_disjoint_examples_each_epoch(self):
    n, batch = 50, 3
    hosts = _hosts(4, num_examples=n, batch_size=batch, input_random_seed=5)
    per_host_epoch = n // 4  # 12 examples, 4 batches per host per epoch
    seen = [
      np.concatenate([h.get_next().index for _ in range(3 * per_host_epoch // batch)])
      for h in hosts
    ]  # three epochs each
    for epoch in range(3):
      chunks = [s[epoch * per_host_epoch : (epoch + 1) * per_host_epoch] for s in seen]
      union = np.concatenate(chunks)
      self.assertLen(set(union.tolist()), 4 * per_host_epoch)  # no example on two hosts
      self.assertTrue(set(union.tolist()) <= set(range(n)))
    # Shuffled: epochs differ in order, and a different seed gives a different order.
    self.assertFalse(np.array_equal(seen[0][:12], seen[0][12:24]))
    other_seed = _Numbered(
      num_examples=n, batch_size=batch, num_infeed_hosts=4, input_random_seed=6
    )
    np.testing.assert_equal(np.array_equal(other_seed.get_next().index, seen[0][:batch]), False)

  def test_endless_source_hosts_interleave(self):
    hosts = _hosts(4, num_examples=None, batch_size=2)
    got = [np.concatenate([h.get_next().index for _ in range(5)]) for h in hosts]
    for h, indices in enumerate(got):
      np.testing.assert_array_equal(indices, np.arange(10) * 4 + h)

  def test_random_tokens_differ_across_hosts(self):
    rows = set()
    for h in range(4):
      inp = synthetic.SyntheticRandomLmData(
        batch_size=4,
        seq_len=6,
        vocab_size=1000,
        num_infeed_hosts=4,
        infeed_host_index=h,
        input_random_seed=1,
      )
      for _ in range(3):
        rows.update(tuple(r) for r in inp.get_next().ids.tolist())
    self.assertLen(rows, 4 * 3 * 4)


class EvalTest(absltest.TestCase):
  def test_reset_for_eval_pads_hosts_to_equal_batch_counts(self):
    n, batch = 10, 2
    hosts = _hosts(4, num_examples=n, batch_size=batch, is_training=False, reset_for_eval=True)
    batches = [list(h) for h in hosts]  # list() reads until StopIteration
    # ceil(10 / 4) = 3 examples per host -> ceil(3 / 2) = 2 batches on every host.
    self.assertEqual([len(b) for b in batches], [2, 2, 2, 2])
    real = []
    for host_batches in batches:
      for b in host_batches:
        self.assertEqual(b.index.shape, (batch,))
        real.extend(b.index[b.weights > 0].tolist())
        np.testing.assert_array_equal(b.index[b.weights == 0], 0)
    self.assertEqual(sorted(real), list(range(n)))  # every example exactly once
    # Hosts 0 and 1 get 3 real examples, hosts 2 and 3 get 2: 1 + 1 + 2 + 2 padded rows.
    pads = [sum(int((b.weights == 0).sum()) for b in hb) for hb in batches]
    self.assertEqual(pads, [1, 1, 2, 2])
    self.assertEqual(hosts[0].num_batches_per_epoch(), 2)

  def test_reset_replays_the_same_pass(self):
    inp = _Numbered(num_examples=7, batch_size=3, is_training=False, reset_for_eval=True)
    first = [b.index.tolist() for b in inp]
    self.assertEqual(first, [[0, 1, 2], [3, 4, 5], [6, 0, 0]])
    with self.assertRaises(StopIteration):
      inp.get_next()
    inp.reset()
    self.assertEqual([b.index.tolist() for b in inp], first)

  def test_padding_rows_are_zero_weight_lm_rows(self):
    inp = synthetic.SyntheticLmData(
      batch_size=4, seq_len=3, num_examples=6, is_training=False, reset_for_eval=True
    )
    inp.get_next()
    last = inp.get_next()
    np.testing.assert_array_equal(last.weights, [[1] * 3] * 2 + [[0] * 3] * 2)
    np.testing.assert_array_equal(last.paddings, [[0] * 3] * 2 + [[1] * 3] * 2)

  def test_rolling_eval_continues_and_wraps(self):
    inp = _Numbered(
      num_examples=5, batch_size=2, is_training=False, eval_loop_num_batches=2, shuffle=False
    )
    runs = [
      [inp.get_next().index.tolist() for _ in range(inp.eval_loop_num_batches)] for _ in range(2)
    ]
    # Epochs of 5 examples, batches run across the boundary; the second eval continues.
    self.assertEqual(runs, [[[0, 1], [2, 3]], [[4, 0], [1, 2]]])


class SyntheticTest(absltest.TestCase):
  def test_lm_data_matches_pax(self):
    batch = synthetic.SyntheticLmData(batch_size=3, seq_len=5).get_next()
    want = {
      "ids": np.ones((3, 5), np.int32),
      "labels": np.ones((3, 5), np.int32),
      "segment_ids": np.ones((3, 5), np.int32),
      "paddings": np.zeros((3, 5), np.float32),
      "weights": np.ones((3, 5), np.float32),
      "segment_pos": np.array([[0, 1, 2, 3, 4]] * 3, np.int32),
    }
    self.assertEqual(set(batch), set(want))
    for key, value in want.items():
      self.assertEqual(batch[key].dtype, value.dtype, key)
      np.testing.assert_array_equal(batch[key], value, err_msg=key)

  def test_random_tokens_shift_and_range(self):
    batch = synthetic.SyntheticRandomLmData(batch_size=8, seq_len=16, vocab_size=50).get_next()
    np.testing.assert_array_equal(batch.labels[:, :-1], batch.ids[:, 1:])
    self.assertTrue(((batch.ids >= 0) & (batch.ids < 50)).all())
    self.assertGreater(len(np.unique(batch.ids)), 30)

  def test_unseeded_inputs_differ(self):
    a, b = (synthetic.SyntheticRandomLmData(batch_size=2, seq_len=8) for _ in range(2))
    self.assertNotEqual(a.input_random_seed, b.input_random_seed)
    self.assertFalse(np.array_equal(a.get_next().ids, b.get_next().ids))


class CheckpointTest(absltest.TestCase):
  def test_restore_continues_with_next_unseen_batch(self):
    cfg = synthetic.SyntheticRandomLmData.HParams(batch_size=2, seq_len=4, vocab_size=97)
    original = cfg.Instantiate()  # fresh random seed, as in training
    seen = [original.get_next().ids for _ in range(3)]
    saved = json.loads(json.dumps(original.get_state()))  # what the checkpoint stores
    expected = [original.get_next().ids for _ in range(2)]

    resumed = cfg.Instantiate()
    resumed.set_state(saved)
    got = [resumed.get_next().ids for _ in range(2)]
    for want, have in zip(expected, got):
      np.testing.assert_array_equal(have, want)
    for old, new in itertools.product(seen, got):
      self.assertFalse(np.array_equal(old, new))

  def test_restore_mid_epoch_of_shuffled_finite_set(self):
    a = _Numbered(num_examples=9, batch_size=2)
    for _ in range(5):  # crosses the first epoch boundary (9 examples, batches of 2)
      a.get_next()
    b = _Numbered(num_examples=9, batch_size=2)
    b.set_state(a.get_state())
    for _ in range(6):
      np.testing.assert_array_equal(b.get_next().index, a.get_next().index)


if __name__ == "__main__":
  absltest.main()
