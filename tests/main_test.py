"""Integration test of the entry point: the same `run` that `main` calls, and the CLI."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest

from paxml import experiment_registry
from paxml import main

# Registers DemoLm, which the error messages below suggest.
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.testing import binaries
from paxml.testing import compile_cache
from paxml.testing import tiny_lm

# The runs here (and the `python -m paxml.main` children) compile TinyLm's programs again and
# again: the later compiles read the first's.
compile_cache.use_for_this_test()


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
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # One 20-step run serves the resume test and the eval/decode test; each works on a copy.
    # The test module's name differs between `python -m` and Bazel, so ask the registry for it
    # rather than spelling it out.
    cls.name = experiment_registry.canonical_name(TinyDemoLm)
    cls.trained_dir = os.path.join(tempfile.mkdtemp(dir=absltest.get_default_test_tmpdir()), "run")
    cls.first = main.run(cls.name, cls.trained_dir)

  def _copy_of_trained(self):
    job_log_dir = os.path.join(self.create_tempdir().full_path, "run")
    shutil.copytree(self.trained_dir, job_log_dir)
    return job_log_dir

  def test_trains_then_resumes_in_the_same_job_log_dir(self):
    self.assertEqual(self.first["step"], 20)
    self.assertLess(self.first["loss"], 2.0)  # Started near ln(16) = 2.77.
    checkpoints = sorted(os.listdir(os.path.join(self.trained_dir, "checkpoints")))
    self.assertEqual(
      checkpoints, ["checkpoint_00000000", "checkpoint_00000010", "checkpoint_00000020"]
    )
    self.assertLen(
      glob.glob(os.path.join(self.trained_dir, "summaries", "train", "events.out.tfevents.*")), 1
    )

    job_log_dir = self._copy_of_trained()
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
    job_log_dir = self._copy_of_trained()
    name = self.name
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
    # The prompts are the progressions' first two tokens; each sample ([num_samples, T], as
    # Pax's decode outputs) starts with them.
    self.assertEqual(rows[0]["output_ids"][0][:2], rows[0]["ids"][:2])
    self.assertTrue(
      glob.glob(
        os.path.join(job_log_dir, "summaries", "decode_test_progressions", "events.out.tfevents.*")
      )
    )

    # Pax's --restore_checkpoint_dir (another run's checkpoints), repeated
    # --restore_checkpoint_step, --eval_during_decode and --enable_summary_writer=false.
    other_dir = self.create_tempdir().full_path
    decoded = main.run(
      name,
      other_dir,
      mode="decode_once",
      restore_checkpoint_dir=job_log_dir,
      restore_checkpoint_step=[10, 20],
      eval_during_decode=True,
      enable_summary_writer=False,
    )
    self.assertEqual(decoded["steps"], [10, 20])
    self.assertEqual(
      sorted(os.listdir(os.path.join(other_dir, "decoder_out", "progressions"))),
      ["decoder_out_00000010.jsonl", "decoder_out_00000020.jsonl"],
    )
    self.assertAlmostEqual(
      decoded["results"]["eval_test_progressions"]["total_loss"],
      evaluated["results"]["progressions"]["total_loss"],
      places=5,
    )
    self.assertFalse(os.path.exists(os.path.join(other_dir, "summaries")))
    self.assertFalse(os.path.exists(os.path.join(other_dir, "checkpoints")))
    with self.assertRaisesRegex(main.UsageError, "only --mode=decode_once or infer"):
      main.run(name, other_dir, mode="eval", restore_checkpoint_step=[10, 20])
    with self.assertRaisesRegex(main.UsageError, "read by eval/decode jobs"):
      main.run(name, other_dir, restore_checkpoint_dir=job_log_dir)

  def test_fdl_set_changes_a_registered_experiment(self):
    job_log_dir = self.create_tempdir().full_path
    result = main.run(
      experiment_registry.canonical_name(TinyDemoLm),
      job_log_dir,
      fdl_set=["NUM_TRAIN_STEPS=3", "SAVE_INTERVAL_STEPS=2"],
      enable_checkpoint_saving=True,
    )
    self.assertEqual(result["step"], 3)
    self.assertEqual(
      sorted(os.listdir(os.path.join(job_log_dir, "checkpoints"))),
      ["checkpoint_00000000", "checkpoint_00000002", "checkpoint_00000003"],
    )
    # TinyLm's task() is a built TaskConfig: its fields cannot be set, and it says so.
    with self.assertRaisesRegex(main.UsageError, "not a Fiddle config"):
      main.run(
        experiment_registry.canonical_name(TinyDemoLm),
        job_log_dir,
        fdl_set=["num_train_steps=3"],
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
    # --data_dir sets DATA_DIR (C4's TFRecord option; without it C4 reads TFDS through SeqIO,
    # paxml/tasks/lm/params/c4_test.py); an experiment without the field refuses it.
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


# Every flag google/paxml's paxml/main.py defines (read from Pax's main.py at HEAD b397693).
PAX_MAIN_FLAGS = [
  "exp", "job_log_dir", "mode", "eval_on_test", "decode_during_train", "eval_during_decode",
  "maybe_use_persistence_checkpointing", "jax_fully_async_checkpoint",
  "exit_after_ondemand_checkpoint", "tensorstore_use_ocdbt", "async_timeout_secs",
  "startup_random_jitter_max_secs", "jax_traceback_filtering_option", "decode_output_pickle",
  "checkpoint_todelete_subdir", "restore_checkpoint_dir", "restore_checkpoint_step",
  "globally_use_hardware_rng", "jax_profiler_port", "enable_auto_sharding",
  "enable_checkpoint_saving", "enforce_restore_shape_check", "study", "controller_mode",
  "tuner_group", "metrics_from", "num_trials", "pythia_port", "tfds_data_dir",
  "multiprocess_gpu", "server_addr", "num_hosts", "host_idx", "fdl", "enable_summary_writer",
]  # fmt: skip
# The flags Pax's main pulls in from elsewhere that its users pass: Fiddle's legacy flags, JAX's
# (jax.config.config_with_absl()), praxis' py_utils, summary_utils and tf_data_service_lib.
PAX_OTHER_FLAGS = [
  "fdl_config", "fdl_config_file", "fiddler", "fdl_set", "fdl_tags_set", "fdl_help",
  "jax_backend_target", "jax_xla_backend", "jax_enable_checks", "jax_platforms",
  "pmap_use_tensorstore", "pax_only_aggregate_summaries", "tf_data_service_port",
  "tf_data_service_dispatcher_address", "tf_data_service_worker_address",
  "tf_data_service_data_transfer_protocol", "tf_data_service_data_transfer_address",
  "tf_data_service_work_dir", "tf_data_service_fault_tolerant_mode",
  "tf_data_service_worker_addresses", "tf_data_service_address",
]  # fmt: skip


def _helpfull() -> str:
  result = subprocess.run(
    [sys.executable, "-m", "paxml.main", "--helpfull"],
    env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  return result.stdout


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

  def test_every_flag_of_pax_main_is_accepted(self):
    stdout = _helpfull()  # absl exits with status 1 after --helpfull.
    defined = set(re.findall(r"^\s+--(?:\[no\])?([\w.]+)", stdout, re.MULTILINE))
    missing = sorted(set(PAX_MAIN_FLAGS + PAX_OTHER_FLAGS) - defined)
    self.assertEmpty(missing)

  def test_pax_command_line_trains_with_pax_flags(self):
    job_log_dir = self.create_tempdir().full_path
    status, stderr = binaries.run_main(
      # Pax's Fiddle way of naming the experiment, and a setting on it (--fdl.X is --fdl_set=X).
      "--fdl_config=paxml.testing.tiny_lm.TinyLm",
      "--fdl.NUM_TRAIN_STEPS=4",
      f"--job_log_dir={job_log_dir}",
      "--enable_checkpoint_saving=false",
      "--enable_summary_writer=false",
      "--jax_traceback_filtering_option=off",
      "--jax_default_matmul_precision=float32",  # One of JAX's own, through its absl flags.
      "--startup_random_jitter_max_secs=0",
      "--study=my_study",
      "--tf_data_service_address=grpc://x:1",
      "--noglobally_use_hardware_rng",
      "--verbosity=0",
    )
    self.assertEqual(status, 0, stderr)
    self.assertIn("step 4/4 loss", stderr)
    self.assertIn("--study does nothing here: hyperparameter tuning", stderr)
    self.assertIn("--tf_data_service_address does nothing here", stderr)
    self.assertFalse(os.listdir(os.path.join(job_log_dir, "checkpoints")))
    self.assertFalse(os.path.exists(os.path.join(job_log_dir, "summaries")))
    self.assertTrue(os.path.exists(os.path.join(job_log_dir, "model_params.txt")))

  def test_tf_data_service_mode_is_refused_in_one_line(self):
    status, stderr = binaries.run_main(
      "--mode=tf_data_service_dispatcher", f"--job_log_dir={self.create_tempdir().full_path}"
    )
    self.assertEqual(status, 1)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    self.assertLen(errors, 1, stderr)
    self.assertIn("tf.data service", errors[0])
    self.assertNotIn("Traceback", stderr)

  def test_missing_required_flag_is_a_usage_error(self):
    status, stderr = binaries.run_main("--exp=demo.DemoLm")
    self.assertNotEqual(status, 0)
    self.assertIn("job_log_dir", stderr)


if __name__ == "__main__":
  absltest.main()
