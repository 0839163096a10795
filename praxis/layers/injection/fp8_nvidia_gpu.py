"""Pax's `praxis.layers.injection.fp8_nvidia_gpu`: FP8 einsums with delayed scaling.

    linear = pax_fiddle.Config(linears.Linear, input_dims=32, output_dims=64,
                               einsum_tpl=pax_fiddle.Config(Fp8EinsumOp))

Put Fp8EinsumOp in a layer's `einsum_tpl` (Fp8EinsumGatedOp where the layer takes an
EinsumGatedOp). The input and the kernel are quantized to float8_e4m3fn and the output's gradient
to float8_e5m2, each with a per-tensor scale from the largest |value| seen in the last
`amax_history_length` steps (delayed scaling: this step's scale comes from earlier steps' amax).
The math is flax.linen.fp8_ops', as in Pax; it is real quantize / dequantize arithmetic on
jnp.float8_* values, so on a CPU it runs (slowly, as float32 matmuls of fp8 values) and gives the
numbers a GPU's FP8 GEMM would.

Variables (Pax's, all float32 in "params"): `input_amax_history`, `kernel_amax_history`,
`output_grad_amax_history` [amax_history_length] (newest first) and `input_scale`,
`kernel_scale`, `output_grad_scale` [1]; the gated op adds `kernel_amax_history_gated`,
`output_grad_amax_history_gated`, `kernel_scale_gated`, `output_grad_scale_gated`. They carry the
OVERWRITE_WITH_GRADIENT collection: their "gradient" is their next value (fp8_ops' custom VJPs
return it), which the learner assigns instead of applying an update.
"""

from __future__ import annotations

from typing import Any

from flax.linen import fp8_ops
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pytypes

WeightHParams = base_layer.WeightHParams
_E4M3 = jnp.float8_e4m3fn  # inputs and kernels: more mantissa
_E5M2 = jnp.float8_e5m2  # output gradients: more range


def _get_fp8_args(amax_history_length: int, mesh_shape: Any) -> tuple[dict, dict]:
  """WeightHParams kwargs of a scale [1] (init 1) and of an amax history (init 0)."""
  collections = [
    base_layer.WeightHParamsCollection.OVERWRITE_WITH_GRADIENT,
    # The scales must stay float32 when a model's weights are cast to bfloat16.
    base_layer.WeightHParamsCollection.DISALLOW_BFLOAT16_CONVERSION,
  ]
  common = dict(
    dtype=jnp.float32,
    mesh_shape=mesh_shape,
    tensor_split_dims_mapping=None,
    collections=collections,
  )
  scale_args = dict(shape=[1], init=base_layer.WeightInit.Constant(1.0), **common)
  amax_history_args = dict(
    shape=[amax_history_length], init=base_layer.WeightInit.Constant(0.0), **common
  )
  return scale_args, amax_history_args


class Fp8EinsumOp(base_layer.BaseLayer):
  """jnp.einsum(equation, x, k) with x and k in FP8 (e4m3) and the output gradient in e5m2.

  Attributes:
    amax_history_length: steps of |max| kept per tensor for its scale.
    use_direct_quant: feed fp8 values to the dot itself (fp8_ops.fp8_scaled_dot_general);
      otherwise quantize-dequantize the operands and run the dot in the compute dtype.
  """

  amax_history_length: int = 1024
  use_direct_quant: bool = True

  def _create_fp8_variables(self, suffix: str = "", with_input: bool = True) -> None:
    scale_args, history_args = _get_fp8_args(self.amax_history_length, self.mesh_shape)
    names = (["input"] if with_input else []) + ["kernel", "output_grad"]
    for name in names:
      self.create_variable(f"{name}_amax_history{suffix}", WeightHParams(**history_args))
    for name in names:
      self.create_variable(f"{name}_scale{suffix}", WeightHParams(**scale_args))

  def setup(self) -> None:
    self._create_fp8_variables()

  def _check_and_cast(self, x: jax.Array, *kernels: jax.Array) -> jax.Array:
    comp_dtype = self.fprop_dtype
    for k in kernels:
      if k.dtype != comp_dtype:
        raise ValueError(
          f"{type(self).__name__}: the kernel dtype must be the layer's fprop_dtype "
          f"{comp_dtype}, got {k.dtype}; cast the weight (Linear does) or set fprop_dtype."
        )
    return jnp.asarray(x, comp_dtype)

  def _in_qdq(self, x: jax.Array, suffix: str, name: str) -> jax.Array:
    theta = self.theta
    return fp8_ops.in_qdq(
      self.fprop_dtype,
      _E4M3,
      x,
      getattr(theta, f"{name}_scale{suffix}"),
      getattr(theta, f"{name}_amax_history{suffix}"),
    )

  def _out_qdq(self, y: jax.Array, suffix: str) -> jax.Array:
    theta = self.theta
    return fp8_ops.out_qdq(
      self.fprop_dtype,
      _E5M2,
      y,
      getattr(theta, f"output_grad_scale{suffix}"),
      getattr(theta, f"output_grad_amax_history{suffix}"),
    )

  def quantized_einsum(
    self, equation: str, x: jax.Array, k: jax.Array, return_quantized_x: bool
  ) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The quantize-dequantize form: einsum(qdq(x), qdq(k)), output gradient through qdq."""
    x_qdq = self._in_qdq(x, "", "input")
    k_qdq = self._in_qdq(k, "", "kernel")
    y_qdq = jnp.einsum(equation, x_qdq, k_qdq, _dot_general=fp8_ops.dot_general_with_precision)
    y = self._out_qdq(y_qdq, "")
    if return_quantized_x:
      return y, x_qdq
    return y

  def __call__(self, equation: str, *args: jax.Array) -> jax.Array:
    """equation over (x, k), e.g. '...y,yz->...z' for a Linear's x [..., Y] and w [Y, Z]."""
    if len(args) != 2:
      raise ValueError(f"Fp8EinsumOp takes (x, k), got {len(args)} operands.")
    x, k = args
    x = self._check_and_cast(x, k)
    if not self.use_direct_quant:
      return self.quantized_einsum(equation, x, k, return_quantized_x=False)
    theta = self.theta

    def fp8_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
      return fp8_ops.fp8_scaled_dot_general(
        lhs,
        rhs,
        dimension_numbers,
        precision=precision,
        preferred_element_type=preferred_element_type,
        lhs_scale=theta.input_scale,
        rhs_scale=theta.kernel_scale,
        grad_scale=theta.output_grad_scale,
        lhs_amax_history=theta.input_amax_history,
        rhs_amax_history=theta.kernel_amax_history,
        grad_amax_history=theta.output_grad_amax_history,
        quantize_compute_type=self.fprop_dtype,
      )

    return jnp.einsum(equation, x, k, _dot_general=fp8_dot_general)


