"""The memory preflight: XLA's sizes added up, the check, its one line, runtime OOMs."""

import os
from unittest import mock

from absl.testing import absltest
import flax
import jax
import jax.numpy as jnp
import numpy as np

from paxml import main
from paxml import memory_plan
from paxml import trainer
from paxml.testing import binaries
from paxml.testing import compile_cache
from paxml.testing import tiny_lm

compile_cache.use_for_this_test()


class _State(flax.struct.PyTreeNode):
  params: jax.Array
  opt_state: jax.Array


class ShortTinyLm(tiny_lm.TinyLm):
  """TinyLm for 3 steps: enough to see the plan logged once, not once per step."""

  NUM_TRAIN_STEPS = 3


def _env(value):
  return mock.patch.dict(os.environ, {memory_plan.ENV_VAR: value})


class PlanTest(absltest.TestCase):
  def _compiled(self):
    def step(state, batch):
      hidden = jnp.tanh(batch @ state.params)  # [B, D]
      return _State(state.params - hidden.mean(), state.opt_state + 1), hidden.sum()

    state = _State(jnp.ones((256, 256)), jnp.zeros((2, 256, 256)))
    batch = jnp.ones((512, 256))
    compiled = jax.jit(step, donate_argnums=0).lower(state, batch).compile()
    return compiled, state

  def test_need_is_xla_sizes_with_the_state_split_out(self):
    compiled, state = self._compiled()
    plan = memory_plan.plan(compiled, "the step", state)
    stats = compiled.memory_analysis()
    expected = (
      stats.argument_size_in_bytes
      + stats.output_size_in_bytes
      - stats.alias_size_in_bytes
      + stats.temp_size_in_bytes
      + stats.generated_code_size_in_bytes
    )
    self.assertEqual(plan.total, expected)
    self.assertEqual(plan.parameters, 256 * 256 * 4)
    self.assertEqual(plan.optimizer_state, 2 * 256 * 256 * 4)
    self.assertEqual(plan.temp, stats.temp_size_in_bytes)
    # The donated state is aliased to the new one: counted once, so the rest is about the batch.
    self.assertGreaterEqual(plan.other, 512 * 256 * 4)
    self.assertLess(plan.other, 2 * 512 * 256 * 4 + 2**20)

  def test_check_logs_a_fitting_plan_and_refuses_one_that_does_not_fit(self):
    plan = memory_plan.MemoryPlan("the step", 3 * 2**30, 6 * 2**30, 12 * 2**30, 2**29)
    line = memory_plan.check(plan, (64 * 2**30, "H100 memory"), "to fit: less")
    self.assertEqual(
      line,
      "Memory plan: the step needs 21.50 GiB per device (parameters 3.00 GiB + optimizer state "
      "6.00 GiB, activations/temp 12.00 GiB, batch/outputs/code 0.50 GiB) of 64.00 GiB (H100 "
      "memory)",
    )
    with self.assertRaises(memory_plan.OutOfMemoryError) as raised:
      memory_plan.check(plan, (16 * 2**30, "H100 memory"), "to fit: less")
    message = str(raised.exception)
    self.assertNotIn("\n", message)
    self.assertIn("needs 21.50 GiB per device", message)
    self.assertIn("the device has 16.00 GiB (H100 memory)", message)
    self.assertTrue(message.endswith("; to fit: less"), message)

  def test_available_memory_override_host_memory_and_off(self):
    cpu = jax.devices("cpu")[0]
    with _env("123456"):
      self.assertEqual(memory_plan.available_bytes(cpu), (123456.0, memory_plan.ENV_VAR))
    with _env("0"):
      self.assertIsNone(memory_plan.available_bytes(cpu))
    with _env("lots"), self.assertRaisesRegex(memory_plan.OutOfMemoryError, "number of bytes"):
      memory_plan.available_bytes(cpu)
    with open("/proc/meminfo") as f:
      fields = dict(line.split(":", 1) for line in f)
    host = float(fields["MemAvailable"].split()[0]) * 1024
    with mock.patch.dict(os.environ, {}, clear=False):
      os.environ.pop(memory_plan.ENV_VAR, None)
      limit, source = memory_plan.available_bytes(cpu, resident=2**20)
    # Over this process's CPU devices, plus the arguments that already exist; the host's
    # free memory moves a little between the two reads.
    self.assertAlmostEqual(limit, host / len(jax.devices("cpu")) + 2**20, delta=0.05 * host)
    self.assertIn("host memory", source)

  def test_settings_name_the_model_batch_and_mesh(self):
    model = tiny_lm.tiny_language_model()
    mesh = jax.make_mesh((1, 1, 1), ("replica", "data", "mdl"))
    batch = {"ids": jax.ShapeDtypeStruct((8, 16), jnp.int32)}
    activations_heavy = memory_plan.MemoryPlan("the step", 1.0, 2.0, 100.0, 0.0)
    hint = memory_plan.settings_hint(model, mesh, batch, activations_heavy)
    self.assertIn("now 8 rows", hint)
    self.assertIn("now 16:", hint)
    self.assertIn("remat=False", hint)
    self.assertIn("FPROP_DTYPE, now float32", hint)
    self.assertIn("replica=1 data=1 mdl=1 on 1 device", hint)
    self.assertLess(hint.index("per-device batch"), hint.index("ICI_MESH_SHAPE"))
    state_heavy = memory_plan.MemoryPlan("the step", 100.0, 200.0, 1.0, 0.0)
    hint = memory_plan.settings_hint(model, mesh, batch, state_heavy)
    self.assertLess(hint.index("ICI_MESH_SHAPE"), hint.index("per-device batch"))


