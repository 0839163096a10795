"""Integration test of the entry point: the same `run` that `main` calls, and the CLI."""

import glob
import json
import os

from absl.testing import absltest

from paxml import experiment_registry
from paxml import main

# Registers DemoLm, which the error messages below suggest.
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.testing import binaries
from paxml.testing import tiny_lm


@experiment_registry.register
class TinyDemoLm(tiny_lm.TinyLm):
  """A praxis LanguageModel trained for 20 steps in seconds (paxml/testing/tiny_lm.py); its loss starts
  near ln(16) = 2.77."""


@experiment_registry.register
class TinyDemoLm30(TinyDemoLm):
  """The same run, continued to step 30."""

  NUM_TRAIN_STEPS = 30


@experiment_registry.register
class TypoDemoLm(TinyDemoLm):
  """A task() that passes a misspelt hyperparameter."""

  def task(self):
    task = super().task()
    return type(task)(**{**vars(task), "save_interval_stepz": 5})


@experiment_registry.register
class HugeMeshDemoLm(TinyDemoLm):
  """Asks for more devices than any test machine has."""

  ICI_MESH_SHAPE = (1, 64, 2)


class RunTest(absltest.TestCase):
  def test_trains_then_resumes_in_the_same_job_log_dir(self):
    job_log_dir = self.create_tempdir().full_path
    # The test module's name differs between `python -m` and Bazel, so ask
    # the registry for it rather than spelling it out.
    name = experiment_registry.canonical_name(TinyDemoLm)

    first = main.run(name, job_log_dir)

    self.assertEqual(first["step"], 20)
    self.assertLess(first["loss"], 2.0)  # Started near ln(16) = 2.77.
    checkpoints = sorted(os.listdir(os.path.join(job_log_dir, "checkpoints")))
    self.assertEqual(
      checkpoints, ["checkpoint_00000000", "checkpoint_00000010", "checkpoint_00000020"]
    )
    self.assertLen(
      glob.glob(os.path.join(job_log_dir, "summaries", "train", "events.out.tfevents.*")), 1
    )

    with self.assertLogs("absl", "INFO") as logs:
      second = main.run(experiment_registry.canonical_name(TinyDemoLm30), job_log_dir)
    log = "\n".join(logs.output)
    self.assertIn("Restored checkpoint at step 20", log)
    self.assertIn("step 30/30 loss", log)
    self.assertNotIn("step 5/30", log)  # Did not start over.
    self.assertEqual(second["step"], 30)
    self.assertIn("checkpoint_00000030", os.listdir(os.path.join(job_log_dir, "checkpoints")))

  def test_unknown_experiment_raises_with_candidates(self):
    with self.assertRaises(experiment_registry.NotFoundError) as cm:
      main.run("demo.DemoLn", self.create_tempdir().full_path)
    self.assertIn("did you mean: tasks.lm.params.demo.DemoLm", str(cm.exception))

  def test_eval_and_decode_jobs_on_a_trained_job_log_dir(self):
    job_log_dir = self.create_tempdir().full_path
    name = experiment_registry.canonical_name(TinyDemoLm)
    main.run(name, job_log_dir)
    for f in (
      "model_params.txt",
      "experiment_cls_vars.txt",
      "post_init_model_params.txt",
      "input_specs.json",
    ):
      self.assertTrue(os.path.exists(os.path.join(job_log_dir, f)), f)

    evaluated = main.run(name, job_log_dir, mode="eval")
    # The latest checkpoint is the last one, so the job evaluates it and stops.
    self.assertEqual(evaluated["steps"], [20])
    self.assertLess(evaluated["results"]["progressions"]["total_loss"], 2.0)
    self.assertTrue(
      glob.glob(
        os.path.join(job_log_dir, "summaries", "eval_test_progressions", "events.out.tfevents.*")
      )
    )
    self.assertTrue(os.path.exists(os.path.join(job_log_dir, "eval_model_params.txt")))

    decoded = main.run(name, job_log_dir, mode="decode_once", restore_checkpoint_step=10)
    self.assertEqual(decoded["steps"], [10])
    out = os.path.join(job_log_dir, "decoder_out", "progressions", "decoder_out_00000010.jsonl")
    with open(out) as f:
      rows = [json.loads(line) for line in f]
    self.assertLen(rows, TinyDemoLm.BATCH_SIZE)
    # The prompts are the progressions' first two tokens; the output starts with them.
    self.assertEqual(rows[0]["output_ids"][:2], rows[0]["ids"][:2])
    self.assertTrue(
      glob.glob(
        os.path.join(job_log_dir, "summaries", "decode_test_progressions", "events.out.tfevents.*")
      )
    )

  def test_eval_job_says_what_it_waits_for(self):
    job_log_dir = self.create_tempdir().full_path
    with self.assertLogs("absl", "INFO") as logs:
      # No checkpoint at all within the timeout: an error (a following job that saw some just
      # stops).
      with self.assertRaisesRegex(main.UsageError, r"no checkpoint appeared .* within 0\.5s"):
        main.run(
          experiment_registry.canonical_name(TinyDemoLm),
          job_log_dir,
          mode="eval",
          wait_timeout_secs=0.5,
        )
    log = "\n".join(logs.output)
    self.assertIn(
      f"Waiting for a checkpoint to appear in {os.path.join(job_log_dir, 'checkpoints')}", log
    )
    self.assertEqual(log.count("Waiting for a checkpoint"), 1)  # Rate-limited.

  def test_typo_in_a_hyperparameter_is_a_usage_error(self):
    with self.assertRaisesRegex(main.UsageError, "save_interval_stepz"):
      main.run(experiment_registry.canonical_name(TypoDemoLm), self.create_tempdir().full_path)

  def test_data_dir_reaches_the_experiment_or_is_refused(self):
    # C4 reads DATA_DIR: without --data_dir it says which flag to pass; with one, the error moves
    # on to the missing files under that directory (nothing is trained).
    with self.assertRaisesRegex(main.UsageError, "pass --data_dir=DIR"):
      main.run("c4.C4Spmd1BAdam4Replicas", self.create_tempdir().full_path)
    with self.assertRaisesRegex(main.UsageError, "has no DATA_DIR field"):
      main.run(
        experiment_registry.canonical_name(TypoDemoLm),
        self.create_tempdir().full_path,
        data_dir="/nonexistent",
      )

  def test_mesh_that_does_not_fit_is_a_usage_error(self):
    with self.assertRaisesRegex(
      main.UsageError,
      r"ICI_MESH_SHAPE=\[1, 64, 2\] x DCN_MESH_SHAPE=\[1, 1, 1\] "
      r"needs 128 devices, but \d+ cpu device",
    ):
      main.run(experiment_registry.canonical_name(HugeMeshDemoLm), self.create_tempdir().full_path)

  def test_unwritable_job_log_dir_is_a_usage_error(self):
    blocker = os.path.join(self.create_tempdir().full_path, "a_file")
    with open(blocker, "w") as f:
      f.write("not a directory")
    with self.assertRaisesRegex(main.UsageError, "cannot be written"):
      main.run(experiment_registry.canonical_name(TinyDemoLm), os.path.join(blocker, "run"))


