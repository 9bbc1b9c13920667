"""A decode step's attention as one Pallas kernel per (row, KV head), over the row's own length.

XLA computes a decode step's attention as a batched score product, a softmax (several
reductions) and a batched mix product: on an accelerator three to five kernels per layer, each
over the whole attention window.  JAX's Pallas decode attention
(`jax.experimental.pallas.ops.gpu.decode_attention.gqa`, Triton on NVIDIA GPUs; split over
the window in `k_splits` parts, combined after) does it in one kernel that reads each row's
keys and values only up to that row's length.  On CPU it runs in Pallas' interpret mode
(what the tests check it with; slow, never a CPU default).

`supported(slots)` says whether a cache of that many slots fits the kernel's blocking (a power
of two of at least 64: the sampler's attention windows are).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def supported(slots: int) -> bool:
  return slots >= 64 and slots & (slots - 1) == 0


def splits(slots: int) -> int:
  """Parts the window is split into (more programs for short batches; each part >= 256)."""
  return max(1, min(16, slots // 256))


def decode_attention(q, keys, values, lengths):
  """q [B, H, D] (one query per row), keys / values heads-major [B, KVH, S, D], lengths [B]
  (row b attends slots < lengths[b]) -> [B, H, D] in q's dtype."""
  from jax.experimental.pallas.ops.gpu import decode_attention as pallas_ops
  s, d = keys.shape[2], keys.shape[3]
  if not supported(s):
    raise ValueError(f"the Pallas decode attention needs a power-of-two window of >= 64 "
                     f"slots, got {s}")
  k = splits(s)
  # The library takes [B, S, KVH, D] and swaps to heads-major itself: the two swaps cancel.
  return pallas_ops.gqa(q, keys.swapaxes(1, 2), values.swapaxes(1, 2),
                        kv_seq_len=jnp.minimum(lengths, s).astype(jnp.int32),
                        sm_scale=1.0 / d ** 0.5, k_splits=k, block_k=min(64, s // k),
                        interpret=jax.default_backend() == "cpu")
