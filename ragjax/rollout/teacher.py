"""A teacher-forced policy with the sampler's API: SFT traces through the real rollout engine.

Cold-start SFT data (R3-RAG's recipe) must look exactly like what the RL rollouts produce:
the same prompt, the same observation formatting, the same labels.  Driving the real engine
with a policy that *emits given text* instead of sampling gives that for free, with real
retrieval results in the observations.  Row r emits `scripts[r][i]` on its i-th decode; like
the sampler it stops after the token that completes a stop string, on eos or when the cache
is full.  A script that runs out emits eos.  A turn may be a function of the row's text so far
(prompt and observations, decoded) returning the turn's text: a turn that reads the passages
the search before it returned (AutoRefine's `<refine>` block, `ragjax.rl.search_traces`).
`ragjax.rl.teacher_traces` runs it through the engine to make SFT traces.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from ragjax.sampling.sampler_config import BUDGET, CACHE_FULL, EOS, NOT_RUN, STOP
from ragjax.sampling.state import TurnOutput


@dataclasses.dataclass
class TeacherState:
  histories: list
  finished: np.ndarray
  cursor: list
  cache_length: int

  @property
  def batch_size(self) -> int:
    return len(self.histories)

  @property
  def lengths(self):
    return np.asarray([len(h) for h in self.histories], np.int32)

  def history(self, row: int) -> list[int]:
    return list(self.histories[row])


class TeacherPolicy:
  """Forced text per row (a `ragjax.rollout.policy.Policy`); see the module docstring.
  Log-probs are reported as 0."""

  def __init__(self, tokenizer, scripts: Sequence[Sequence[str]], stop_strings=(),
               eos_ids: Sequence[int] = (), max_new_tokens: int = 256,
               cache_length: int = 4096):
    self.tok = tokenizer
    self.scripts = [list(s) for s in scripts]
    self.stop_strings = tuple(stop_strings)
    self.eos_ids = tuple(eos_ids) or (tokenizer.eos_token_id,)
    self.max_new_tokens, self.cache_length = max_new_tokens, cache_length
    self.max_extend = cache_length
    # A stop string of c characters spans at most 4c byte-level tokens (+1 for a partial
    # character before it): decoding that tail after each token finds every stop the whole
    # turn's text would, without decoding the turn again per token (a 10k-token turn).
    self.stop_window = 4 * max((len(x) for x in self.stop_strings), default=0) + 2

  def set_params(self, params) -> None:
    """A scripted policy has no weights; accepted so it can stand wherever a sampler does."""

  def prefill(self, prompts, samples_per_prompt: int = 1, seed: int = 0,
              first_row: int = 0) -> TeacherState:
    hist = [list(p) for p in prompts for _ in range(samples_per_prompt)]
    if len(hist) != len(self.scripts):
      raise ValueError(f"teacher has {len(self.scripts)} scripts for {len(hist)} rows")
    return TeacherState(hist, np.zeros(len(hist), bool), [0] * len(hist), self.cache_length)

  def _emit(self, state: TeacherState, r: int, m: int):
    script = self.scripts[r]
    i = state.cursor[r]
    state.cursor[r] += 1
    turn = script[i] if i < len(script) else None
    if callable(turn):
      turn = turn(self.tok.decode(state.histories[r]))
    if isinstance(turn, str):
      ids = self.tok(turn, add_special_tokens=False)["input_ids"]
    elif turn is not None:
      ids = [int(x) for x in turn]
    else:
      ids = [self.eos_ids[0]]
    out, why = [], BUDGET
    for tid in ids:
      if len(state.histories[r]) >= state.cache_length:
        return out, CACHE_FULL
      if len(out) >= m:
        break
      out.append(tid)
      state.histories[r].append(tid)
      if tid in self.eos_ids:
        return out, EOS
      tail = self.tok.decode(out[-self.stop_window:]) if self.stop_strings else ""
      if any(s in tail for s in self.stop_strings):
        return out, STOP
    return out, why

  def decode(self, state: TeacherState):
    b, m = state.batch_size, self.max_new_tokens
    toks = np.zeros((b, m), np.int32)
    lens = np.zeros(b, np.int32)
    reason = np.full(b, NOT_RUN, np.int32)
    for r in range(b):
      if state.finished[r]:
        continue
      out, why = self._emit(state, r, m)
      toks[r, :len(out)] = out
      lens[r], reason[r] = len(out), why
      if why in (EOS, CACHE_FULL):
        state.finished[r] = True
    zeros = np.zeros((b, m), np.float32)
    return state, TurnOutput(tokens=toks, lengths=lens, logprobs=zeros, sampling_logprobs=zeros,
                             stop_reason=reason, stop_id=np.full(b, -1, np.int32))

  def extend(self, state: TeacherState, rows, token_lists):
    for r, ids in zip(rows, token_lists):
      if len(state.histories[r]) + len(ids) > state.cache_length:
        raise ValueError(f"teacher extend: row {r} would exceed the cache")
      state.histories[r].extend(int(i) for i in ids)
      state.finished[r] = False
    return state

  def set_done(self, state: TeacherState, rows):
    for r in rows:
      state.finished[r] = True
    return state

  def clone_rows(self, state: TeacherState, src, dst):
    for s, d in zip(src, dst):
      state.histories[d] = list(state.histories[s])
      state.finished[d], state.cursor[d] = state.finished[s], state.cursor[s]
    return state

  def truncate(self, state: TeacherState, rows, new_lengths):
    for r, n in zip(rows, new_lengths):
      del state.histories[r][n:]
      state.finished[r] = False
    return state
