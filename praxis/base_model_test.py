"""Tests for praxis.base_model: the call protocol, and that praxis's models are BaseModels."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import base_model
from praxis import pax_fiddle
from praxis.layers import models
from praxis.pytypes import NestedMap


class MeanSquaredModel(base_model.BaseModel):
  """A user's model: one weight vector, squared error against the batch's targets."""

  dims: int = 3

  def setup(self):
    self.create_variable("w", base_layer.WeightHParams(shape=[self.dims]))

  def compute_predictions(self, input_batch):
    return input_batch.x @ self.theta.w  # [B]

  def compute_loss(self, predictions, input_batch):
    err = (predictions - input_batch.y) ** 2  # [B]
    return NestedMap(loss=(jnp.mean(err), jnp.float32(err.shape[0]))), {"err": err}


class BaseModelTest(absltest.TestCase):
  def test_call_is_predictions_then_loss(self):
    model = pax_fiddle.build(pax_fiddle.Config(MeanSquaredModel, name="m"))
    batch = NestedMap(x=np.arange(6, dtype=np.float32).reshape(2, 3), y=np.ones(2, np.float32))
    variables = model.init(jax.random.PRNGKey(0), batch)
    metrics, per_example = model.apply(variables, batch)
    w = np.asarray(variables["params"]["w"])
    expected = (batch.x @ w - batch.y) ** 2
    np.testing.assert_allclose(per_example["err"], expected, rtol=1e-6)
    np.testing.assert_allclose(metrics.loss[0], expected.mean(), rtol=1e-6)

  def test_unimplemented_methods_name_the_model(self):
    model = pax_fiddle.build(pax_fiddle.Config(MeanSquaredModel, name="m"))
    with self.assertRaisesRegex(NotImplementedError, "MeanSquaredModel.decode"):
      model.decode(NestedMap())
    with self.assertRaisesRegex(NotImplementedError, "process_decode_out"):
      model.process_decode_out(None, NestedMap())

  def test_praxis_models_are_base_models(self):
    for cls in (
      models.LanguageModel,
      models.ClassificationModel,
      models.SequenceModel,
      models.LanguageModelDPO,
      models.SequenceModelDPO,
    ):
      self.assertTrue(issubclass(cls, base_model.BaseModel), cls)


if __name__ == "__main__":
  absltest.main()
