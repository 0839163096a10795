"""Tests of checkpoint manifests: what they detect and that array sums ignore the sharding."""

import os

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from paxml import checkpoint_integrity as integrity


def _sums(tree):
  return integrity.finish_array_checksums(integrity.start_array_checksums(tree))


class ArrayChecksumTest(absltest.TestCase):
  def test_sums_are_per_path_and_catch_one_flipped_bit_and_swaps(self):
    x = np.arange(64, dtype=np.float32)
    base = _sums({"a": x, "b": {"c": jnp.ones((2, 3), jnp.bfloat16)}})
    self.assertEqual(sorted(base), ["a", "b/c"])
    self.assertEqual(base["b/c"]["dtype"], "bfloat16")
    flipped = x.view(np.uint32).copy()
    flipped[7] ^= 1
    self.assertNotEqual(_sums({"a": flipped.view(np.float32)})["a"]["sum"], base["a"]["sum"])
    swapped = x.copy()
    swapped[[3, 4]] = swapped[[4, 3]]
    self.assertNotEqual(_sums({"a": swapped})["a"]["sum"], base["a"]["sum"])

  def test_sums_do_not_depend_on_the_sharding(self):
    x = jnp.arange(4 * 6, dtype=jnp.float32).reshape(4, 6)
    mesh = jax.make_mesh((len(jax.devices()),), ("d",))
    sharded = jax.device_put(x, jax.NamedSharding(mesh, jax.P("d")))
    self.assertEqual(_sums({"x": x}), _sums({"x": sharded}))

  def test_all_dtypes_are_covered(self):
    tree = {
      "b": np.array([True, False]),
      "i8": np.int8([1, -1]),
      "i32": np.int32([5]),
      "u16": np.uint16([7]),
    }
    self.assertLen(_sums(tree), 4)


class FileChecksumTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.step_dir = self.create_tempdir().full_path
    os.makedirs(os.path.join(self.step_dir, "state"))
    for name, data in (
      ("state/data", b"x" * 1000),
      ("state/_METADATA", b"{}"),
      ("train_input/position", b'{"pos": 6}'),
    ):
      os.makedirs(os.path.dirname(os.path.join(self.step_dir, name)), exist_ok=True)
      with open(os.path.join(self.step_dir, name), "wb") as f:
        f.write(data)
    self.assertEqual(integrity.write_manifest(self.step_dir, 3, {}), 1012)

  def test_an_untouched_step_verifies(self):
    manifest = integrity.verify_files(self.step_dir, 3)
    self.assertEqual(
      sorted(manifest["files"]), ["state/_METADATA", "state/data", "train_input/position"]
    )

  def test_each_kind_of_damage_is_named(self):
    path = lambda: os.path.join(self.step_dir, "state", "data")
    cases = [
      (lambda: open(path(), "r+b").write(b"y"), "state/data does not match"),
      (lambda: os.truncate(path(), 10), "state/data has 10 bytes, 1000 written"),
      (lambda: os.remove(path()), "state/data is missing"),
      (
        lambda: open(os.path.join(self.step_dir, integrity.MANIFEST), "w").write("{"),
        "unreadable checksums.json",
      ),
    ]
    for damage, message in cases:
      with self.subTest(message):
        self.setUp()
        damage()
        with self.assertRaisesRegex(
          integrity.CorruptCheckpointError, "checkpoint step 3 is corrupt: " + message
        ):
          integrity.verify_files(self.step_dir, 3)

  def test_a_missing_manifest_is_an_unfinished_save_not_damage(self):
    os.remove(os.path.join(self.step_dir, integrity.MANIFEST))
    with self.assertRaisesRegex(
      integrity.UnfinishedCheckpointError, "checkpoint step 3 is unfinished: no checksums.json"
    ):
      integrity.verify_files(self.step_dir, 3)

  def test_only_checks_one_item(self):
    os.remove(os.path.join(self.step_dir, "state", "data"))
    integrity.verify_files(self.step_dir, 3, only="train_input")


if __name__ == "__main__":
  absltest.main()
