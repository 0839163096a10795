"""eval_lib's decode programs: sampled decoding gets a seeded "random" stream."""

import json
import os

from absl.testing import absltest
import jax
import numpy as np

from paxml import eval_lib
from paxml import partitioning
from paxml import synthetic_input
from paxml.testing import tiny_lm
from praxis import pytypes
from praxis.layers import sample_decode

_SEQ = 12


def _sampling_model():
  model = tiny_lm.tiny_language_model(model_dims=16, hidden_dims=32, decode_seqlen=_SEQ)
  # Temperature > 0: LanguageModel.decode samples and needs the "random" rng.
  return model.clone(
    decoder_tpl=sample_decode.DecoderHParams(seqlen=_SEQ, temperature=1.0, eos_id=None)
  )


class DecodeProgramsTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.model = _sampling_model()
    batch = pytypes.NestedMap(self._prompts().get_next())
    self.params = self.model.init(jax.random.PRNGKey(0), batch)["params"]
    self.job_log_dir = self.create_tempdir().full_path

  def _prompts(self):
    return synthetic_input.SyntheticLmInput(
      batch_size=8,
      seq_len=2,
      vocab_size=16,
      max_stride=2,
      seed=3,
      is_training=False,
      name="prompts",
    )

  def _decode(self, step: int, seed: int = 1234) -> list[list[int]]:
    """Decodes the same prompts (a fresh input each time) at checkpoint `step`."""
    partitioner = partitioning.Partitioner(partitioning.create_mesh((1, 1, 1)))
    programs = eval_lib.Programs(
      self.model,
      partitioner,
      partitioner.replicated(),
      self.job_log_dir,
      eval_inputs=[],
      decode_inputs=[("prompts", self._prompts())],
      random_seed=seed,
    )
    with programs:
      programs.decode(self.params, step, write_summaries=False)
    path = os.path.join(self.job_log_dir, "decoder_out", "prompts", f"decoder_out_{step:08d}.jsonl")
    with open(path) as f:
      return [json.loads(line)["output_ids"] for line in f]

  def test_sampled_decode_is_seeded_by_step(self):
    first = self._decode(step=3)
    self.assertLen(first, 8)
    self.assertEqual(first, self._decode(step=3))  # The same checkpoint decodes the same.
    self.assertNotEqual(first, self._decode(step=4))  # Another checkpoint draws anew.
    self.assertNotEqual(first, self._decode(step=3, seed=99))
    # Sampled, not greedy: an untrained model's samples spread over the vocabulary.
    generated = np.array(first)[:, 0, 2:]  # Rows are Pax's [num_samples, T].
    self.assertGreater(len(np.unique(generated)), 4)


if __name__ == "__main__":
  absltest.main()
