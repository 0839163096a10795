"""A tiny DemoLm trains; quantize_checkpoint writes its int8 weights; the int8 model's held-out
log-perplexity is the float one's within 2 %, from a checkpoint that stores int8 arrays."""

import os

from absl.testing import absltest
import numpy as np

from paxml import checkpoints
from paxml import eval_lib
from paxml import train_state_names
from paxml import trainer
from paxml.tasks.lm.params import demo
from paxml.testing import kjv_file
from paxml.tools import quantize_checkpoint
from praxis.layers.quantization import quantization_hparams as qh
from praxis.layers.quantization import quantize


def _tiny(corpus, data_dir):
  class Tiny(demo.DemoLm):
    CORPUS_PATH = corpus
    DATA_DIR = data_dir
    VOCAB_SIZE = 300
    SEQ_LEN = 16
    BATCH_SIZE = 8
    MODEL_DIMS = 32
    HIDDEN_DIMS = 64
    NUM_HEADS = 2
    NUM_LAYERS = 1
    NUM_TRAIN_STEPS = 30
    WARMUP_STEPS = 5
    SAVE_INTERVAL_STEPS = 30
    EVAL_INTERVAL_STEPS = 30
    SUMMARY_INTERVAL_STEPS = 30

  return Tiny


def _saved_params(job_log_dir):
  reader = checkpoints.CheckpointReader(checkpoints.checkpoint_dir(job_log_dir))
  saved = reader.state_metadata(reader.latest_step())
  for key in train_state_names.params_key(saved):
    saved = saved[key]
  return saved


class QuantizeCheckpointTest(absltest.TestCase):
  def test_ptq_int8_demo_lm(self):
    tmp = self.create_tempdir().full_path
    corpus = os.path.join(tmp, "kjv.txt")
    kjv_file.write_kjv(corpus, 60)
    tiny = _tiny(corpus, os.path.join(tmp, "data"))
    ptq = quantize.for_transformer(
      quantization_type=qh.QuantizationType.PTQ,
      mode=qh.QuantizationMode.INFERENCE,
      num_bits=8,
      quantize_embedding_softmax=True,
      linear_only=demo._INT8_LINEAR_ONLY,  # pylint: disable=protected-access
    )(type("TinyPtq", (tiny,), {}))

    float_dir, int8_dir = os.path.join(tmp, "float"), os.path.join(tmp, "int8")
    trainer.train_and_evaluate(tiny(), float_dir)
    summary = quantize_checkpoint.convert(ptq(), float_dir, int8_dir)
    self.assertEqual(summary["step"], 30)
    self.assertLess(summary["quantized_bytes"], 0.5 * summary["float_bytes"])

    # The checkpoint itself stores the int8 weights and their float scales.
    saved = _saved_params(int8_dir)
    ffn = saved["lm"]["transformer"]["x_layers_0"]["ff_layer"]["ffn_layer1"]["linear"]
    self.assertEqual(np.dtype(ffn["w"].dtype), np.int8)
    self.assertEqual(np.dtype(ffn["w_quantized_scale"].dtype), np.float32)
    softmax = saved["lm"]["softmax"]["logits_ffn"]["linear"]
    self.assertEqual(np.dtype(softmax["w"].dtype), np.int8)
    self.assertEqual(softmax["w_quantized_scale"].shape, (300,))

    float_eval = eval_lib.run_job(tiny(), float_dir, "eval", wait_timeout_secs=0)
    int8_eval = eval_lib.run_job(ptq(), int8_dir, "eval", wait_timeout_secs=0)
    self.assertEqual(int8_eval["steps"], [30])
    float_pplx = float_eval["results"]["kjv_eval"]["log_pplx"]
    int8_pplx = int8_eval["results"]["kjv_eval"]["log_pplx"]
    self.assertLess(float_pplx, np.log(300))  # it learned something
    self.assertAlmostEqual(int8_pplx, float_pplx, delta=0.02 * float_pplx)


if __name__ == "__main__":
  absltest.main()
