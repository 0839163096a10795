"""Tests of DigitsInput against sklearn's arrays."""

from absl.testing import absltest
import numpy as np
from sklearn import datasets

from paxml.data import digits


def _key(image):
  return image.tobytes()


class DigitsTest(absltest.TestCase):
  def test_splits_partition_the_data_and_match_sklearn(self):
    raw = datasets.load_digits()
    by_image = {
      _key((img / 16.0).astype(np.float32)[..., None]): int(t)
      for img, t in zip(raw.images, raw.target)
    }
    seen = []
    for split, n in (("train", 1500), ("eval", 297)):
      inp = digits.DigitsInput(split=split, batch_size=n, repeat=False, shuffle=False)
      batch = inp.get_next()
      self.assertEqual(batch.image.shape, (n, 8, 8, 1))
      self.assertEqual(batch.image.dtype, np.float32)
      self.assertTrue((batch.image >= 0).all() and (batch.image <= 1).all())
      for img, label in zip(batch.image, batch.label):
        self.assertEqual(by_image.get(_key(img)), int(label))  # same label as sklearn's
        seen.append(_key(img))
    # 1,797 images, some of which are exact duplicates in the data set itself.
    self.assertLen(seen, 1797)
    self.assertEqual(set(seen), set(by_image))

  def test_eval_pass_padded_over_hosts(self):
    hosts = [
      digits.DigitsInput(
        split="eval",
        batch_size=32,
        is_training=False,
        reset_for_eval=True,
        num_infeed_hosts=2,
        infeed_host_index=h,
      )
      for h in range(2)
    ]
    batches = [list(h) for h in hosts]
    self.assertEqual([len(b) for b in batches], [5, 5])  # ceil(ceil(297 / 2) / 32)
    self.assertEqual(sum(float(b.weights.sum()) for bs in batches for b in bs), 297)

  def test_training_batches_are_shuffled_and_balanced(self):
    inp = digits.DigitsInput(batch_size=500, input_random_seed=0)
    labels = inp.get_next().label
    self.assertGreater(len(np.unique(labels)), 9)
    self.assertFalse(np.array_equal(labels[:20], np.sort(labels[:20])))

  def test_dev_and_test_halve_eval(self):
    def images(split):
      inp = digits.DigitsInput(
        split=split, batch_size=1, num_eval_examples=301, is_training=False, reset_for_eval=True
      )
      return [_key(b.image[0]) for b in inp]

    dev, test, held_out = images("dev"), images("test"), images("eval")
    self.assertEqual((len(dev), len(test)), (150, 151))  # 301 // 2, and the rest
    # dev is the first half of eval, test the rest (eval and train partition the data: above).
    self.assertEqual(dev + test, held_out)

  def test_bad_split(self):
    with self.assertRaisesRegex(ValueError, "split must be one of 'train', 'eval', 'dev', 'test'"):
      digits.DigitsInput(split="validation")
    with self.assertRaisesRegex(ValueError, r"num_eval_examples must lie in \[2, 1797\)"):
      digits.DigitsInput(split="dev", num_eval_examples=1)


if __name__ == "__main__":
  absltest.main()
