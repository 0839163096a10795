"""Tests for the summary writers and publishers."""

import os
from unittest import mock

from absl.testing import absltest
from etils import epath
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml.toolkit import summary_writer
from paxml.toolkit import tensorboard
from paxml.toolkit import training


class _Layer(nn.Module):
  @nn.compact
  def __call__(self, x):
    self.sow("tensorboard", "mean", tensorboard.ScalarSummary(x.mean()))
    return x + 1


class _Net(nn.Module):
  @nn.compact
  def __call__(self, x):
    return _Layer()(_Layer()(x))


class PublishTest(absltest.TestCase):
  def test_two_layers_sown_summaries_get_their_own_tags(self):
    _, variables = _Net().apply({}, jnp.zeros(2), mutable=["tensorboard"])
    writer = mock.create_autospec(summary_writer.SummaryWriter, instance=True)
    tensorboard.publish_train_intermediates(writer, variables["tensorboard"], 9)
    calls = {c.args[0]: float(c.args[1]) for c in writer.scalar.call_args_list}
    # The outer layer is constructed (named) first but called second.
    self.assertEqual(calls, {"summary/_Layer_0/mean/0": 1.0, "summary/_Layer_1/mean/0": 0.0})

  def test_env_info_tags_carry_the_prefix_once(self):
    state = training.TrainState.create(
      apply_fn=None, params={"w": jnp.zeros((2, 3))}, tx=optax.sgd(0.1)
    )
    writer = mock.create_autospec(summary_writer.SummaryWriter, instance=True)
    tensorboard.publish_trainer_env_info(writer, state, also_do_logging=False)
    tags = [c.args[0] for c in writer.text.call_args_list]
    self.assertEqual(
      tags,
      [
        "trainer/diagnosis/" + t
        for t in ("total_num_params", "param_shape", "local_device", "trainer_argv", "process")
      ],
    )
    self.assertIn("Number of parameters = 6", writer.text.call_args_list[0].args[1])

  def test_mpl_image_trims_padding(self):
    summary = tensorboard.MplImageSummary(
      np.ones((5, 4)), h_paddings=np.array([0, 0, 1, 1]), v_paddings=np.array([0, 0, 0, 1, 1])
    )
    self.assertEqual(summary.trimmed_image.shape, (3, 2))


class WriterTest(absltest.TestCase):
  def test_threaded_writer_forwards_every_method_with_host_values(self):
    base = mock.create_autospec(summary_writer.SummaryWriter, instance=True)
    writer = tensorboard.ThreadedSummaryWriter(base, wait_on_flush=True)
    writer.scalar("s", jnp.float32(1.5), 3)
    writer.audio("a", jnp.zeros(8), 3, sample_rate=8000)
    writer.write("w", jnp.ones(2), 3, metadata="m")
    writer.hparams({"lr": 0.1})
    writer.flush()
    self.assertNotIsInstance(base.scalar.call_args.args[1], jax.Array)
    self.assertEqual(base.audio.call_args.args[3], 8000)
    self.assertEqual(base.write.call_args.args[3], "m")
    base.hparams.assert_called_once_with({"lr": 0.1})
    base.flush.assert_called_once()

  def test_multi_directory_writer_routes_tags_to_subdirectories(self):
    root = epath.Path(self.create_tempdir().full_path)  # epath paths work
    writer = tensorboard.MultiDirectorySummaryWriter(root, keys=("dev", "test"), auto_flush=False)
    writer.scalar("dev/accuracy", 0.5, 1)
    writer.text("test/note", "hi", 1)
    writer.hparams({"lr": 0.1})
    self.assertIsInstance(writer.subwriter("dev"), tensorboard.ThreadedSummaryWriter)
    with self.assertRaisesRegex(ValueError, "built with keys"):  # As bobbin: a ValueError.
      writer.scalar("train/loss", 1.0, 1)
    writer.close()
    self.assertCountEqual(os.listdir(root), ["dev", "test"])
    self.assertNotEmpty(os.listdir(root / "dev"))

  def test_non_leader_processes_write_nothing(self):
    with mock.patch.object(jax, "process_index", return_value=1):
      writer = tensorboard.MultiDirectorySummaryWriter("/nonexistent/root", keys=("dev",))
    self.assertIsInstance(writer.subwriter("dev"), tensorboard.NullSummaryWriter)


if __name__ == "__main__":
  absltest.main()
