"""Tests of paxml.ghostnorm: per-example gradient norms and scaled gradients against numpy."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from paxml.ghostnorm import base
from paxml.ghostnorm import embedding
from paxml.ghostnorm import generic_wrapper
from paxml.ghostnorm import linears
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import normalizations

PARAMS = base_layer.PARAMS


def _loss(outputs):
  """Batch mean of sum((y - 1)^2) per example; d/dy of example b's own loss is 2 (y_b - 1)."""
  return jnp.mean(jnp.sum(jnp.square(outputs - 1.0).reshape(outputs.shape[0], -1), axis=1))


def _grads_with_norms(layer, variables, inputs, scales):
  """(weight gradients, per-example squared norms summed over weights [B])."""
  wrapped = {PARAMS: jax.tree.map(lambda p: base.ParamWithAux(p, scales), variables[PARAMS])}
  grads = jax.grad(lambda v: _loss(layer.apply(v, inputs)))(wrapped)[PARAMS]
  leaves = jax.tree.leaves(grads, is_leaf=lambda x: isinstance(x, base.ParamWithAux))
  return base.get_param(grads), sum(leaf.aux for leaf in leaves)


class GhostNormTest(absltest.TestCase):
  def test_linear_rank3_norms_and_scaled_grad_match_numpy(self):
    batch, steps, din, dout = 4, 3, 5, 2
    x = np.random.default_rng(0).normal(size=(batch, steps, din)).astype(np.float32)
    layer = base_layer.instantiate(
      pax_fiddle.Config(linears.LinearGhostNorm, name="lin", input_dims=din, output_dims=dout)
    )
    variables = layer.init(jax.random.key(0), x)
    w = np.asarray(variables[PARAMS]["w"])
    scales = np.array([1.0, 0.5, 0.0, 2.0], np.float32)
    grads, sq_norms = _grads_with_norms(layer, variables, x, scales)
    # numpy: example b alone has dL/dW = x_b^T 2 (x_b W - 1).
    per_example = np.stack([x[b].T @ (2 * (x[b] @ w - 1.0)) for b in range(batch)])
    want_norms = np.array([(scales[b] * per_example[b]) ** 2 for b in range(batch)]).sum((1, 2))
    np.testing.assert_allclose(sq_norms, want_norms, rtol=1e-4)
    want_grad = np.mean(scales[:, None, None] * per_example, axis=0)
    np.testing.assert_allclose(grads["w"], want_grad, rtol=1e-4, atol=1e-6)

  def test_plain_weights_give_the_ordinary_gradient(self):
    x = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    layer = base_layer.instantiate(pax_fiddle.Config(linears.BiasGhostNorm, name="b", dims=4))
    variables = layer.init(jax.random.key(0), x)
    grads = jax.grad(lambda v: _loss(layer.apply(v, x)))(variables)[PARAMS]
    np.testing.assert_allclose(grads["b"], np.mean(2 * (x - 1.0), axis=0), rtol=1e-5)

  def test_embedding_repeated_ids_add_before_the_norm(self):
    ids = np.array([[1, 1, 3], [0, 2, 9]], np.int32)  # 9 is out of range: no gradient
    layer = base_layer.instantiate(
      pax_fiddle.Config(embedding.EmbeddingGhostNorm, name="emb", num_classes=4, input_dims=2)
    )
    variables = layer.init(jax.random.key(0), ids)
    table = np.asarray(variables[PARAMS]["emb_var"])
    _, sq_norms = _grads_with_norms(layer, variables, ids, np.ones(2, np.float32))
    want = []
    for b in range(2):
      grad = np.zeros_like(table)
      for i in ids[b]:
        if i < 4:
          grad[i] += 2 * (table[i] - 1.0)
      want.append(np.sum(grad**2))
    np.testing.assert_allclose(sq_norms, want, rtol=1e-5)

  def test_wrapped_layer_norms_match_vmapped_grads(self):
    x = np.random.default_rng(2).normal(size=(5, 3, 4)).astype(np.float32)
    tpl = generic_wrapper.generate_wrapped_template(
      pax_fiddle.Config(normalizations.LayerNorm, name="ln", dim=4)
    )
    self.assertIsInstance(tpl, generic_wrapper.GhostNormPaxConfig)
    layer = base_layer.instantiate(tpl)
    variables = layer.init(jax.random.key(0), x)
    self.assertEqual(list(variables[PARAMS]), [generic_wrapper.LAYER])
    _, sq_norms = _grads_with_norms(layer, variables, x, np.ones(5, np.float32))

    def one_loss(v, xb):  # example b's loss as a batch of one
      return _loss(layer.apply(v, xb[None]))

    per_example = jax.vmap(jax.grad(one_loss), in_axes=(None, 0))(variables, x)
    want = sum(np.sum(np.square(g).reshape(5, -1), 1) for g in jax.tree.leaves(per_example))
    np.testing.assert_allclose(sq_norms, want, rtol=1e-4)


if __name__ == "__main__":
  absltest.main()
