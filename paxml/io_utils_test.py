"""Tests of io_utils: output files, shard validation, progress files, the sharded writer."""

import json
import pickle
import shutil
import tempfile

from absl.testing import absltest
from etils import epath
import jax.numpy as jnp
import numpy as np

from paxml import io_utils


class IoUtilsTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.dir = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.dir)

  def test_outputs_round_trip_through_load_outputs(self):
    out_dir = self.dir / "1" / "decoder_out" / "test"
    out_dir.mkdir(parents=True)
    for shard in range(2):
      pairs = [(f"k{shard}", {"ids": jnp.arange(3) + shard, "text": b"hi", "ok": np.bool_(True)})]
      io_utils.write_key_value_pairs(out_dir / f"decoder_out_7_shard_{shard}", pairs)
    lines = (out_dir / "decoder_out_7_shard_1.jsonl").read_text().splitlines()
    self.assertEqual(json.loads(lines[0]), {"ids": [1, 2, 3], "text": "hi", "ok": True})
    with (out_dir / "decoder_out_7_shard_0.pickle").open("rb") as f:
      self.assertIsInstance(pickle.load(f)[0][1]["ids"], (np.ndarray, type(jnp.zeros(1))))
    loaded = io_utils.load_outputs(self.dir, "test", "decoder")
    self.assertEqual([k for k, _ in loaded], ["k0", "k1"])

  def test_validate_filenames(self):
    names = [f"eval_out_5_shard_{i}.pickle" for i in range(3)]
    self.assertEqual(io_utils._validate_filenames(names), (5, 3))  # pylint: disable=protected-access
    for bad, step in (
      (names + ["eval_out_6_shard_0.pickle"], None),
      (names, 4),
      (names[:1] + names[2:], None),
      (["eval_out_5.pickle"], None),
      ([], None),
    ):
      with self.assertRaises(ValueError):
        io_utils._validate_filenames(bad, step)  # pylint: disable=protected-access

  def test_progress_file_resumes_its_step_until_done(self):
    ckpts = self.dir / "checkpoints"
    (ckpts / "checkpoint_00000009").mkdir(parents=True)
    mode = io_utils.EvaluationMode.DECODE
    with io_utils.checkpoint_progress(self.dir, 3, mode):
      self.assertEqual(io_utils.get_checkpoint_step(self.dir, ckpts, mode), 9)  # 3 is gone.
      (ckpts / "checkpoint_00000003").mkdir()
      self.assertEqual(io_utils.get_checkpoint_step(self.dir, ckpts, mode), 3)
    self.assertEqual(io_utils.get_checkpoint_step(self.dir, ckpts, mode), 9)  # File removed.

  def test_sharded_writer_writes_every_record_once(self):
    writer = io_utils.ShardedParallelWriter(self.dir / "out", 3)
    records = [f"r{i}".encode() for i in range(10)]
    for i in range(0, 10, 2):
      writer.write(records[i : i + 2])
    writer.close()
    files = sorted(self.dir.glob("out.tfrecord-*"))
    self.assertEqual([f.name for f in files][-1], "out.tfrecord-00002-of-00003")
    tf = io_utils._tf()  # pylint: disable=protected-access
    got = [r.numpy() for r in tf.data.TFRecordDataset([str(f) for f in files])]
    self.assertCountEqual(got, records)


if __name__ == "__main__":
  absltest.main()
