"""Every `bazel run` command that README.md and docs/ show, run for real at a tiny size.

Each test starts the Bazel binary itself (from this test's runfiles, as `bazel run` does), so a
refactor that breaks a documented command, its flags or its BUILD target fails here. Sizes are cut
to seconds (TinyLm instead of DemoLm, a few steps); what the docs promise about the output is
checked where they promise something exact.
"""

import glob
import json
import os
import random
import re
import string

from absl.testing import absltest

from paxml.testing import binaries
from paxml.testing import event_files

_TINY = "--exp=testing.tiny_lm.TinyLm"
# What TensorFlow prints at start-up unless asked (TF_CPP_MIN_LOG_LEVEL=0); main keeps it out.
_TF_NOTICES = ("oneDNN custom operations", "cpu_feature_guard", "absl::InitializeLog")


def _readme_promised_train_tags() -> list[str]:
  """The scalar tags README.md's TensorBoard section says run `train` has."""
  readme = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"], "README.md")
  with open(readme) as f:
    text = " ".join(f.read().split())
  sentence = re.search(r"run `train` has the scalars (.*?)\.(?: |$)", text)
  if sentence is None:
    raise AssertionError("README.md no longer says which scalars run `train` has")
  return re.findall(r"`([^`]+)`", sentence.group(1))


class MainTest(absltest.TestCase):
  """./bazelw run //paxml:main -- --exp=... --job_log_dir=... [--mode=eval|decode]"""

  def _main(self, cwd, *args):
    # As in the user's terminal: no TF_CPP_MIN_LOG_LEVEL (the test environment sets one).
    result = binaries.run(
      "paxml/main", _TINY, "--job_log_dir=run", *args, cwd=cwd, env={"TF_CPP_MIN_LOG_LEVEL": None}
    )
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    return result

  def test_train_eval_decode_write_what_the_readme_says(self):
    cwd = self.create_tempdir().full_path
    job_log_dir = os.path.join(cwd, "run")  # A relative --job_log_dir is taken from cwd.
    train = self._main(cwd)
    self.assertIn("Finished at step 20", train.stderr)
    self.assertEqual(
      sorted(os.listdir(os.path.join(job_log_dir, "summaries"))), ["eval_train", "train"]
    )

    train_tags = event_files.tags(os.path.join(job_log_dir, "summaries", "train"))
    promised = _readme_promised_train_tags()
    self.assertGreaterEqual(len(promised), 5)
    self.assertEmpty(
      set(promised) - set(train_tags),
      f"README.md promises tags the run does not write; it writes {train_tags}",
    )

    for mode, split in (("eval", "eval_test_progressions"), ("decode", "decode_test_progressions")):
      result = self._main(cwd, f"--mode={mode}")
      for notice in _TF_NOTICES:
        self.assertNotIn(notice, result.stdout + result.stderr, f"--mode={mode}")
      self.assertIn(f"{split} at step 20", result.stderr)
      self.assertTrue(glob.glob(os.path.join(job_log_dir, "summaries", split, "events.*")))
    (decoded,) = glob.glob(os.path.join(job_log_dir, "decoder_out", "progressions", "*.jsonl"))
    with open(decoded) as f:
      first = json.loads(f.readline())
    # Pax's decode output: [num_samples, T]; TinyLm decodes to SEQ_LEN tokens, prompt included.
    self.assertLen(first["output_ids"], 1)
    self.assertLen(first["output_ids"][0], 16)
    self.assertEqual(first["output_ids"][0][:2], first["ids"][:2])

    # ./bazelw run //paxml/tools:tensorboard -- --logdir=/tmp/pax_demo/summaries
    tensorboard = binaries.run(
      "paxml/tools/tensorboard", "--inspect", "--logdir=run/summaries", cwd=cwd
    )
    self.assertEqual(tensorboard.returncode, 0, tensorboard.stderr[-3000:])
    self.assertIn(os.path.join(job_log_dir, "summaries", "train"), tensorboard.stdout)
    # tf.summary (TF2) writes scalars as tensor events: TensorBoard lists them under "tensor".
    self.assertRegex(tensorboard.stdout, r"tensor\n(\s+\S+\n)*\s+loss\n")


class ToolsTest(absltest.TestCase):
  """bazel run //paxml/tools:<name> -- --exp=..."""

  def _tool(self, name, *args):
    result = binaries.run(f"paxml/tools/{name}", _TINY, *args, cwd=self.create_tempdir().full_path)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    return result.stdout

  def test_dump_hparams(self):
    out = self._tool("dump_hparams")
    self.assertIn("model_dims", out)
    self.assertIn("32", out)

  def test_model_analysis(self):
    self.assertRegex(self._tool("model_analysis"), r"(?i)param")
    # The trainer's preflight line, from the step compiled for TinyLm's mesh (one device here).
    self.assertRegex(
      self._tool("model_analysis", "--memory_plan", "--device_memory_gib=1"),
      r"memory plan +the train step needs [\d.]+ [KM]iB per device \(parameters .* of 1.00 GiB "
      r"\(--device_memory_gib\)",
    )

  def test_validate_config(self):
    self._tool("validate_config")


