"""A LoRA-style `Theta` subclass, written the way code outside Pax writes it, on our layers.

The subclass sets `self.module`, overrides `__getattr__` / `__getitem__`, and reads the base
weight through `super().__getattr__`; the layer installs it with its own descriptor. The
reference is numpy: x @ (w + a @ b.T).
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import linears


class LowRankTheta(base_layer.Theta):
  def __init__(self, module):
    self.module = module

  def _has_low_rank(self):
    m = self.module
    return (
      m.has_variable("params", "lora_a")
      and m.has_variable("params", "lora_b")
      and "lora_a" in m._weight_hparams
    )  # pylint: disable=protected-access

  def _with_update(self, w):
    a = super().__getattr__("lora_a")  # [D, r]
    b = super().__getattr__("lora_b")  # [N, r]
    return w + self.module.einsum("dr,nr->dn", a, b)  # [D, N]

  def __getattr__(self, k):
    value = super().__getattr__(k)
    return self._with_update(value) if k == "w" and self._has_low_rank() else value

  def __getitem__(self, k):
    value = super().__getitem__(k)
    return self._with_update(value) if k == "w" and self._has_low_rank() else value


class LowRankThetaDescriptor:
  def __get__(self, obj, objtype=None):
    return LowRankTheta(obj)


class LowRankLinear(linears.Linear):
  rank: int = 2
  theta = LowRankThetaDescriptor()

  def setup(self):
    super().setup()
    self.create_variable("lora_a", base_layer.WeightHParams(shape=[self.input_dims, self.rank]))
    self.create_variable(
      "lora_b",
      base_layer.WeightHParams(
        shape=[self.output_dims, self.rank], init=base_layer.WeightInit.Gaussian(1.0)
      ),
    )


class ThetaSubclassTest(absltest.TestCase):
  def test_forward_uses_the_subclass(self):
    layer = pax_fiddle.build(
      pax_fiddle.Config(LowRankLinear, name="lin", input_dims=4, output_dims=3)
    )
    x = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(1), x)
    self.assertEqual(sorted(variables["params"]), ["lora_a", "lora_b", "w"])
    p = {k: np.asarray(v) for k, v in variables["params"].items()}
    expected = x @ (p["w"] + p["lora_a"] @ p["lora_b"].T)
    np.testing.assert_allclose(layer.apply(variables, x), expected, rtol=1e-5, atol=1e-5)

  def test_item_access_and_base_theta_errors(self):
    layer = pax_fiddle.build(
      pax_fiddle.Config(LowRankLinear, name="lin", input_dims=2, output_dims=2)
    )
    x = jnp.ones((1, 2))
    variables = layer.init(jax.random.PRNGKey(0), x)

    def read(module):
      return module.theta["w"], module.theta.lora_b

    w, b = layer.apply(variables, method=read)
    p = variables["params"]
    np.testing.assert_allclose(w, p["w"] + p["lora_a"] @ p["lora_b"].T, rtol=1e-6)
    np.testing.assert_allclose(b, p["lora_b"])
    with self.assertRaisesRegex(ValueError, "no theta.missing"):
      layer.apply(variables, method=lambda m: m.theta.missing)


if __name__ == "__main__":
  absltest.main()