class CommandLineTest(absltest.TestCase):
  """The real process: exit status and what a person sees on stderr."""

  def test_unknown_experiment_prints_one_line_and_exits_1(self):
    status, stderr = binaries.run_main(
      "--exp=does.not.Exist", f"--job_log_dir={self.create_tempdir().full_path}"
    )
    self.assertEqual(status, 1)
    self.assertEqual(len(stderr.strip().splitlines()), 1, stderr)
    self.assertTrue(stderr.startswith("error: no experiment named 'does.not.Exist'"), stderr)
    self.assertIn("did you mean: tasks.lm.params.demo.DemoLm", stderr)
    self.assertNotIn("Traceback", stderr)

  def test_bad_mode_and_bad_dir_print_one_line_and_exit_1(self):
    status, stderr = binaries.run_main(
      "--exp=demo.DemoLm", "--mode=evaluate", f"--job_log_dir={self.create_tempdir().full_path}"
    )
    self.assertNotEqual(status, 0)
    self.assertIn("--mode", stderr)
    blocker = os.path.join(self.create_tempdir().full_path, "a_file")
    open(blocker, "w").close()
    status, stderr = binaries.run_main("--exp=demo.DemoLm", f"--job_log_dir={blocker}/run")
    self.assertEqual(status, 1)
    # TensorFlow's C++ start-up notices may precede it; ours is one line, no traceback.
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    self.assertLen(errors, 1, stderr)
    self.assertTrue(
      errors[0].startswith(f"error: --job_log_dir={blocker}/run cannot be written"), stderr
    )
    self.assertNotIn("Traceback", stderr)

  def test_missing_required_flag_is_a_usage_error(self):
    status, stderr = binaries.run_main("--exp=demo.DemoLm")
    self.assertNotEqual(status, 0)
    self.assertIn("job_log_dir", stderr)


if __name__ == "__main__":
  absltest.main()
