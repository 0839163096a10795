"""Pax's state-space sequence layers: SSM (S4D, diagonal, per channel) and S5 (MIMO).

Both map [B, L, d] -> [B, L, d] in parallel (`__call__`) and one step at a time from a
`ssm_state` decode cache (`extend_step`, [B, d] -> [B, d]); the two agree.

SSM (S4D, arXiv:2206.11893): per channel, `nheads` diagonal complex states with A from a HiPPO
matrix ('...legs', '...lagt': diagonalised NPLR HiPPO, arXiv:2111.00396) or S4D-Lin (default),
B = 1, C = C_re + i C_im [nh, d] (trainable), D [1, d]; discretised by zero-order hold with
`step_size`. The parallel form convolves with the length-l_max kernel via FFTs.

S5 (arXiv:2208.04933): one state vector of nh complex entries shared by all channels;
B_re/B_im [nh, d], C_re/C_im [d, nh], D [d]; the parallel form is an associative scan. As in
Pax, the discretised input matrix is built from ones (the B weights exist but do not enter).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import py_utils

WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
JTensor = jax.Array


def make_hippo(n: int, hippo_type: str) -> JTensor:
  """The HiPPO transition matrix A [n, n] ('LegS' or 'LagT'), negated as in the ODE."""
  if hippo_type == "LegS":
    p = jnp.sqrt(1 + 2 * jnp.arange(n))
    a = jnp.tril(p[:, None] * p[None, :]) - jnp.diag(jnp.arange(n))
  elif hippo_type == "LagT":
    a = jnp.tril(jnp.ones([n, n]))
  else:
    raise ValueError(f"hippo_type must be 'LegS' or 'LagT', got {hippo_type!r}.")
  return -a


def make_nplr_hippo(n: int, hippo_type: str):
  """(A, P, B) of the normal-plus-low-rank form: A + P P^T is normal."""
  a = make_hippo(n, hippo_type)
  if hippo_type == "LegS":
    p, b = jnp.sqrt(jnp.arange(n) + 0.5), jnp.sqrt(2 * jnp.arange(n) + 1.0)
  else:
    p, b = jnp.ones(n) * jnp.sqrt(0.5), jnp.ones(n)
  return a, p, b


def make_dplr_hippo(n: int, hippo_type: str):
  """(Lambda [n] complex, P, B, V): the diagonalised normal part of the NPLR HiPPO."""
  a, p, b = make_nplr_hippo(n, hippo_type)
  s = a + p[:, None] * p[None, :]  # the normal part
  lambda_real = jnp.mean(jnp.diagonal(s)) * jnp.ones(n)
  # s = -1/2 I + a skew-symmetric matrix: diagonalise it through the Hermitian -i s.
  lambda_imag, v = jnp.linalg.eigh(s * -1j)
  if hippo_type == "LagT":
    lambda_imag = lambda_imag * float(n)
  p = v.conj().T @ p
  b = v.conj().T @ b
  return lambda_real + 1j * lambda_imag, p, b, v


def causal_convolution(u: JTensor, ker: JTensor) -> JTensor:
  """y[:, t] = sum_{s <= t} ker[t - s] * u[:, s]; u [B, L, d], ker [>= L, d] -> [B, L, d]."""
  length = u.shape[-2]
  if ker.shape[-2] < length:
    raise ValueError(f"The kernel ({ker.shape[-2]} steps) is shorter than the input ({length}).")
  # Zero-padding to 2L makes the FFT's circular convolution a linear one.
  ud = jnp.fft.rfft(jnp.float32(u), n=2 * length, axis=-2)
  kd = jnp.fft.rfft(jnp.float32(ker[:length]), n=2 * length, axis=-2)
  return jnp.fft.irfft(ud * kd[None], axis=-2)[:, :length, :].real


def s4d_step(ab, bb, cb, u_k, x_k_1):
  """x_k = Ab x_{k-1} + Bb u_k, y_k = Re(sum_heads Cb x_k); states [B, nh, d], u_k [B, d]."""
  x_k = ab[None] * x_k_1 + bb[None] * u_k[:, None, :]
  return x_k, jnp.sum(cb[None] * x_k, axis=1).real


def s4d_kernel_zoh(c, a, l, step):
  """The S4D convolution kernel [L, d] for B = 1 under zero-order hold: sum over the heads of
  C (exp(step A) - 1) / A exp(l step A)."""
  scaled = step[None] * a[None]  # [1, nh, d]
  kernel = c[None] * (jnp.exp(scaled) - 1) / a[None] * jnp.exp(l[:, None, None] * scaled)
  return jnp.sum(kernel, axis=1).real


def s4d_discretize(a, b, step):
  """Zero-order hold of a diagonal system: (exp(step A), (exp(step A) - 1) / A * B)."""
  abar = jnp.exp(step * a)
  return abar, (abar - 1) / a * b


def _s4d_lin(nh: int) -> JTensor:
  """S4D-Lin's diagonal: -1/2 + i pi n spread over [-(nh-1) pi / 2, ...), [nh]."""
  imag = jnp.arange(
    -jnp.pi / 2.0 * (nh - 1), jnp.pi / 2.0 / nh * (nh - 1) ** 2, jnp.pi / nh * (nh - 1)
  )
  return jnp.ones([nh]) * -0.5 + 1j * imag


