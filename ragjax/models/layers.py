"""Building blocks shared by the decoder: RMSNorm, rotary embeddings, logical initialisers."""

from __future__ import annotations

import math
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from ragjax.models.model_config import RopeScaling


def logical_init(init_fn, axes: tuple):
  """An initialiser whose params carry logical axis names for the sharding rules."""
  return nn.with_logical_partitioning(init_fn, axes)


class RMSNorm(nn.Module):
  """RMSNorm computed in float32, scaled after casting back (as HF Llama/Qwen2 do)."""
  eps: float = 1e-6
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    scale = self.param("scale", logical_init(nn.initializers.ones, ("norm",)),
                       (x.shape[-1],), self.param_dtype)
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
    return scale.astype(self.dtype) * y.astype(self.dtype)


def rope_inv_freq(head_dim: int, theta: float, scaling: Optional[RopeScaling]) -> jnp.ndarray:
  """Inverse frequencies, with Llama-3.1's piecewise scaling when `scaling` is set."""
  inv = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
  if scaling is None:
    return inv
  old = scaling.original_max_position_embeddings
  low_wavelen = old / scaling.low_freq_factor
  high_wavelen = old / scaling.high_freq_factor
  wavelen = 2 * math.pi / inv
  scaled = jnp.where(wavelen > low_wavelen, inv / scaling.factor, inv)
  smooth = (old / wavelen - scaling.low_freq_factor) / (
      scaling.high_freq_factor - scaling.low_freq_factor)
  smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
  medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
  return jnp.where(medium, smoothed, scaled)


def rope_tables(positions: jnp.ndarray, inv_freq: jnp.ndarray, dtype) -> tuple:
  """(cos, sin) [B, T, 1, D] in `dtype` for per-token positions [B, T]: built once per
  forward and handed to every layer (XLA may still recompute them inside each layer's rope
  fusion, where they are cheap, rather than read them)."""
  freqs = positions.astype(jnp.float32)[..., None] * inv_freq          # [B, T, D/2]
  emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]        # [B, T, 1, D]
  return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)


def rotate(x: jnp.ndarray, rope: tuple) -> jnp.ndarray:
  """Rotates x [B, T, heads, D] by `rope_tables` (half-split convention)."""
  cos, sin = rope
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  return x * cos + rotated * sin

