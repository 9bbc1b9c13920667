"""Running tokens through the decoder into the KV cache and reading next-token logits.

Only the hidden state of each row's last new token is projected onto the vocabulary, so a
prefill of T tokens costs one [B, E] x [E, V] product instead of [B, T, V].
"""

from __future__ import annotations

from typing import Optional

import jax.numpy as jnp

from ragjax.models.model_config import DecoderConfig, as_dtype
from ragjax.models.decoder import Decoder, unembedding


def forward_into_cache(cfg: DecoderConfig, params, cache, tokens, starts, last_index,
                       window: Optional[int] = None, attention_rows: int = 0,
                       cpu_kernel: bool = False, fused: bool = False,
                       pallas_decode: bool = False):
  """tokens [B, T] go to slots starts[b].. (writes past the cache end are dropped).

  `window`: attend to the first `window` slots only (every live row must end below it).
  `attention_rows`, `cpu_kernel`: see `Decoder` (how the cached attention is computed);
  `fused`: `params` are in ragjax.models.fused's layout; `pallas_decode`: one-token
  attention in ragjax.models.pallas_decode's kernel.
  Returns (new cache, float32 logits [B, V] after token `last_index[b]` of each row).
  """
  hidden, cache = Decoder(cfg, attend_length=window, attention_rows=attention_rows,
                      cpu_kernel=cpu_kernel, fused=fused,
                      pallas_decode=pallas_decode).apply(
      {"params": params}, tokens, cache=cache, cache_start=starts, return_hidden=True)
  b = tokens.shape[0]
  h = hidden[jnp.arange(b), last_index]                                   # [B, E]
  dt = as_dtype(cfg.dtype)
  w = unembedding(cfg, params).astype(dt)
  logits = jnp.dot(h.astype(dt), w, preferred_element_type=jnp.float32)
  return cache, logits.astype(jnp.float32)
