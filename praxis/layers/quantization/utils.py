"""Helpers shared by Pax's quantized layers: einsum parsing, int4 packing, dtypes, LoRA shapes.

- einsum_eqn_to_dimension_numbers: 'ab,bc->ac' -> lax.dot_general dimension
  numbers (+ an output permutation), so int einsums can run as dot_general.
- pack_4bit / unpack_4bit: int4 values held in int8 / uint8 <-> nibbles packed
  into int32 (8 per word) or int8 (2 per byte) along one dim; nibble k of a
  word is bits [4k, 4k + 4).
- dtype_to_bits / bits_to_dtype / get_smallest_matching_dtype: int dtype
  arithmetic (int4 counts as 4 bits, though its itemsize is 1).
- find_target_tpl: every Config of given layer classes in a config tree.
- get_lora_shape_and_eqn: einsums and shapes of LoRA's two factors.
"""

from __future__ import annotations

from typing import Sequence

import fiddle as fdl
from jax import lax
import jax.numpy as jnp

JTensor = jnp.ndarray

INT4_TYPES = [jnp.int4, jnp.uint4]
INT_TYPES = [
  jnp.int4,
  jnp.uint4,
  jnp.int8,
  jnp.uint8,
  jnp.int16,
  jnp.uint16,
  jnp.int32,
  jnp.uint32,
]


def einsum_eqn_to_dimension_numbers(
  eqn: str,
) -> tuple[lax.DotDimensionNumbers, tuple[int, ...] | None]:
  """Returns (dot_general dimension numbers, output permutation or None) for `eqn`.

  `eqn` must have exactly two operands, no '...', no name repeated within an
  operand, and every contracted name present in both operands. Batch dims are
  taken in output order; contracted dims in sorted name order (deterministic).
  dot_general's output is [batch..., lhs free..., rhs free...]; the permutation
  (for lax.transpose) maps it to `eqn`'s output order.
  """
  if "." in eqn:
    raise NotImplementedError(
      f'einsum {eqn!r}: ellipsis ("...") batch dims are not supported; spell every dim out.'
    )
  operands, out = eqn.split("->")
  if operands.count(",") != 1:
    raise ValueError(
      f"einsum {eqn!r}: expected two arguments (operands), got {operands.count(',') + 1}."
    )
  lhs, rhs = operands.split(",")
  for side in (lhs, rhs):
    if len(side) != len(set(side)):
      raise ValueError(
        f"einsum {eqn!r}: Repeated dim names in operand {side!r} (a trace "
        "or diagonal) are not supported: dot_general cannot express them."
      )
  batch = [c for c in out if c in lhs and c in rhs]
  lhs_contract = set(lhs) - set(out)
  rhs_contract = set(rhs) - set(out)
  if lhs_contract != rhs_contract:
    raise ValueError(
      f"einsum {eqn!r}: Contraction dims must be present in both operands; "
      f"got {sorted(lhs_contract)} in lhs and {sorted(rhs_contract)} in rhs."
    )
  contract = sorted(lhs_contract)
  dims = (
    (tuple(lhs.index(c) for c in contract), tuple(rhs.index(c) for c in contract)),
    (tuple(lhs.index(c) for c in batch), tuple(rhs.index(c) for c in batch)),
  )
  shared = set(batch) | set(contract)
  dg_out = batch + [c for c in lhs if c not in shared] + [c for c in rhs if c not in shared]
  assert set(dg_out) == set(out), (dg_out, out)
  if dg_out == list(out):
    return dims, None
  return dims, tuple(dg_out.index(c) for c in out)


