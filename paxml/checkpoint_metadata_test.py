"""Tests of checkpoint_metadata: JSON round trip, masked nodes, equality and compatibility."""

import json
import shutil
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml import checkpoint_metadata
from paxml import train_states

ArrayMetadata = checkpoint_metadata.ArrayMetadata


def _state(b_shape=(5,)):
  return train_states.TrainState(
    step=0,
    mdl_vars={"a": jnp.ones((2, 3)), "b": {"masked": optax.MaskedNode(), "c": jnp.zeros(b_shape)}},
    opt_states=[],
  )


class MetadataTest(absltest.TestCase):
  def test_json_round_trip_records_shapes_and_masks(self):
    meta = checkpoint_metadata.PaxMetadata.from_padded_and_unpadded(_state(), None, version=1.1)
    as_json = json.loads(json.dumps(meta.to_dict()))
    self.assertEqual(as_json["version"], 1.1)
    tree = as_json["train_state_metadata"]["mdl_vars"]
    self.assertTrue(tree["b"]["masked"]["is_optax_masked_node"])
    self.assertNotIn("unpadded_shape", tree["a"])  # No unpadded state given: no shapes.
    made = checkpoint_metadata.make_metadata(1.1, _state())
    self.assertEqual(list(made["train_state_metadata"]["mdl_vars"]["a"]["unpadded_shape"]), [2, 3])
    back = checkpoint_metadata.PaxMetadata.from_dict(json.loads(json.dumps(made)))
    self.assertEqual(
      back.train_state_metadata["mdl_vars"]["b"]["c"].unpadded_shape_dtype_struct,
      jax.ShapeDtypeStruct((5,), np.float32),
    )
    self.assertTrue(back.equals(checkpoint_metadata.PaxMetadata.from_dict(made)))
    self.assertEqual(checkpoint_metadata.make_metadata(1.0), {"version": 1.0})

  def test_equals_and_compatible(self):
    one = checkpoint_metadata.PaxMetadata.from_dict(
      checkpoint_metadata.make_metadata(1.1, _state())
    )
    other_shape = checkpoint_metadata.PaxMetadata.from_dict(
      checkpoint_metadata.make_metadata(1.1, _state(b_shape=(6,)))
    )
    self.assertFalse(one.equals(other_shape))
    self.assertFalse(one.is_compatible(other_shape))
    masked = ArrayMetadata(jax.ShapeDtypeStruct((1,), np.float32), True)
    self.assertTrue(masked.is_compatible(ArrayMetadata(None, True)))
    self.assertFalse(masked.equals(ArrayMetadata(None, True)))

  def test_save_and_restore_json(self):
    directory = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, directory)
    self.assertFalse(checkpoint_metadata.metadata_exists(directory))
    checkpoint_metadata.save_metadata(directory, {"version": 1.1})
    self.assertTrue(checkpoint_metadata.metadata_exists(directory))
    self.assertEqual(checkpoint_metadata.restore_metadata(directory), {"version": 1.1})


if __name__ == "__main__":
  absltest.main()
