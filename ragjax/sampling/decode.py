"""One turn of decoding (or its next `steps` tokens) as a single `lax.while_loop` over the KV cache.

Each iteration samples one token for every active row from the stored next-token logits,
advances the stop-string automata, writes the token into the history and the cache (one
forward of the decoder for the whole batch; inactive rows write at the cache end, which is
dropped) and stores the new logits.  A row leaves the loop on a stop string (the tag is the
last returned token), an eos token, a full cache, or the per-turn budget; the loop ends when
no row is active or `steps` steps are done.  Stop strings and the budget pause a row (the next
`decode` resumes it, normally after an `extend`); eos and a full cache finish it.  A row still
mid-turn after `steps` steps ends the call PAUSED: its turn token count (`turn_tokens`) and
stop automata carry over, so the next call continues the same turn under the same budget.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from ragjax.models.model_config import DecoderConfig
from ragjax.sampling import sampler_config as C
from ragjax.sampling.forward import forward_into_cache
from ragjax.sampling.layout import constrain_cache, constrain_rows, constrain_state
from ragjax.sampling.sample import sample_tokens
from ragjax.sampling.state import SamplerState, TurnOutput
from ragjax.sampling.stops import MATCH, OVERHANG


def decode_turn(cfg: DecoderConfig, scfg: C.SamplerConfig, eos_ids: tuple[int, ...], params,
                stop_table: Optional[jnp.ndarray], state: SamplerState, mesh=None,
                window: Optional[int] = None, steps: Optional[int] = None,
                cpu_kernel: bool = False, top_p=None, nucleus: bool = False,
                fused: bool = False, pallas_decode: bool = False):
  """Returns (state, TurnOutput).  stop_table: [num_stops, max_len, V] int16 or None.

  `window`: cache slots to attend to; must hold every active row's length plus `steps`
  (the sampler picks it on the host; None = the whole cache).  `steps`: most tokens per row
  this call (None: the per-turn budget).  `top_p` (a traced scalar) with static `nucleus`
  replaces the config's top_p (None: the config's)."""
  if top_p is None:
    top_p, nucleus = scfg.top_p, scfg.top_p < 1.0
  b, s = state.tokens.shape
  budget = scfg.max_new_tokens
  steps = budget if steps is None else min(int(steps), budget)
  rows = jnp.arange(b)
  num_stops = 0 if stop_table is None else stop_table.shape[0]
  eos = jnp.asarray(eos_ids if eos_ids else (-1,), jnp.int32)

  # A row whose last turn ended on a stop string starts matching afresh.
  stop_state = jnp.where(jnp.any(state.stop_state < 0, axis=1, keepdims=True), 0,
                         state.stop_state)
  no_room = ~state.finished & (state.lengths >= s)
  state = state.replace(stop_state=stop_state, finished=state.finished | no_room)
  active = ~state.finished
  out = TurnOutput(
      tokens=jnp.full((b, steps), scfg.pad_id, jnp.int32),
      lengths=jnp.zeros((b,), jnp.int32),
      logprobs=jnp.zeros((b, steps), jnp.float32),
      sampling_logprobs=jnp.zeros((b, steps), jnp.float32),
      stop_reason=jnp.where(no_room, C.CACHE_FULL, C.NOT_RUN).astype(jnp.int32),
      stop_id=jnp.full((b,), -1, jnp.int32))

  def stop_lookup(stop_state, cand):
    """Next automaton codes [B, num_stops, ...] for candidate tokens cand (None = all)."""
    idx = jnp.arange(num_stops)[None, :]
    if cand is None:
      return stop_table[idx, stop_state]                                 # [B, NS, V]
    return stop_table[idx, stop_state, cand[:, None]]                    # [B, NS]

  def cond(carry):
    i, _, _, active = carry
    return (i < steps) & jnp.any(active)

  def body(carry):
    i, st, out, active = carry
    step_keys = jax.vmap(jax.random.fold_in)(st.keys, st.lengths.astype(jnp.uint32))
    banned = None
    if num_stops and scfg.forbid_stop_overhang:
      banned = jnp.any(stop_lookup(st.stop_state, None) == OVERHANG, axis=1)
    tok, lp, slp = sample_tokens(st.logits, step_keys, banned, greedy=scfg.greedy,
                                 temperature=st.temperature, top_k=scfg.top_k,
                                 top_p=top_p, nucleus=nucleus,
                                 candidates=scfg.nucleus_candidates)
    tok = constrain_rows(jnp.where(active, tok, scfg.pad_id), mesh)
    if num_stops:
      codes = stop_lookup(st.stop_state, tok).astype(jnp.int32)          # [B, NS]
      hit = codes < 0                                                   # MATCH or OVERHANG
      matched = active & jnp.any(hit, axis=1)
      stop_id = jnp.argmax(hit, axis=1).astype(jnp.int32)
      new_stop = jnp.where(active[:, None], jnp.where(hit, MATCH, codes), st.stop_state)
    else:
      matched = jnp.zeros((b,), bool)
      stop_id = jnp.full((b,), -1, jnp.int32)
      new_stop = st.stop_state
    col = jnp.where(active, out.lengths, steps)
    out = out.replace(tokens=out.tokens.at[rows, col].set(tok, mode="drop"),
                      logprobs=out.logprobs.at[rows, col].set(lp, mode="drop"),
                      sampling_logprobs=out.sampling_logprobs.at[rows, col].set(slp, mode="drop"))
    slot = jnp.where(active, st.lengths, s)
    history = st.tokens.at[rows, slot].set(tok, mode="drop")
    cache, logits = forward_into_cache(cfg, params, st.cache, tok[:, None], slot,
                                       jnp.zeros((b,), jnp.int32), window=window,
                                       cpu_kernel=cpu_kernel, fused=fused,
                                       pallas_decode=pallas_decode)
    cache = constrain_cache(cache, mesh)
    lengths = st.lengths + active
    n_new = out.lengths + active
    in_turn = st.turn_tokens + active
    is_eos = active & jnp.any(tok[:, None] == eos[None, :], axis=1) & ~matched
    full = active & (lengths >= s) & ~matched & ~is_eos
    spent = active & (in_turn >= budget) & ~matched & ~is_eos & ~full
    ended = matched | is_eos | full | spent
    reason = jnp.select([matched, is_eos, full, spent],
                        [C.STOP, C.EOS, C.CACHE_FULL, C.BUDGET], out.stop_reason)
    out = out.replace(lengths=n_new, stop_reason=reason.astype(jnp.int32),
                      stop_id=jnp.where(matched, stop_id, out.stop_id))
    st = st.replace(cache=cache, tokens=history, lengths=lengths,
                    logits=jnp.where(active[:, None], logits, st.logits),
                    finished=st.finished | is_eos | full, stop_state=new_stop,
                    turn_tokens=jnp.where(ended, 0, in_turn))
    st = constrain_state(st, mesh)
    return i + 1, st, out, active & ~ended

  _, state, out, active = jax.lax.while_loop(cond, body, (jnp.int32(0), state, out, active))
  out = out.replace(stop_reason=jnp.where(active, C.PAUSED, out.stop_reason).astype(jnp.int32))
  return state, out