def pack_4bit(x: JTensor, pack_dim: int, packed_dtype: jnp.dtype = jnp.int32) -> JTensor:
  """Packs int4 values (held in int8 / uint8 `x`) into int32 or int8 along `pack_dim`.

  The packed `pack_dim` is `x.shape[pack_dim] / 8` for int32 (/ 2 for int8);
  element j of each group of 8 (or 2) lands in nibble j (bits 4j..4j+3).
  """
  if x.dtype not in (jnp.int8, jnp.uint8):
    raise ValueError(f"pack_4bit packs int4 values held in int8 or uint8; got {x.dtype}.")
  if packed_dtype == jnp.int8 and x.dtype == jnp.uint8:
    raise ValueError(
      "pack_4bit into int8 needs int8 input (uint8 values above 7 do not "
      f"fit a signed nibble); got {x.dtype}. Pack into int32 instead."
    )
  if packed_dtype not in (jnp.int32, jnp.int8):
    raise ValueError(f"packed_dtype must be int32 or int8; got {packed_dtype}.")
  if pack_dim > x.ndim - 1:
    raise ValueError(f"pack_dim {pack_dim} is out of range for a tensor of shape {x.shape}.")
  per_word = 8 if packed_dtype == jnp.int32 else 2
  if x.shape[pack_dim] % per_word:
    raise ValueError(
      f"pack_4bit into {jnp.dtype(packed_dtype).name} needs shape[{pack_dim}] "
      f"divisible by {per_word}; got shape {x.shape}."
    )
  grouped = list(x.shape)
  grouped[pack_dim] //= per_word
  grouped.insert(pack_dim + 1, per_word)  # [..., n / per_word, per_word, ...]
  nibble = x.astype(packed_dtype) & jnp.array(0xF, packed_dtype)
  nibble = nibble.reshape(grouped)
  shift = lax.broadcasted_iota(packed_dtype, grouped, pack_dim + 1) * 4
  # Nibbles occupy disjoint bits, so summing == OR-ing them.
  return lax.reduce(nibble << shift, jnp.array(0, packed_dtype), lax.add, (pack_dim + 1,))


def unpack_4bit(packed: JTensor, pack_dim: int, original_dtype: jnp.dtype) -> JTensor:
  """Inverse of pack_4bit: int32 / int8 words -> int8 (sign-extended) or uint8 values."""
  if packed.dtype not in (jnp.int32, jnp.int8):
    raise ValueError(f"unpack_4bit expects an int32 or int8 packed tensor; got {packed.dtype}.")
  if original_dtype not in (jnp.int8, jnp.uint8):
    raise ValueError(f"original_dtype must be int8 or uint8; got {original_dtype}.")
  if pack_dim > packed.ndim - 1:
    raise ValueError(f"pack_dim {pack_dim} is out of range for a tensor of shape {packed.shape}.")
  word_bits = 32 if packed.dtype == jnp.int32 else 8
  per_word = word_bits // 4
  grouped = list(packed.shape)
  grouped.insert(pack_dim + 1, per_word)
  words = jnp.broadcast_to(jnp.expand_dims(packed, pack_dim + 1), grouped)
  nibble_index = lax.broadcasted_iota(packed.dtype, grouped, pack_dim + 1)
  # Move nibble j to the top bits, then shift it back down: an arithmetic
  # shift sign-extends (int4), a logical one zero-fills (uint4).
  lifted = words << ((per_word - 1 - nibble_index) * 4)
  down = jnp.array(word_bits - 4, packed.dtype)
  if jnp.issubdtype(original_dtype, jnp.signedinteger):
    values = lax.shift_right_arithmetic(lifted, down)
  else:
    values = lax.shift_right_logical(lifted, down)
  out_shape = list(packed.shape)
  out_shape[pack_dim] *= per_word
  return values.reshape(out_shape).astype(original_dtype)


def dtype_to_bits(dtype: jnp.dtype) -> int:
  """Bits of an int dtype, counting int4 / uint4 as 4."""
  dtype = jnp.dtype(dtype)
  return 4 if dtype in INT4_TYPES else dtype.itemsize * 8


def bits_to_dtype(bits: int, signed: bool = True) -> jnp.dtype:
  """The narrowest int dtype holding `bits` bits (4, 8, 16 or 32)."""
  if not 1 <= bits <= 32:
    raise ValueError(f"bits must be in [1, 32]; got {bits}.")
  for width, s_type, u_type in (
    (4, jnp.int4, jnp.uint4),
    (8, jnp.int8, jnp.uint8),
    (16, jnp.int16, jnp.uint16),
  ):
    if bits <= width:
      return s_type if signed else u_type
  return jnp.int32 if signed else jnp.uint32


def get_smallest_matching_dtype(lhs: JTensor, rhs: JTensor) -> jnp.dtype:
  """The narrowest int dtype that represents every value of both operands."""
  for name, t in (("lhs", lhs), ("rhs", rhs)):
    if t.dtype not in INT_TYPES:
      raise ValueError(f"{name}.dtype={t.dtype} is not one of {INT_TYPES}.")
  l_signed = jnp.issubdtype(lhs.dtype, jnp.signedinteger)
  r_signed = jnp.issubdtype(rhs.dtype, jnp.signedinteger)
  if l_signed == r_signed:
    return lhs.dtype if dtype_to_bits(lhs.dtype) >= dtype_to_bits(rhs.dtype) else rhs.dtype
  signed, unsigned = (lhs, rhs) if l_signed else (rhs, lhs)
  s_bits, u_bits = dtype_to_bits(signed.dtype), dtype_to_bits(unsigned.dtype)
  if u_bits < s_bits:
    return signed.dtype
  # uN needs a signed type twice as wide; u32 falls back to int32 (XLA's
  # truncation; int64 is usually disabled).
  return bits_to_dtype(u_bits * 2, signed=True) if u_bits < 32 else jnp.int32


