"""Speech-recognition networks in flax.linen (bobbin's `example_lib.asrnn`).

A log-mel frontend, SpecAugment, a CNN subsampler, Conformer blocks and the
CNN + Conformer encoder of bobbin's LibriSpeech example, a BatchNorm that
skips padded frames, and AdamW with update clipping. Module names, fields,
defaults and variable trees are bobbin's, so bobbin's configurations and
checkpoints carry over.

The networks live in `asr_frontend` (LogMelFilterBank, SpecAug, CnnEncoder)
and `conformer` (the Conformer blocks and CnnConformerEncoder); this module,
bobbin's name for all of them, re-exports them beside AdamW with clipping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optax

# bobbin's names, from the modules that hold them now.
from paxml.toolkit.example_lib.asr_frontend import CnnEncoder  # noqa: F401
from paxml.toolkit.example_lib.asr_frontend import LogMelFilterBank  # noqa: F401
from paxml.toolkit.example_lib.asr_frontend import PaddedBatchNorm  # noqa: F401
from paxml.toolkit.example_lib.asr_frontend import SpecAug  # noqa: F401
from paxml.toolkit.example_lib.conformer import CnnConformerEncoder  # noqa: F401
from paxml.toolkit.example_lib.conformer import ConformerBlock  # noqa: F401
from paxml.toolkit.example_lib.conformer import ConformerConvBlock  # noqa: F401
from paxml.toolkit.example_lib.conformer import ConformerFfnBlock  # noqa: F401
from paxml.toolkit.example_lib.conformer import ConformerMhsaBlock  # noqa: F401
from paxml.toolkit.example_lib.conformer import sinusoidal_positional_embeddings  # noqa: F401

Array = Any


def adamw_with_clipping(
  learning_rate: float | optax.Schedule,
  b1: float = 0.9,
  b2: float = 0.999,
  eps: float = 1e-8,
  eps_root: float = 0.0,
  mu_dtype: Any | None = None,
  weight_decay: float = 1e-4,
  mask: Any | Callable[[Any], Any] | None = None,
  l2_penalty: float = 0.0,
  block_update_rms_threshold: float | None = 1.0,
  global_gradient_norm_threshold: float | None = 5.0,
) -> optax.GradientTransformation:
  """`optax.adamw` with clipping before the learning rate is applied.

  The chain: L2 penalty on the raw gradient (`l2_penalty`, a regularizer
  unlike weight decay), clip the raw gradient to global norm
  `global_gradient_norm_threshold`, Adam scaling, clip each leaf's Adam
  update to RMS `block_update_rms_threshold`, decoupled weight decay, times
  -learning_rate. A threshold of None leaves that clipping out.

  Args:
    learning_rate: a constant or an optax schedule.
    b1, b2, eps, eps_root, mu_dtype: `optax.scale_by_adam`'s.
    weight_decay, mask: `optax.add_decayed_weights`'s (mask also for the L2 penalty).
    l2_penalty: coefficient of the L2 term added to the gradient.
    block_update_rms_threshold: the per-leaf update RMS bound.
    global_gradient_norm_threshold: the raw gradient's global-norm bound.
  """
  schedule = learning_rate if callable(learning_rate) else (lambda count: learning_rate)
  parts = []
  if l2_penalty:
    parts.append(optax.add_decayed_weights(l2_penalty, mask))
  if global_gradient_norm_threshold is not None:
    parts.append(optax.clip_by_global_norm(global_gradient_norm_threshold))
  parts.append(optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype))
  if block_update_rms_threshold is not None:
    parts.append(optax.clip_by_block_rms(block_update_rms_threshold))
  parts.append(optax.add_decayed_weights(weight_decay, mask))
  parts.append(optax.scale_by_schedule(lambda count: -schedule(count)))
  return optax.chain(*parts)
