"""quantization.utils against numpy: int4 packing bit layout, einsum -> dot_general, dtypes."""

from absl.testing import absltest
import jax.numpy as jnp
from jax import lax
import numpy as np

from praxis.layers.quantization import utils


def _numpy_pack(x, per_word):
  """Reference: nibble j of each word (along dim 0) is element j of its group."""
  x = np.asarray(x).astype(np.int64) & 0xF  # [N, M]
  groups = x.reshape(x.shape[0] // per_word, per_word, *x.shape[1:])
  shifts = (np.arange(per_word) * 4).reshape(1, per_word, *([1] * (x.ndim - 1)))
  words = (groups << shifts).sum(axis=1)
  bits = 4 * per_word
  return np.where(words >= 2 ** (bits - 1), words - 2**bits, words)  # two's complement


class PackTest(absltest.TestCase):
  def test_pack_matches_numpy_and_round_trips(self):
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 8, size=(16, 3)).astype(np.int8)
    for dtype, per_word in ((jnp.int32, 8), (jnp.int8, 2)):
      packed = utils.pack_4bit(jnp.asarray(x), 0, dtype)
      self.assertEqual(packed.shape, (16 // per_word, 3))
      np.testing.assert_array_equal(np.asarray(packed, np.int64), _numpy_pack(x, per_word))
      np.testing.assert_array_equal(utils.unpack_4bit(packed, 0, jnp.int8), x)

  def test_unsigned_round_trip(self):
    x = np.arange(16, dtype=np.uint8).reshape(8, 2) % 16
    packed = utils.pack_4bit(jnp.asarray(x), 0, jnp.int32)
    np.testing.assert_array_equal(utils.unpack_4bit(packed, 0, jnp.uint8), x)

  def test_misaligned_dim_raises(self):
    with self.assertRaisesRegex(ValueError, "divisible by 8"):
      utils.pack_4bit(jnp.zeros((6, 2), jnp.int8), 0, jnp.int32)


class EinsumToDotGeneralTest(absltest.TestCase):
  def test_matches_einsum(self):
    rng = np.random.default_rng(1)
    for eqn, ls, rs in (
      ("abc,cd->abd", (2, 3, 4), (4, 5)),
      ("bnd,dnh->bhn", (2, 3, 4), (4, 3, 5)),
      ("xy,zy->zx", (2, 3), (4, 3)),
    ):
      lhs, rhs = rng.normal(size=ls), rng.normal(size=rs)
      dims, perm = utils.einsum_eqn_to_dimension_numbers(eqn)
      out = lax.dot_general(lhs, rhs, dims)
      if perm is not None:
        out = lax.transpose(out, perm)
      np.testing.assert_allclose(out, np.einsum(eqn, lhs, rhs), rtol=1e-5, atol=1e-6)


class DtypeTest(absltest.TestCase):
  def test_bits(self):
    self.assertEqual(utils.dtype_to_bits(jnp.int4), 4)
    self.assertEqual(utils.bits_to_dtype(3), jnp.int4)
    self.assertEqual(utils.bits_to_dtype(9, signed=False), jnp.uint16)
    mixed = utils.get_smallest_matching_dtype(jnp.zeros(1, jnp.int8), jnp.zeros(1, jnp.uint8))
    self.assertEqual(mixed, jnp.int16)

  def test_lora_shapes_compose_to_weight_shape(self):
    eqn_l, eqn_r, left, right, _, _ = utils.get_lora_shape_and_eqn([4, 6], 2, "...y,yz->...z")
    x = np.ones((3, 4))
    mid = np.einsum(eqn_l, x, np.ones(left))
    self.assertEqual(np.einsum(eqn_r, mid, np.ones(right)).shape, (3, 6))


if __name__ == "__main__":
  absltest.main()