def get_packed_shape(shape: Sequence[int], pack_dim: int, packing_factor: int):
  """`shape` with `shape[pack_dim]` divided by `packing_factor`."""
  if shape[pack_dim] % packing_factor:
    raise ValueError(
      f"cannot pack dim {pack_dim} of shape {shape} by {packing_factor}: "
      "its size is not a multiple."
    )
  return [d // packing_factor if i == pack_dim else d for i, d in enumerate(shape)]


def find_target_tpl(config, targets) -> Sequence[fdl.Config]:
  """All Configs in `config` (a Config or a sequence of them) building a `targets` class."""
  targets = tuple(targets) if hasattr(targets, "__iter__") else (targets,)
  found = []
  for node, _ in fdl.daglish.iterate(config):
    if isinstance(node, fdl.Config):
      fn = fdl.get_callable(node)
      if isinstance(fn, type) and issubclass(fn, targets):
        found.append(node)
  return found


def get_lora_shape_and_eqn(
  shape: Sequence[int], lora_size: int, eqn: str, max_reduction=True
) -> tuple[str, str, list[int], list[int], list[int], list[int]]:
  """Splits weight `shape` of einsum `eqn` into LoRA's w_left then w_right.

  The contracted dim(s) c of the weight become a new rank dim r: w_left maps
  c -> r (einsum 'x..c.., c r -> x..r..'), w_right is the weight with c
  replaced by r. With two contracted dims, max_reduction=True uses only the
  larger one; False replaces both (w_left [c1, c2, r1, r2]).

  Returns (eqn_left, eqn_right, left_shape, right_shape, lora dims in
  w_left, lora dims in w_right).
  """
  operands, out = eqn.split("->")
  lhs, rhs = operands.split(",")
  lhs_names = lhs.replace(".", "")
  offset = 3 if lhs.startswith("...") else 0
  free = [
    chr(c) for c in range(ord("a"), ord("z") + 1) if chr(c) not in lhs_names and chr(c) not in rhs
  ]
  contracted = [c for c in lhs_names if c in rhs]
  if not contracted or len(contracted) > 2:
    raise ValueError(
      f"LoRA supports one or two contracted dims; einsum {eqn!r} has {len(contracted)}."
    )
  if len(contracted) == 2 and max_reduction:
    # The larger contracted dim (first one on ties) carries the rank.
    sizes = [shape[rhs.index(c)] for c in contracted]
    contracted = [contracted[sizes.index(max(sizes))]]
  ranks = free[: len(contracted)]
  new_lhs = list(lhs)
  new_rhs = list(rhs)
  for c, r in zip(contracted, ranks):
    new_lhs[lhs_names.index(c) + offset] = r
    new_rhs[rhs.index(c)] = r
  mid = "".join(new_lhs)
  eqn_left = f"{lhs},{''.join(contracted)}{''.join(ranks)}->{mid}"
  eqn_right = f"{mid},{''.join(new_rhs)}->{out}"
  right_dims = [rhs.index(c) for c in contracted]
  left_shape = [shape[d] for d in right_dims] + [lora_size] * len(ranks)
  right_shape = list(shape)
  for d in right_dims:
    right_shape[d] = lora_size
  left_dims = [1] if len(ranks) == 1 else [2, 3]
  return eqn_left, eqn_right, left_shape, right_shape, left_dims, right_dims


def get_left_weight_split_dims_mapping(
  weight_split_dims_mapping: tuple[str | None, ...] | None,
  eqn_left_ind: list[int],
) -> tuple[str | None, ...] | None:
  """Sharding of LoRA's w_left: the weight's leading mesh axes, rank dims replicated."""
  if weight_split_dims_mapping is None:
    return None
  n = len(eqn_left_ind)
  if n not in (1, 2):
    raise ValueError(f"LoRA supports 1 or 2 rank dims; got {n}.")
  return tuple(weight_split_dims_mapping[:n]) + (None,) * n


def get_right_weight_split_dims_mapping(
  weight_split_dims_mapping: tuple[str | None, ...] | None,
  eqn_right_ind: list[int],
) -> tuple[str | None, ...] | None:
  """Sharding of LoRA's w_right: the weight's, with its rank dims replicated."""
  if weight_split_dims_mapping is None:
    return None
  out = list(weight_split_dims_mapping)
  for d in eqn_right_ind:
    out[d] = None
  return tuple(out)
