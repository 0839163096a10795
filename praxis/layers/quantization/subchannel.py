"""Shapes for per-channel and sub-channel (block-wise) quantization scales.

Exposed as praxis.layers.quantization.operations.{get_scale_shape,
get_sub_channel_shape, compute_shape_with_subchannels}.
"""

from __future__ import annotations

from typing import Sequence

from absl import logging
import numpy as np


def get_scale_shape(weight_shape: Sequence[int], contract_dims: Sequence[int]) -> Sequence[int]:
  """Shape of a per-channel scale: `weight_shape` without its contracted dims."""
  return [d for i, d in enumerate(weight_shape) if i not in contract_dims]


def get_sub_channel_shape(
  shape: Sequence[int],
  block_size: int,
  contract_dims: Sequence[int],
  insert_sub_channel: bool = True,
  error_on_misaligned_shape: bool = False,
) -> tuple[Sequence[int], Sequence[int]]:
  """Splits the largest contracted dim into blocks of `block_size` (arXiv:2305.16619).

  insert_sub_channel=True: that dim n becomes [n / block_size, block_size]
  (a new, non-contracted dim holding the block index; later contracted dims
  shift by one). False: it becomes block_size and the first feature dim grows
  by n / block_size. block_size <= 0, >= n, or not dividing n (unless
  error_on_misaligned_shape) leaves the shape as it is.

  Returns (new shape, new contract_dims).
  """
  dims = list(contract_dims)
  new_shape = list(shape)
  if block_size <= 0:
    return new_shape, dims
  pos = int(np.argmax([shape[d] for d in dims]))
  axis = dims[pos]
  if block_size >= shape[axis]:
    logging.warning(
      "block_size %d is not below the largest contracted dim of shape %s "
      "(contract dims %s): no sub-channels.",
      block_size,
      shape,
      dims,
    )
    return new_shape, dims
  blocks, rem = divmod(shape[axis], block_size)
  if rem:
    msg = (
      f"block_size {block_size} does not divide dim {axis} of shape "
      f"{list(shape)} (contract dims {list(contract_dims)})"
    )
    if error_on_misaligned_shape:
      raise ValueError(msg + "; pick a block_size that divides it.")
    logging.warning("%s: no sub-channels.", msg)
    return new_shape, dims
  new_shape[axis] = block_size
  if insert_sub_channel:
    new_shape.insert(axis, blocks)
    dims = dims[:pos] + [d + 1 for d in dims[pos:]]
  else:
    feature = [i for i in range(len(shape)) if i not in contract_dims]
    new_shape[feature[0]] *= blocks
  return new_shape, dims


def compute_shape_with_subchannels(
  sub_channels: int,
  inputs_shape: Sequence[int],
  contract_dims: Sequence[int],
  min_sub_channel_size: int = -1,
) -> list[int]:
  """Halves the largest contracted dim (doubling the first feature dim) log2(sub_channels) times.

  Stops early when that dim is odd or would fall below min_sub_channel_size.
  """
  shape = list(inputs_shape)
  feature = [i for i in range(len(shape)) if i not in contract_dims]
  largest, size = 0, 0
  for d in contract_dims:
    if shape[d] and shape[d] > size:
      largest, size = d, shape[d]
  if size < sub_channels:
    raise ValueError(
      f"sub_channels={sub_channels} exceeds the largest contracted dim "
      f"({size}) of shape {list(inputs_shape)}."
    )
  left = sub_channels
  while left > 1:
    half = shape[largest] // 2
    if half * 2 != shape[largest] or half < min_sub_channel_size:
      break
    shape[largest] = half
    shape[feature[0]] *= 2
    left /= 2
  return shape
