"""Row-state edits the multi-turn methods need: clone, truncate, place, mark rows done.

REX-RAG clones a wrong trajectory, cuts it back before its answer and inserts a probe prompt;
these functions do that on the cache in place of re-prefilling.  `place` puts freshly
prefilled prompts into rows that finished (continuous batching).  `take` and `put` cut a few
rows out of the batch and write them back (an extend of a few rows runs on those rows only).  All take whole-batch index
or mask arrays so their shapes never change between calls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ragjax.models.model_config import DecoderConfig
from ragjax.models.kv_cache import put_rows, take_rows
from ragjax.sampling.forward import forward_into_cache
from ragjax.sampling.layout import constrain_state
from ragjax.sampling.state import SamplerState


def clone(state: SamplerState, source, mesh=None) -> SamplerState:
  """Row b becomes a copy of row source[b] (cache, history, length, logits, flags).

  A copied row gets a fresh key (its source key folded with its own index), so clones sample
  differently from their source.
  """
  b = state.tokens.shape[0]
  rows = jnp.arange(b)
  take = lambda x: jnp.take(x, source, axis=0)
  keys = take(state.keys)
  fresh = jax.vmap(jax.random.fold_in)(keys, rows.astype(jnp.uint32))
  state = state.replace(
      cache=take_rows(state.cache, source),
      tokens=take(state.tokens), lengths=take(state.lengths), logits=take(state.logits),
      finished=take(state.finished), stop_state=take(state.stop_state),
      temperature=take(state.temperature), turn_tokens=take(state.turn_tokens),
      keys=jnp.where((source != rows)[:, None], fresh, keys))
  return constrain_state(state, mesh)


def truncate(cfg: DecoderConfig, params, state: SamplerState, new_lengths, chosen,
             mesh=None, cpu_kernel: bool = False, fused: bool = False) -> SamplerState:
  """Moves chosen rows back to new_lengths (>= 1) and recomputes their next-token logits.

  The last kept token is run through the model again at its own slot (its K/V are rewritten
  with the same values) to get the logits; the dropped span stays in the cache as dead slots
  that later tokens overwrite.  Truncated rows are reopened and their stop automata reset.
  """
  b, s = state.tokens.shape
  lengths = jnp.where(chosen, new_lengths, state.lengths)
  last = jnp.take_along_axis(state.tokens, jnp.maximum(lengths - 1, 0)[:, None], axis=1)
  starts = jnp.where(chosen, lengths - 1, s)
  cache, logits = forward_into_cache(cfg, params, state.cache, last, starts,
                                     jnp.zeros((b,), jnp.int32), cpu_kernel=cpu_kernel,
                                     fused=fused)
  state = state.replace(
      cache=cache, lengths=lengths, logits=jnp.where(chosen[:, None], logits, state.logits),
      finished=state.finished & ~chosen,
      stop_state=jnp.where(chosen[:, None], 0, state.stop_state),
      turn_tokens=jnp.where(chosen, 0, state.turn_tokens))
  return constrain_state(state, mesh)


def place(state: SamplerState, fresh: SamplerState, dst, src, batch_rows, seed, temperature,
          mesh=None) -> SamplerState:
  """Row dst[i] becomes a new sample of fresh row src[i] (a prefilled prompt, whose cache may
  be narrower than the state's: only its slots are written): its cache, history, length and
  logits, a clean stop automaton, key fold_in(PRNGKey(seed),
  batch_rows[i]) (the key it has in one big prefill: `prefill`'s rule) and temperature[i].
  dst[i] == batch size is dropped (padding)."""
  w = fresh.tokens.shape[1]              # the prompts' cache width (slots past it are dead)
  put = lambda x, y: x.at[dst].set(jnp.take(y, src, axis=0), mode="drop")
  base = jax.random.PRNGKey(seed)
  keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(batch_rows)
  state = state.replace(
      cache=put_rows(state.cache, dst, fresh.cache, src),
      tokens=state.tokens.at[dst, :w].set(jnp.take(fresh.tokens, src, axis=0), mode="drop"),
      lengths=put(state.lengths, fresh.lengths),
      logits=put(state.logits, fresh.logits),
      finished=state.finished.at[dst].set(False, mode="drop"),
      stop_state=state.stop_state.at[dst].set(0, mode="drop"),
      keys=state.keys.at[dst].set(keys, mode="drop"),
      temperature=state.temperature.at[dst].set(temperature, mode="drop"),
      turn_tokens=state.turn_tokens.at[dst].set(0, mode="drop"))
  return constrain_state(state, mesh)


def take(state: SamplerState, rows) -> SamplerState:
  """A smaller state whose row i is a copy of row rows[i] (keys included)."""
  return jax.tree.map(lambda x: jnp.take(x, rows, axis=0), state.replace(cache=None)).replace(
      cache=take_rows(state.cache, rows))


def put(state: SamplerState, dst, part: SamplerState) -> SamplerState:
  """Row dst[i] of the state becomes row i of `part` (a `take` of it, edited); dst[i] ==
  batch size is dropped."""
  src = jnp.arange(part.tokens.shape[0])
  rest = jax.tree.map(lambda x, y: x.at[dst].set(y, mode="drop"),
                      state.replace(cache=None), part.replace(cache=None))
  return rest.replace(cache=put_rows(state.cache, dst, part.cache, src))


def set_done(state: SamplerState, chosen) -> SamplerState:
  return state.replace(finished=state.finished | chosen)


def reseed(state: SamplerState, chosen, salts) -> SamplerState:
  """Chosen rows' keys folded with their salt: the same history then samples anew (a format
  retry regenerates a turn from the same prefix; the step keys fold in only the length)."""
  fresh = jax.vmap(jax.random.fold_in)(state.keys, salts.astype(jnp.uint32))
  return state.replace(keys=jnp.where(chosen[:, None], fresh, state.keys))