def quantized_dot_config(
  compute_dtype: Any,
  q_lhs: jax.Array,
  lhs_scale: jax.Array,
  q_rhs: jax.Array,
  rhs_scale: jax.Array,
  out_grad_scale: jax.Array,
  out_grad_amax_history: jax.Array,
):
  """A decorator turning a dot_general signature into an FP8 dot of pre-quantized operands.

  The decorated function's body is ignored: the result calls fp8_ops.quantized_dot with q_lhs /
  q_rhs (already quantized with their scales) and updates the output-gradient scale and history
  in the backward pass. Its output is still scaled by lhs_scale * rhs_scale (fp8_ops.out_dq).
  """

  def decorator(func):
    del func

    def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
      del precision  # fp8_ops.quantized_dot fixes the precision.
      a, qa, sa, b, qb, sb = lhs, q_lhs, lhs_scale, rhs, q_rhs, rhs_scale
      if (lhs.shape, rhs.shape) != (q_lhs.shape, q_rhs.shape):
        if (rhs.shape, lhs.shape) != (q_lhs.shape, q_rhs.shape):
          raise ValueError(
            f"quantized_dot_config: einsum passed operands {lhs.shape}, {rhs.shape} to its dot "
            f"but the pre-quantized ones are {q_lhs.shape}, {q_rhs.shape}; use an equation that "
            "contracts the operands as given (e.g. '...y,yz->...z')."
          )
        qa, sa, qb, sb = q_rhs, rhs_scale, q_lhs, lhs_scale  # einsum swapped the operands
      return fp8_ops.quantized_dot(
        a,
        qa,
        sa,
        b,
        qb,
        sb,
        out_grad_scale,
        out_grad_amax_history,
        dimension_numbers,
        preferred_element_type or compute_dtype,
      )

    return dot_general

  return decorator


class Fp8EinsumGatedOp(Fp8EinsumOp):
  """(einsum(x, k), einsum(x, k_gated)) in FP8, x quantized once for both (gated FFNs)."""

  def setup(self) -> None:
    super().setup()
    self._create_fp8_variables(suffix="_gated", with_input=False)

  def __call__(self, equation: str, *args: jax.Array) -> tuple[jax.Array, jax.Array]:
    if len(args) != 3:
      raise ValueError(f"Fp8EinsumGatedOp takes (x, k, k_gated), got {len(args)} operands.")
    x, k, k_gated = args
    x = self._check_and_cast(x, k, k_gated)
    if not self.use_direct_quant:
      y, x_qdq = self.quantized_einsum(equation, x, k, return_quantized_x=True)
      k_gated_qdq = self._in_qdq(k_gated, "_gated", "kernel")
      y_gated_qdq = jnp.einsum(
        equation, x_qdq, k_gated_qdq, _dot_general=fp8_ops.dot_general_with_precision
      )
      return y, self._out_qdq(y_gated_qdq, "_gated")

    theta = self.theta
    comp_dtype = self.fprop_dtype
    q_x, x_scale = fp8_ops.in_q(comp_dtype, _E4M3, x, theta.input_scale, theta.input_amax_history)
    q_k, k_scale = fp8_ops.in_q(comp_dtype, _E4M3, k, theta.kernel_scale, theta.kernel_amax_history)
    q_kg, kg_scale = fp8_ops.in_q(
      comp_dtype, _E4M3, k_gated, theta.kernel_scale_gated, theta.kernel_amax_history_gated
    )
    dot = quantized_dot_config(
      comp_dtype,
      q_x,
      x_scale,
      q_k,
      k_scale,
      theta.output_grad_scale,
      theta.output_grad_amax_history,
    )(None)
    dot_gated = quantized_dot_config(
      comp_dtype,
      q_x,
      x_scale,
      q_kg,
      kg_scale,
      theta.output_grad_scale_gated,
      theta.output_grad_amax_history_gated,
    )(None)
    y = jnp.einsum(equation, x, k, _dot_general=dot)  # in units of x_scale * k_scale
    y_gated = jnp.einsum(equation, x, k_gated, _dot_general=dot_gated)
    y = fp8_ops.out_dq(dq_type=x.dtype, lhs_scale=x_scale, rhs_scale=k_scale, out=y)
    # Deliberate fix of Pax, which rescales `y` (already dequantized) here instead of y_gated.
    y_gated = fp8_ops.out_dq(dq_type=x.dtype, lhs_scale=x_scale, rhs_scale=kg_scale, out=y_gated)
    return y, y_gated


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
