"""Sown summaries are published with the right tags; env info tags (defaults)."""

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml.toolkit import summary
from paxml.toolkit import training


class _Writer:

  def __init__(self):
    self.calls = []

  def scalar(self, tag, value, step):
    self.calls.append(("scalar", tag, float(value), step))

  def image(self, tag, image, step):
    self.calls.append(("image", tag, np.shape(image), step))

  def text(self, tag, text, step):
    self.calls.append(("text", tag, text, step))


class Model(nn.Module):

  @nn.compact
  def __call__(self, x):
    self.sow("tensorboard", "mean", summary.ScalarSummary(x.mean()))
    y = nn.Dense(2, name="proj")(x)
    self.sow("tensorboard", "img", summary.ImageSummary(jnp.zeros((4, 4))))
    return y


class SummaryTest(absltest.TestCase):

  def test_publish_train_intermediates_tags_follow_module_paths(self):
    x = jnp.arange(6.0).reshape(2, 3)
    _, variables = Model().init_with_output(jax.random.PRNGKey(0), x)
    writer = _Writer()
    tags = summary.publish_train_intermediates(writer, variables["tensorboard"], 9)
    self.assertEqual(tags, ["summary/img", "summary/mean"])
    self.assertIn(("scalar", "summary/mean", 2.5, 9), writer.calls)
    self.assertIn(("image", "summary/img", (4, 4), 9), writer.calls)

  def test_env_info_tags_have_the_prefix_once(self):
    state = training.TrainState.create(
        apply_fn=None, params={"w": jnp.ones((2, 3))}, tx=optax.sgd(1.0),
        extra_vars={"batch_stats": {"m": jnp.zeros(3)}})
    writer = _Writer()
    written = summary.publish_trainer_env_info(writer, state)
    self.assertEqual(written["trainer/diagnosis/total_num_params"], "6")
    self.assertEqual(written["trainer/diagnosis/total_num_extra_vars"], "3")
    for call in writer.calls:
      self.assertRegex(call[1], r"^trainer/diagnosis/[a-z_]+$")
    self.assertIn("/w: (2, 3)", written["trainer/diagnosis/param_shapes"])


if __name__ == "__main__":
  absltest.main()
