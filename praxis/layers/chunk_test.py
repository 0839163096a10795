"""chunk / unchunk: shapes, the values each chunk holds (numpy slicing), and the round trip."""

from absl.testing import absltest
import numpy as np

from praxis.layers import chunk


class ChunkTest(absltest.TestCase):
  def test_chunks_hold_consecutive_slices_and_zero_padding(self):
    x = np.arange(2 * 7 * 3, dtype=np.float32).reshape(2, 7, 3)
    c = np.asarray(chunk.chunk(x, chunk_size=3, axis=1))
    self.assertEqual(c.shape, (3, 2, 3, 3))  # [L/C, B, C, D]
    np.testing.assert_array_equal(c[1], x[:, 3:6])
    np.testing.assert_array_equal(c[2, :, 0], x[:, 6])
    np.testing.assert_array_equal(c[2, :, 1:], 0.0)  # the padded tail

  def test_round_trip_on_any_axis(self):
    x = np.random.default_rng(0).normal(size=(3, 4, 5))
    for axis in range(3):
      c = chunk.chunk(x, chunk_size=2, axis=axis)
      np.testing.assert_allclose(chunk.unchunk(c, axis=axis, seqlen=x.shape[axis]), x)


if __name__ == "__main__":
  absltest.main()
