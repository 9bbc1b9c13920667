"""Policy wrappers the rollout benchmark measures the engine through.

* `TimedPolicy` delegates every `ragjax.rollout.policy.Policy` call to a `Sampler`, waits for
  the result, and books its wall time and the model positions it computed (padded batch x
  width, what the device really runs) and the real tokens it fed, by kind: prefill, decode,
  extend, other (set_done, truncate, clone); a refill (continuous batching) is booked as
  prefill.
* `RePrefillPolicy` is the engine's design without extend: observations are kept on the host,
  and every `decode` re-prefills each live row's whole history (prompt, every turn, every
  document) into a fresh cache before decoding, as a loop without prefix caching does
  (Search-R1's verl loop, Tunix's re-tokenised chat).  Live rows only are prefilled, packed
  into a batch of their own, and padded to the sampler's prompt buckets (in prefills of at
  most `rows_per_prefill` rows when set: the full-history prefill of a large batch can exceed
  device memory where extending the same batch does not).  Greedy decoding gives the engine's
  tokens (the PRNG keys of sampled decoding differ).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ragjax.models import kv_cache
from ragjax.parallel.buckets import pick_bucket
from ragjax.sampling.sampler_config import CACHE_FULL, EOS, NOT_RUN
from ragjax.sampling.state import TurnOutput

KINDS = ("prefill", "decode", "extend", "other")


class TimedPolicy:
  """A `Sampler` with every call timed to completion; see the module docstring."""

  def __init__(self, sampler):
    self.sampler = sampler
    self.eos_ids, self.stop_strings = sampler.eos_ids, sampler.stop_strings
    self.max_extend = sampler.max_extend
    self.reset()

  def reset(self):
    self.seconds = collections.Counter({k: 0.0 for k in KINDS})
    self.positions = collections.Counter({k: 0 for k in KINDS})
    self.tokens = collections.Counter({k: 0 for k in KINDS})

  def _run(self, kind, fn, *args, **kw):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kw))
    self.seconds[kind] += time.perf_counter() - t0
    return out

  def prefill(self, prompts, samples_per_prompt=1, seed=0, first_row=0):
    state = self._run("prefill", self.sampler.prefill, prompts, samples_per_prompt, seed,
                      first_row=first_row)
    width = max(pick_bucket(self.sampler.config.prompt_buckets, len(p), "prompt") for p in prompts)
    self.positions["prefill"] += len(prompts) * width
    self.tokens["prefill"] += sum(len(p) for p in prompts)
    return state

  chunked_decode = True

  def decode(self, state, steps=None):
    state, out = self._run("decode", self.sampler.decode, state, steps)
    lens = np.asarray(out.lengths)
    self.positions["decode"] += int(lens.max(initial=0)) * len(lens)   # every row, every step
    self.tokens["decode"] += int(lens.sum())
    return state, out

  def extend(self, state, rows, token_lists):
    state = self._run("extend", self.sampler.extend, state, rows, token_lists)
    width = max(pick_bucket(self.sampler.config.extend_buckets, len(t), "observation")
                for t in token_lists)
    self.positions["extend"] += self.sampler.extend_rows_run(state.batch_size,
                                                             len(token_lists)) * width
    self.tokens["extend"] += sum(len(t) for t in token_lists)
    return state

  def refill(self, state, rows, prompts, samples_per_prompt=1, seed=0, first_row=0):
    state = self._run("prefill", self.sampler.refill, state, rows, prompts, samples_per_prompt,
                      seed, first_row)
    width = max(pick_bucket(self.sampler.config.prompt_buckets, len(p), "prompt") for p in prompts)
    self.positions["prefill"] += len(prompts) * width
    self.tokens["prefill"] += sum(len(p) for p in prompts)
    return state

  def set_done(self, state, rows):
    return self._run("other", self.sampler.set_done, state, rows)

  def clone_rows(self, state, src_rows, dst_rows):
    return self._run("other", self.sampler.clone_rows, state, src_rows, dst_rows)

  def truncate(self, state, rows, new_lengths):
    self.positions["other"] += state.batch_size
    return self._run("other", self.sampler.truncate, state, rows, new_lengths)

  def set_params(self, params):
    self.sampler.set_params(params)


@dataclasses.dataclass
class Histories:
  """RePrefillPolicy's state: each row's token history on the host, and its done flag."""
  tokens: list
  done: list
  cache_length: int

  @property
  def batch_size(self) -> int:
    return len(self.tokens)


class RePrefillPolicy:
  """The engine's Policy with extend replaced by re-prefilling; see the module docstring.
  `sampler` is a `Sampler` or a `TimedPolicy` over one (then its prefill time is booked)."""

  max_extend = None

  def __init__(self, sampler, seed: int = 0, rows_per_prefill: int = 0):
    self.sampler = sampler
    self.rows_per_prefill = rows_per_prefill
    self.eos_ids, self.stop_strings = sampler.eos_ids, sampler.stop_strings
    inner = getattr(sampler, "sampler", sampler)
    self.cache_length = inner.config.max_cache_length
    self.budget = inner.config.max_new_tokens
    self.seed = seed

  def prefill(self, prompts: Sequence[Sequence[int]], samples_per_prompt: int = 1,
              seed: int = 0, first_row: int = 0) -> Histories:
    """Greedy loops only (the benchmark's): every turn re-prefills, so `first_row` (the
    sampling keys' offset) changes nothing."""
    self.seed = seed
    rows = [list(p) for p in prompts for _ in range(samples_per_prompt)]
    return Histories(rows, [False] * len(rows), self.cache_length)

  def decode(self, state: Histories):
    b, budget = state.batch_size, self.budget
    tokens = np.zeros((b, budget), np.int32)
    lengths = np.zeros((b,), np.int32)
    logprobs = np.zeros((b, budget), np.float32)
    reasons = np.full((b,), NOT_RUN, np.int32)
    stop_id = np.full((b,), -1, np.int32)
    live = [r for r in range(b) if not state.done[r]]
    if live:
      histories = [state.tokens[r] for r in live]
      step = self.rows_per_prefill or len(live)
      inner = concat_states([self.sampler.prefill(histories[i:i + step], 1, self.seed)
                             for i in range(0, len(live), step)])
      _, out = self.sampler.decode(inner)
      o_tok, o_len = np.asarray(out.tokens), np.asarray(out.lengths)
      o_lp, o_reason, o_stop = (np.asarray(out.logprobs), np.asarray(out.stop_reason),
                                np.asarray(out.stop_id))
      for i, r in enumerate(live):
        tokens[r], lengths[r], logprobs[r] = o_tok[i], o_len[i], o_lp[i]
        reasons[r], stop_id[r] = o_reason[i], o_stop[i]
        state.tokens[r].extend(o_tok[i, :o_len[i]].tolist())
        if o_reason[i] in (EOS, CACHE_FULL):
          state.done[r] = True
    return state, TurnOutput(tokens=tokens, lengths=lengths, logprobs=logprobs,
                             sampling_logprobs=np.zeros_like(logprobs), stop_reason=reasons,
                             stop_id=stop_id)

  def extend(self, state: Histories, rows, token_lists) -> Histories:
    for r, toks in zip(rows, token_lists):
      if len(state.tokens[r]) + len(toks) > self.cache_length:
        raise ValueError(f"extend: row {r} holds {len(state.tokens[r])} tokens; {len(toks)} more "
                         f"exceed the cache length {self.cache_length}")
      state.tokens[r].extend(int(t) for t in toks)
      state.done[r] = False
    return state

  def set_done(self, state: Histories, rows) -> Histories:
    for r in rows:
      state.done[r] = True
    return state

  def clone_rows(self, state: Histories, src_rows, dst_rows) -> Histories:
    for s, d in zip(src_rows, dst_rows):
      state.tokens[d], state.done[d] = list(state.tokens[s]), state.done[s]
    return state

  def truncate(self, state: Histories, rows, new_lengths) -> Histories:
    for r, n in zip(rows, new_lengths):
      del state.tokens[r][n:]
      state.done[r] = False
    return state

  def set_params(self, params) -> None:
    self.sampler.set_params(params)


def concat_states(states):
  """One sampler state holding the rows of `states` in order."""
  if len(states) == 1:
    return states[0]
  first = states[0]
  cache = kv_cache.concat_rows([s.cache for s in states])
  rows = {f: jnp.concatenate([getattr(s, f) for s in states], axis=0)
          for f in ("tokens", "lengths", "logits", "finished", "stop_state", "keys",
                    "temperature", "turn_tokens")}
  return first.replace(cache=cache, **rows)
