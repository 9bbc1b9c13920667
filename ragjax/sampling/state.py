"""The sampler's device state and one turn's output, as typed pytrees.

`SamplerState` holds everything a row needs to continue: its KV cache, its token history,
its length (the next free slot, which is also the next position), the next-token logits, a
finished flag, the stop-string automaton states, the tokens decoded so far in its current turn
(a turn may span several step-capped `decode` calls), a PRNG key and its sampling temperature.  Rows are independent, so after
tool turns they sit at different lengths.  Every array has the batch on axis 0 except the
cache, whose layout (stacked `[L, B, S, KVH, D]` or L arrays `[B, KVH, S, D]`) follows
`ragjax.models.kv_cache`.
"""

from __future__ import annotations

import flax.struct
import jax.numpy as jnp
import numpy as np


@flax.struct.dataclass
class SamplerState:
  cache: dict            # {"k", "v"}: see ragjax.models.kv_cache
  tokens: jnp.ndarray    # [B, S] int32, the row's history (prompt, generated, appended)
  lengths: jnp.ndarray   # [B] int32, tokens in the cache; the next token goes at this slot
  logits: jnp.ndarray    # [B, V] float32, next-token logits after `lengths` tokens
  finished: jnp.ndarray  # [B] bool, no more decoding (eos, cache full, set_done)
  stop_state: jnp.ndarray  # [B, num_stops] int32, automaton state per stop string
  keys: jnp.ndarray      # [B, 2] uint32, per-row PRNG key; step keys fold in the length
  temperature: jnp.ndarray  # [B] float32, the row's sampling temperature (a per-sample ladder)
  turn_tokens: jnp.ndarray  # [B] int32, tokens decoded in the current turn (0 between turns)

  @property
  def batch_size(self) -> int:
    return self.tokens.shape[0]

  @property
  def cache_length(self) -> int:
    return self.tokens.shape[1]

  def history(self, row: int) -> list[int]:
    """Row's tokens so far (host copy)."""
    n = int(np.asarray(self.lengths)[row])
    return np.asarray(self.tokens)[row, :n].tolist()


@flax.struct.dataclass
class TurnOutput:
  """What one `decode` call produced, padded to its step count (the per-turn budget unless
  the call was step-capped; a row still mid-turn then has stop_reason PAUSED).

  `logprobs` are under the model's temperature-scaled full-vocabulary distribution (what the
  trainer recomputes; temperature 1 for greedy); `sampling_logprobs` are under the distribution
  actually sampled from after top-k, top-p and the stop-overhang mask (equal to `logprobs`
  when nothing is truncated; 0 for greedy).  `stop_id` is the index of the stop string that
  matched, -1 otherwise.
  """
  tokens: jnp.ndarray             # [B, steps] int32, pad after `lengths`
  lengths: jnp.ndarray            # [B] int32, tokens produced by this call
  logprobs: jnp.ndarray           # [B, steps] float32, 0 after `lengths`
  sampling_logprobs: jnp.ndarray  # [B, steps] float32
  stop_reason: jnp.ndarray        # [B] int32, see ragjax.sampling.sampler_config
  stop_id: jnp.ndarray            # [B] int32

  def token_lists(self) -> list[list[int]]:
    toks, lens = np.asarray(self.tokens), np.asarray(self.lengths)
    return [toks[b, :lens[b]].tolist() for b in range(toks.shape[0])]