def _diagonal_a(nh: int, hippo_type: str) -> JTensor:
  if hippo_type.endswith("legs"):
    return make_dplr_hippo(nh, "LegS")[0]
  if hippo_type.endswith("lagt"):
    return make_dplr_hippo(nh, "LagT")[0]
  return _s4d_lin(nh)


class SSM(base_layer.BaseLayer):
  """S4D over each of `dim` channels.

  Attributes:
    nheads: state size per channel.
    dim: channels.
    l_max: longest sequence (the kernel's length).
    decode_num_samples: samples per example when decoding (sizes the state `__call__` resets).
    step_size: discretisation step.
    hippo_type: ends in 'legs' / 'lagt' for a HiPPO A, else S4D-Lin.
  """

  nheads: int = 0
  dim: int = 0
  l_max: int = 0
  decode_num_samples: int = 0
  step_size: float = 0.01
  hippo_type: str = "ss4d-1d"

  def _complex_weight(self, name: str, suffix: str, shape, scale: float) -> JTensor:
    """name_re + i name_im: two Gaussian(scale) weights of `shape`."""
    parts = [
      self.create_variable(
        f"{name}_{part}{suffix}",
        WeightHParams(
          shape=shape,
          init=WeightInit.Gaussian(scale),
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        ),
      )
      for part in ("re", "im")
    ]
    return parts[0] + 1j * parts[1]

  def init_s4d_ac(self, nh: int, suffix: str = ""):
    """(A [nh, d] complex, C [nh, d] complex); C's parts are the weights C_re, C_im."""
    a = jnp.transpose(jnp.tile(_diagonal_a(nh, self.hippo_type), [self.dim, 1]))  # [nh, d]
    return a, self._complex_weight("C", suffix, [nh, self.dim], 0.5**0.5)

  def setup(self):
    self.ss = jnp.ones([1, self.dim]) * self.step_size
    self.dmat = self.create_variable(
      "D",
      WeightHParams(
        shape=[1, self.dim],
        init=WeightInit.Constant(1.0),
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
      ),
    )
    self.amat, self.cmat = self.init_s4d_ac(self.nheads)  # [nh, d] each
    self.ssm_k = s4d_kernel_zoh(self.cmat, self.amat, jnp.arange(self.l_max), self.ss)  # [L, d]
    self.abar, self.bbar = s4d_discretize(self.amat, jnp.ones((self.nheads, self.dim)), self.ss)

  def init_states(self, batch_size: int) -> None:
    """Zeroes the decode cache's `ssm_state` [batch_size, nheads, dim]."""
    state = jnp.zeros((batch_size, self.nheads, self.dim), dtype=jnp.complex64)
    self.update_decode_state("ssm_state", state)

  def extend_step(self, inputs: JTensor) -> JTensor:
    """inputs [B, d] -> [B, d], advancing `ssm_state` one step."""
    batch_size = inputs.shape[0]
    if not self.has_variable(base_layer.DECODE_CACHE, "ssm_state"):
      self.init_states(batch_size)
    x = self.get_decode_state("ssm_state")
    if x.shape[0] != batch_size:
      raise ValueError(f"ssm_state holds {x.shape[0]} rows; inputs have {batch_size}.")
    x, y = s4d_step(self.abar, self.bbar, self.cmat, inputs, x)
    self.update_decode_state("ssm_state", x)
    return y + self.dmat * inputs

  def __call__(self, inputs: JTensor) -> JTensor:
    """inputs [B, L, d] -> [B, L, d]; resets `ssm_state` for decoding."""
    self.init_states(inputs.shape[0] * self.decode_num_samples)
    return causal_convolution(inputs, self.ssm_k) + self.dmat[None] * inputs