class PreflightTest(absltest.TestCase):
  def test_a_step_that_does_not_fit_stops_before_step_1_in_one_line(self):
    job_log_dir = self.create_tempdir().full_path
    with _env("100000"), self.assertRaises(main.UsageError) as raised:
      main.run(ShortTinyLm(), job_log_dir)
    message = str(raised.exception)
    self.assertIsInstance(raised.exception.__cause__, memory_plan.OutOfMemoryError)
    self.assertNotIn("\n", message)
    self.assertRegex(message, r"^out of memory before the first step: the train step needs ")
    self.assertIn("but the device has 97.7 KiB (PAX_DEVICE_MEMORY_BYTES)", message)
    for setting in ("PERCORE_BATCH_SIZE", "MAX_SEQ_LEN", "CHECKPOINT_POLICY", "FPROP_DTYPE"):
      self.assertIn(setting, message)
    self.assertIn("ICI_MESH_SHAPE", message)
    # Checked before the initial state is saved: nothing was written to checkpoints/.
    checkpoints = os.path.join(job_log_dir, "checkpoints")
    saved = os.listdir(checkpoints) if os.path.isdir(checkpoints) else []
    self.assertEmpty([s for s in saved if s.startswith("checkpoint_")])

  def test_a_step_that_fits_logs_its_plan_once(self):
    with _env("1e12"), self.assertLogs(level="INFO") as logs:
      result = main.run(ShortTinyLm(), self.create_tempdir().full_path)
    self.assertEqual(result["step"], 3)
    plans = [r.getMessage() for r in logs.records if r.getMessage().startswith("Memory plan:")]
    # One line per program: the train step's, and eval_train's eval step (not one per step).
    train = [p for p in plans if p.startswith("Memory plan: the train step")]
    self.assertLen(train, 1, plans)
    self.assertEqual(
      [p.split(" needs")[0] for p in plans if p not in train], ["Memory plan: the eval step"]
    )
    self.assertRegex(
      train[0],
      r"^Memory plan: the train step needs [\d.]+ [KM]iB per device \(parameters [\d.]+ KiB \+ "
      r"optimizer state [\d.]+ KiB, activations/temp .*\) of 931.32 GiB "
      r"\(PAX_DEVICE_MEMORY_BYTES\)$",
    )

  def test_command_line_prints_one_error_line_and_exits_1(self):
    with _env("100000"):
      status, stderr = binaries.run_main(
        "--exp=paxml.testing.tiny_lm.TinyLm", f"--job_log_dir={self.create_tempdir().full_path}"
      )
    self.assertEqual(status, 1, stderr[-3000:])
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    self.assertLen(errors, 1, stderr[-3000:])
    self.assertTrue(errors[0].startswith("error: out of memory before the first step"), errors)
    self.assertNotIn("Traceback", stderr)


def _oom() -> Exception:
  return jax.errors.JaxRuntimeError(
    "RESOURCE_EXHAUSTED: Error dispatching computation: Out of memory allocating 65991963408 bytes."
  )


class _FakeCompiled:
  """A compiled program that plans 1 GiB of temp and runs out of memory when called."""

  def __init__(self, error):
    self._error = error

  def memory_analysis(self):
    sizes = {"argument": 0, "output": 0, "alias": 0, "generated_code": 0, "temp": 2**30}
    return mock.Mock(**{f"{k}_size_in_bytes": v for k, v in sizes.items()})

  def __call__(self, *args):
    raise self._error


class RuntimeOutOfMemoryTest(absltest.TestCase):
  def _preflighted(self, error):
    jitted = mock.Mock()
    jitted.lower.return_value.compile.return_value = _FakeCompiled(error)
    mesh = jax.make_mesh((1,), ("data",))
    return memory_plan.Preflighted(
      jitted, "the train step", model=tiny_lm.tiny_language_model(), mesh=mesh
    )

  def test_an_oom_while_running_becomes_one_line_with_the_plan_and_settings(self):
    step = self._preflighted(_oom())
    with _env("1e12"), self.assertRaises(memory_plan.OutOfMemoryError) as raised:
      step({"w": np.zeros(4, np.float32)}, {"ids": np.zeros((8, 16), np.int32)})
    message = str(raised.exception)
    self.assertNotIn("\n", message)
    self.assertIn("out of memory running the train step allocating 61.46 GiB", message)
    self.assertIn("(planned: 1.00 GiB per device", message)
    self.assertIn("now 8 rows", message)

  def test_other_runtime_errors_pass_through(self):
    error = jax.errors.JaxRuntimeError("INTERNAL: something else broke")
    step = self._preflighted(error)
    with _env("1e12"), self.assertRaises(jax.errors.JaxRuntimeError):
      step({"w": np.zeros(4, np.float32)}, {"ids": np.zeros((8, 16), np.int32)})
    self.assertFalse(memory_plan.is_out_of_memory(error))
    wrapped = RuntimeError("while saving")
    wrapped.__cause__ = _oom()
    self.assertTrue(memory_plan.is_out_of_memory(wrapped))

  def test_main_turns_an_oom_outside_the_step_into_a_usage_error(self):
    with (
      mock.patch.object(trainer, "train_and_evaluate", side_effect=_oom()),
      self.assertRaises(main.UsageError) as raised,
    ):
      main.run(ShortTinyLm(), self.create_tempdir().full_path)
    self.assertTrue(
      str(raised.exception).startswith("out of memory running the program allocating 61.46 GiB;")
    )
    self.assertIn("PERCORE_BATCH_SIZE", str(raised.exception))


if __name__ == "__main__":
  absltest.main()