class DataTest(absltest.TestCase):
  """./bazelw run //paxml/data:prepare -- --output_dir=...; then //paxml/benchmarks:input_pipeline."""

  def test_prepare_then_benchmark(self):
    cwd = self.create_tempdir().full_path
    # Enough distinct text for a 300-piece SentencePiece model (fewer pieces than DemoLm's 1024,
    # so the benchmark's DemoLm model takes its ids).
    rng = random.Random(0)
    words = [
      "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 7)))
      for _ in range(500)
    ]
    with open(os.path.join(cwd, "tiny.txt"), "w") as f:
      for _ in range(600):
        f.write(" ".join(rng.choice(words) for _ in range(12)) + "\n")
    prepare = binaries.run(
      "paxml/data/prepare",
      "--input=tiny.txt",
      "--format=lines",
      "--output_dir=prepared",
      "--vocab_size=300",
      "--num_shards=2",
      cwd=cwd,
    )
    self.assertEqual(prepare.returncode, 0, prepare.stderr[-3000:])
    prepared = os.path.join(cwd, "prepared")
    self.assertTrue(os.path.exists(os.path.join(prepared, "spm.model")))
    self.assertLen(glob.glob(os.path.join(prepared, "train-*.tfrecord")), 2)

    benchmark = binaries.run(
      "paxml/benchmarks/input_pipeline",
      "--data_dir=prepared",
      "--batch_size=2",
      "--seq_len=32",
      "--num_batches=3",
      "--warmup_batches=1",
      "--train_steps=2",
      cwd=cwd,
    )
    self.assertEqual(benchmark.returncode, 0, benchmark.stderr[-3000:])
    self.assertRegex(benchmark.stdout, r"pipeline: TextInput .* tokens/s")
    self.assertRegex(benchmark.stdout, r"trainer:  DemoLm train_step: 128 tokens in ")
    self.assertRegex(benchmark.stdout, r"ratio:    the pipeline is [\d,.]+x the trainer's")


class BenchmarksTest(absltest.TestCase):
  """./bazelw run //paxml/benchmarks:trainer_overhead -- --exp=... --warmup=3 --steps=10 ..."""

  def test_trainer_overhead(self):
    result = binaries.run(
      "paxml/benchmarks/trainer_overhead",
      _TINY,
      "--warmup=1",
      "--steps=2",
      "--repeats=1",
      cwd=self.create_tempdir().full_path,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertIn("experiment        testing.tiny_lm.TinyLm", result.stdout)
    self.assertRegex(result.stdout, r"overhead ratio    [\d.]+ \(trainer / bare")

  def test_lm_step_ci(self):
    result = binaries.run(
      "paxml/benchmarks/lm_step",
      "--ci",
      "--modes=unrolled",
      "--repeats=1",
      "--steps=1",
      cwd=self.create_tempdir().full_path,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    # Two rows: seq 32, fp32, unrolled, without and with the logit caps; both models start
    # from the same weights, so each row's two losses agree.
    rows = [line for line in result.stdout.splitlines() if line.startswith("32   float32")]
    self.assertEqual([row.split()[3] for row in rows], ["off", "on"])
    for row in rows:
      ours, minimal = row.split()[-1].split("/")
      self.assertAlmostEqual(float(ours), float(minimal), places=4)

  def test_mfu_tiny(self):
    result = binaries.run(
      "paxml/benchmarks/mfu",
      "--tiny",
      "--steps=2",
      "--warmup=1",
      "--batch=2",
      cwd=self.create_tempdir().full_path,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertIn("NOTE: scaled-down shape", result.stdout)
    self.assertRegex(result.stdout, r"tokens_per_s +[\d.]+")


class ExamplesTest(absltest.TestCase):
  """The toolkit's and the experiment API's digits examples (docs/toolkit.md)."""

  def test_toolkit_digits(self):
    cwd = self.create_tempdir().full_path
    result = binaries.run(
      "paxml/toolkit/examples/digits",
      "--max_steps=4",
      "--eval_interval=2",
      f"--log_dir_path={os.path.join(cwd, 'out')}",
      cwd=cwd,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertTrue(os.listdir(os.path.join(cwd, "out")))

  def test_experiment_api_digits(self):
    cwd = self.create_tempdir().full_path
    config = os.path.join(
      os.environ["TEST_SRCDIR"],
      os.environ["TEST_WORKSPACE"],
      "paxml/experiment_api/examples/digits.py",
    )
    result = binaries.run(
      "paxml/experiment_api/examples/digits",
      f"--config={config}",
      "--config.training_steps=4",
      f"--config.checkpoint_dir={os.path.join(cwd, 'ckpt')}",
      "--config.eval_poll_interval_secs=0.2",
      "--jaxline_mode=train_eval_multithreaded",
      cwd=cwd,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertTrue(os.listdir(os.path.join(cwd, "ckpt")))


if __name__ == "__main__":
  absltest.main()
