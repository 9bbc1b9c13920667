"""Pure functions that put given tokens into the cache: prompt prefill and observation extend.

Prompts arrive right-padded to a bucket; row p's true length n_p means its next token goes at
slot n_p (pad slots are overwritten before anything attends to them).  The G samples of a
prompt share one prefill: the prompt's cache, history and logits are repeated G times.
With a shared `prefix` (the tokens every prompt starts with, e.g. an instruction and a worked
example), the prefix runs once, its cache is copied to every prompt's row, and only each
prompt's own tail runs after it (exact: causal attention over the same keys and values; the
sums differ from one long forward only in rounding).
Extend appends observation tokens to chosen rows at their own lengths; the rest of the batch
writes nothing (its start slot is the cache end, where writes are dropped).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ragjax.models.model_config import DecoderConfig
from ragjax.models.kv_cache import init_cache, repeat_rows
from ragjax.sampling.forward import forward_into_cache
from ragjax.sampling.layout import (attention_rows, constrain_cache, constrain_rows,
                                    constrain_state)
from ragjax.sampling.state import SamplerState


def prefill(cfg: DecoderConfig, params, tokens, lengths, seed, temperature, *, samples: int,
            cache_length: int, cache_dtype: str, num_stops: int, mesh=None,
            first_row=0, row_ids=None, cache_width=None, cpu_kernel: bool = False,
            fused: bool = False, prefix=None) -> SamplerState:
  """tokens [P, T] right-padded, lengths [P] -> a state of P * samples rows (prompt-major);
  with `prefix` [1, T0] (no padding), row p's prompt is prefix + tokens[p] and lengths count
  the prefix (every length > T0);
  `temperature` [P * samples] is each row's sampling temperature; row b's key is
  fold_in(PRNGKey(seed), row_ids[b]), by default row_ids[b] = first_row + b.  Histories hold
  `cache_length` tokens; the KV cache `cache_width` slots (>= T; default `cache_length`),
  grown later as rows need."""
  p, t = tokens.shape
  width = cache_width or cache_length
  run = lambda cache, toks, starts, last, window: forward_into_cache(
      cfg, params, cache, toks, starts, last, window=window, attention_rows=attention_rows(mesh),
      cpu_kernel=cpu_kernel, fused=fused)
  if prefix is None:
    cache = constrain_cache(init_cache(cfg, p, width, cache_dtype), mesh)
    cache, logits = run(cache, tokens, jnp.zeros((p,), jnp.int32), lengths - 1, t)
    history = jnp.zeros((p, cache_length), jnp.int32).at[:, :t].set(tokens)
  else:
    t0 = prefix.shape[1]
    shared, _ = run(init_cache(cfg, 1, width, cache_dtype), prefix, jnp.zeros((1,), jnp.int32),
                    jnp.full((1,), t0 - 1, jnp.int32), t0)
    cache = constrain_cache(repeat_rows(shared, p), mesh)
    cache, logits = run(cache, tokens, jnp.full((p,), t0, jnp.int32), lengths - t0 - 1, t0 + t)
    history = (jnp.zeros((p, cache_length), jnp.int32).at[:, :t0].set(prefix)
               .at[:, t0:t0 + t].set(tokens))
  rep = lambda x: jnp.repeat(x, samples, axis=0)
  cache = repeat_rows(cache, samples)
  b = p * samples
  base = jax.random.PRNGKey(seed)
  if row_ids is None:
    row_ids = jnp.asarray(first_row, jnp.uint32) + jnp.arange(b, dtype=jnp.uint32)
  keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(row_ids, jnp.uint32))
  state = SamplerState(cache=cache, tokens=rep(history), lengths=rep(lengths).astype(jnp.int32),
                       logits=rep(logits), finished=jnp.zeros((b,), bool),
                       stop_state=jnp.zeros((b, num_stops), jnp.int32), keys=keys,
                       temperature=jnp.asarray(temperature, jnp.float32),
                       turn_tokens=jnp.zeros((b,), jnp.int32))
  return constrain_state(state, mesh)


def extend(cfg: DecoderConfig, params, state: SamplerState, tokens, counts,
           mesh=None, window=None, cpu_kernel: bool = False, fused: bool = False) -> SamplerState:
  """Appends tokens[b, :counts[b]] to every row with counts[b] > 0; reopens those rows.

  `window`: cache slots to attend to; must exceed every extended row's new last slot."""
  b, s = state.tokens.shape
  t = tokens.shape[1]
  tokens, counts = constrain_rows(tokens, mesh), constrain_rows(counts, mesh)
  chosen = counts > 0
  starts = jnp.where(chosen, state.lengths, s)
  cache, logits = forward_into_cache(cfg, params, state.cache, tokens, starts,
                                     jnp.maximum(counts - 1, 0), window=window,
                                     attention_rows=attention_rows(mesh), cpu_kernel=cpu_kernel,
                                     fused=fused)
  cols = state.lengths[:, None] + jnp.arange(t)[None, :]
  cols = jnp.where(jnp.arange(t)[None, :] < counts[:, None], cols, s)     # pad: dropped
  history = state.tokens.at[jnp.arange(b)[:, None], cols].set(tokens, mode="drop")
  state = state.replace(
      cache=cache, tokens=history, lengths=state.lengths + counts,
      logits=jnp.where(chosen[:, None], logits, state.logits),
      finished=state.finished & ~chosen,
      stop_state=jnp.where(chosen[:, None], 0, state.stop_state),
      turn_tokens=jnp.where(chosen, 0, state.turn_tokens))
  return constrain_state(state, mesh)