def s5_discretize(a, b, step):
  """Zero-order hold for S5: (exp(step A) [nh], ((exp(step A) - 1) / A)[:, None] * B)."""
  abar = jnp.exp(step * a)
  return abar, ((abar - 1) / a)[:, None] * b


def binary_operator(element_i, element_j):
  """Composes two steps (a, b) of x -> a x + b: the associative scan's operator."""
  a_i, bu_i = element_i
  a_j, bu_j = element_j
  return a_j * a_i, a_j * bu_i + bu_j


def s5_parallel_scan(params, input_sequence):
  """params (A_bar [nh], B_bar [nh, d], C [d, nh], D [d]); inputs [B, L, d] -> [B, L, d]."""
  a_bar, b_bar, c_mat, d_mat = params
  steps = input_sequence.shape[-2]
  a_elems = jnp.repeat(a_bar[None], steps, axis=0)[None]  # [1, L, nh]
  bu_elems = input_sequence @ b_bar.T  # [B, L, nh]
  _, xs = jax.lax.associative_scan(binary_operator, (a_elems, bu_elems), axis=1)
  return (xs @ c_mat.T + d_mat[None, None, :] * input_sequence).real


def s5_step(ab, bb, cb, u_k, x_k_1):
  """x_k = Ab x_{k-1} + Bb u_k, y_k = Re(C x_k); states [B, nh], u_k [B, d]."""
  x_k = ab[None] * x_k_1 + u_k @ bb.T
  return x_k, (x_k @ cb.T).real


class S5(SSM):
  """S5: one diagonal state of `nheads` entries driving all `dim` channels."""

  def init_s5_abc(self, nh: int, suffix: str = ""):
    """(A [nh], B [nh, d], C [d, nh]); B and C from the weights B_re/B_im, C_re/C_im."""
    a = _diagonal_a(nh, self.hippo_type)
    b = self._complex_weight("B", suffix, [nh, self.dim], (1.0 / self.dim) ** 0.5)
    c = self._complex_weight("C", suffix, [self.dim, nh], (1.0 / nh) ** 0.5)
    return a, b, c

  def setup(self):
    self.ss = self.step_size
    self.dmat = self.create_variable(
      "D",
      WeightHParams(
        shape=[self.dim],
        init=WeightInit.Constant(1.0),
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
      ),
    )
    self.amat, self.bmat, self.cmat = self.init_s5_abc(self.nheads)
    # As Pax: the input matrix is discretised from ones, not from bmat.
    self.abar, self.bbar = s5_discretize(self.amat, jnp.ones((self.nheads, self.dim)), self.ss)

  def init_states(self, batch_size: int) -> None:
    """Zeroes the decode cache's `ssm_state` [batch_size, nheads]."""
    self.update_decode_state("ssm_state", jnp.zeros((batch_size, self.nheads), jnp.complex64))

  def extend_step(self, inputs: JTensor) -> JTensor:
    """inputs [B, d] -> [B, d], advancing `ssm_state` one step."""
    batch_size = inputs.shape[0]
    if not self.has_variable(base_layer.DECODE_CACHE, "ssm_state"):
      self.init_states(batch_size)
    x = self.get_decode_state("ssm_state")
    if x.shape[0] != batch_size:
      raise ValueError(f"ssm_state holds {x.shape[0]} rows; inputs have {batch_size}.")
    x, y = s5_step(self.abar, self.bbar, self.cmat, inputs, x)
    self.update_decode_state("ssm_state", x)
    return y + self.dmat[None] * inputs

  def __call__(self, inputs: JTensor) -> JTensor:
    """inputs [B, L, d] -> [B, L, d] by an associative scan; resets `ssm_state`."""
    self.init_states(inputs.shape[0] * self.decode_num_samples)
    return s5_parallel_scan((self.abar, self.bbar, self.cmat, self.dmat), inputs)


# Pax's module-level names for the types and variable collections this module's API uses.
AUX_LOSS = base_layer.AUX_LOSS
NON_TRAINABLE = base_layer.NON_TRAINABLE
NestedMap = py_utils.NestedMap
PARAMS = base_layer.PARAMS
RANDOM = base_layer.RANDOM
SUMMARIES = base_layer.SUMMARIES
