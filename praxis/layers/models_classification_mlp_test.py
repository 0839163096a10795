"""Tests of ClassificationMLPModel: its forward pass, xent and accuracy against numpy."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import models

NestedMap = pytypes.NestedMap
V, D, B, T = 7, 4, 2, 3


def _np_log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


class ClassificationMLPModelTest(absltest.TestCase):
  def _model_and_vars(self, batch):
    tpl = pax_fiddle.Config(models.ClassificationMLPModel, name="mlp_model")
    tpl.softmax_tpl.input_dims = D
    tpl.softmax_tpl.num_classes = V
    tpl.mlp_tpl.num_layers = 1
    tpl.mlp_tpl.ff_tpl.input_dims = D
    tpl.mlp_tpl.ff_tpl.output_dims = D
    model = base_layer.instantiate(tpl)
    variables = model.init(jax.random.key(3), batch)
    return model, variables

  def test_forward_and_metrics_match_numpy(self):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, size=(B, T)).astype(np.int32)
    labels = rng.integers(0, V, size=(B, T)).astype(np.int32)
    weights = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]], np.float32)
    batch = NestedMap(ids=ids, labels=labels, weights=weights)
    model, variables = self._model_and_vars(batch)
    params = jax.tree.map(np.asarray, variables[base_layer.PARAMS])
    self.assertEqual(set(params), {"mlp_layers_0", "softmax"})

    # numpy forward: shared embedding (columns of the logits weight), ReLU FeedForward, logits.
    w_soft = params["softmax"]["logits_ffn"]["linear"]["w"]  # [D, V]
    b_soft = params["softmax"]["logits_ffn"]["bias"]["b"]  # [V]
    ff = params["mlp_layers_0"]["mlp_layers_0"]
    embs = w_soft.T[ids]  # [B, T, D]
    hidden = np.maximum(embs @ ff["linear"]["w"] + ff["bias"]["b"], 0.0)  # [B, T, D]
    logits = hidden @ w_soft + b_soft  # [B, T, V]
    xent = -np.take_along_axis(_np_log_softmax(logits), ids[..., None], -1)[..., 0]  # [B, T]
    want_avg_xent = (xent * weights).sum() / weights.sum()
    argmax = logits.argmax(-1)
    want_acc = ((argmax == labels) * weights).sum() / weights.sum()

    preds = model.apply(variables, batch, method="compute_predictions")
    np.testing.assert_allclose(preds.logits, logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(preds.avg_xent, want_avg_xent, rtol=1e-5)
    metrics, _ = model.apply(variables, batch)
    # Pax's pair: total_loss holds the weighted accuracy as both value and weight.
    np.testing.assert_allclose(metrics.total_loss[0], want_acc, rtol=1e-6)
    np.testing.assert_allclose(metrics.total_loss[1], want_acc, rtol=1e-6)

  def test_labels_equal_to_argmax_give_accuracy_one(self):
    ids = np.arange(B * T, dtype=np.int32).reshape(B, T) % V
    batch = NestedMap(ids=ids, labels=ids, weights=np.ones((B, T), np.float32))
    model, variables = self._model_and_vars(batch)
    preds = model.apply(variables, batch, method="compute_predictions")
    batch.labels = np.asarray(preds.per_example_argmax).astype(np.int32)
    metrics, _ = model.apply(variables, batch)
    self.assertAlmostEqual(float(metrics.total_loss[0]), 1.0, places=6)


if __name__ == "__main__":
  absltest.main()
