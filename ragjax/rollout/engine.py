"""The multi-turn rollout engine: B prompts x G samples become a labelled Trajectory batch.

Each turn: decode every live row until a stop, parse each row's turn, run the mid-rollout hooks,
make ONE batched retrieval call for all searching rows, and append observations with the
sampler's `extend` (no re-prefill).  Rows that finished are `set_done` and stay idle.  The
loop ends when every row is done, after `max_turns` (+ the protocol's final no-search turn), or
when a row runs out of its token budget.

Tokens in, tokens out: the policy's spans are the sampler's own ids (cut only on token
boundaries when the protocol drops what follows an action); only environment / injected text is
tokenised, segment by segment, so each label is attached while concatenating.

A protocol with `context == "restart"` (R3-RAG) prompts every turn afresh: after a turn that
continues, the row becomes the protocol's next prompt (`Renderer.context_ids` with
`Protocol.restart_history`), the sampler row is truncated to the prefix it shares with that
prompt and extended with the rest.  Each (prompt, turn) is recorded as a step sample
(`RolloutBatch.samples`; turn spans index their own sample) and the trajectory row is the last
one.  A search in the last turn is served (its documents recorded) and the row then ends.

`policy` implements `ragjax.rollout.policy.Policy` (the JAX Sampler, the teacher, test doubles);
`retriever` is anything with `search(queries, k) -> hits`; one that also has
`search_with_context(queries, k, **per_query_lists)` gets the protocol's `retrieval_context` of
each query (UR²'s task and reasoning so far), and each query's prompt record as `records` when
it sets `needs_records` (a noisy retriever that drops gold passages).  Prompts are dataset records (dicts
with a `question`, as the data package writes them), `PromptInput`s or strings; hooks see the
record of their row's prompt, so a method hook can read its gold answers.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import time
import warnings
from typing import Callable, Optional, Sequence

import numpy as np

from ragjax.rollout.hooks import TurnView
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import (Action, Kind, Protocol, RestartStep, as_prompt_input,
                                           hit_contents, hit_id)
from ragjax.rollout.renderer import Renderer
from ragjax.rollout.segments import Segment
from ragjax.rollout.textspan import decode, tokens_covering, tokens_within
from ragjax.rollout.trajectory import (RolloutBatch, RowMeta, TrajectoryMeta, TurnRecord,
                                       assemble, assemble_samples)
from ragjax.sampling.config import BUDGET, CACHE_FULL, NOT_RUN, PAUSED

_FINAL_REASONS = ("search_in_final_turn", "no_action_in_final_turn", "query_in_final_turn")


@dataclasses.dataclass(frozen=True)
class EngineConfig:
  """Loop limits and assembly options.

  `max_response_tokens` caps everything after the prompt (policy + observations); the tighter
  of it and the protocol's own cap applies.  `spare_rows` reserves sampler rows for hooks that
  clone rows (REX-RAG); they are prefilled with copies of the first prompt and kept idle.
  spare_rows=-1 sizes them per run from the hooks: the sum of `hook.spare_rows(rows)` over
  hooks that define it (a hook that clones with probability p asks for about rows x p).  They
  come in whole groups, as many as keep the sampler's rows a multiple of the policy's
  `row_multiple` (its mesh's batch devices), see `spare_prompts`.
  `widths`: the batch is right-padded to the smallest of these holding its longest row (a few
  shapes, so the jitted train step compiles a few times); None pads to a multiple of 8.
  `wave_rows`: at most this many sampler rows at once (0: the whole batch; see `run`); the
  spare rows are shared among the waves in proportion to their prompts.
  `refill`: with `wave_rows`, rows that finish free their sampler rows for the next prompts'
  groups (continuous batching; needs a policy with `refill` and no hooks, else fixed waves).
  `decode_chunk`: > 0 overlaps retrieval with decoding: the sampler decodes at most this many
  steps per call, and a row whose turn ended is read at once and its search sent to a
  background thread while the other rows keep decoding; when every row's turn has ended the
  documents are extended, one extend per turn as with whole turns.  (Letting each row start
  its next turn as soon as its documents arrive was measured slower: a decode call costs the
  whole batch however few rows it advances; BENCHMARKS.md.)  Needs a policy with
  `chunked_decode`, no hooks (they see a turn's rows together) and a protocol that keeps its
  context (not "restart"); else whole turns.  0: one `decode` call per turn, retrieval after.
  """
  max_response_tokens: Optional[int] = None
  spare_rows: int = 0
  widths: Optional[tuple[int, ...]] = None
  wave_rows: int = 0
  refill: bool = True
  decode_chunk: int = 0
  pad_id: int = 0
  chat: Optional[bool] = None           # None: chat template iff the tokenizer has one


Hook = Callable[[list, "RowEditor"], None]


def spare_prompts(prompts: int, group_size: int, spare: int, row_multiple: int = 1) -> int:
  """Copies of the first prompt the engine prefills to hold `spare` spare rows: ceil(spare / G),
  plus as few more as keep all sampler rows ((prompts + copies) x G) a multiple of
  `row_multiple` (the mesh's batch devices, so the sampler's rows stay sharded)."""
  if spare <= 0:
    return 0
  extra = -(-spare // group_size)
  while ((prompts + extra) * group_size) % max(row_multiple, 1):
    extra += 1
  return extra


def spare_rows_for(spare_rows: int, hooks: Sequence, rows: int) -> int:
  """`spare_rows` when >= 0; for -1, what the hooks ask for a run of `rows` rows (the sum of
  `hook.spare_rows(rows)` over hooks that define it).  The engine reserves this many rounded
  up to whole groups."""
  if spare_rows >= 0:
    return spare_rows
  if spare_rows != -1:
    raise ValueError(f"spare_rows must be >= 0 or -1 (sized by the hooks), got {spare_rows}")
  return sum(int(h.spare_rows(rows)) for h in hooks if hasattr(h, "spare_rows"))


@dataclasses.dataclass
class _Row:
  tokens: list
  labels: list
  logprobs: list
  turns: list
  prompt_len: int
  group_id: int
  prompt_index: int
  sample_index: int
  sampler_len: int                       # the sampler's length for this row
  slot: int                              # the sampler row it decodes in
  turn: int = 0                          # the row's own turn (rows refilled later lag behind)
  released: bool = False                 # its finished slot went back to the free list
  clone_of: Optional[int] = None
  cloned_at_turn: Optional[int] = None
  done: bool = False
  answer: Optional[str] = None
  stop_reason: str = ""
  records: list = dataclasses.field(default_factory=list)
  seen_docs: list = dataclasses.field(default_factory=list)
  # restart contexts: earlier turns (RestartStep), finished step samples, the text so far
  steps: list = dataclasses.field(default_factory=list)
  samples: list = dataclasses.field(default_factory=list)
  transcript: list = dataclasses.field(default_factory=list)
  recorded: bool = True                  # the row's content is already a recorded sample
  # this turn
  action: Optional[Action] = None
  turn_start: int = 0
  turn_ids: list = dataclasses.field(default_factory=list)
  turn_text: str = ""
  end_token_text: Optional[str] = None
  resume: bool = False                   # a hook asked the row to continue without retrieval
  format_retries: int = 0                # this turn's regenerations (Protocol.format_retries)
  regenerate: bool = False               # the turn is decoded again (the turn does not advance)
  pending: list = dataclasses.field(default_factory=list)   # ids to extend with this turn

  def append(self, ids, label, turn, logprobs=None):
    self.tokens.extend(int(i) for i in ids)
    self.labels.extend([int(label)] * len(ids))
    self.logprobs.extend([0.0] * len(ids) if logprobs is None else [float(x) for x in logprobs])
    self.turns.extend([turn] * len(ids))

  def cut(self, n: int):
    for lst in (self.tokens, self.labels, self.logprobs, self.turns):
      del lst[n:]

  def sample(self) -> dict:
    return dict(tokens=list(self.tokens), labels=list(self.labels), logprobs=list(self.logprobs),
                turns=list(self.turns), prompt_len=self.prompt_len, group_id=self.group_id)


class RolloutEngine:
  def __init__(self, protocol: Protocol, policy, retriever, tokenizer,
               config: EngineConfig = EngineConfig(), hooks: Sequence[Hook] = ()):
    self.protocol, self.policy, self.retriever, self.tokenizer = protocol, policy, retriever, tokenizer
    self.config = config
    self.hooks = list(hooks)
    self.renderer = Renderer(protocol, tokenizer, chat=config.chat)
    self.restart = protocol.context == "restart"
    self.eos_ids = frozenset(int(e) for e in policy.eos_ids or ())
    self.retrieval_calls = 0
    caps = [c for c in (config.max_response_tokens, protocol.max_response_tokens) if c]
    self.response_budget = min(caps) if caps else None
    self.format_retries = int(getattr(protocol, "format_retries", 0) or 0)
    self.max_extend = policy.max_extend
    stops = policy.stop_strings
    missing = [s for s in protocol.stop_sequences if s not in stops]
    if missing:
      warnings.warn(f"the sampler does not stop on {missing} ({protocol.name}); turns run to the "
                    f"per-turn budget and are cut after the action, which wastes decode steps",
                    stacklevel=2)

  # ------------------------------------------------------------------------------------------
  def run(self, prompts: Sequence, samples_per_prompt: int = 1, seed: int = 0,
          uids: Optional[Sequence[int]] = None,
          key_ids: Optional[Sequence[int]] = None) -> RolloutBatch:
    """Rolls out every (unique) prompt `samples_per_prompt` times; `uids` are the group ids
    (default 0..B-1), so GRPO groups are per prompt, never per sample (Search-R1 issue #88).
    Hooks may add rows (REX-RAG clones), so the batch can hold more rows than prompts x G.

    With `EngineConfig.wave_rows`, the prompts run in waves of at most that many sampler rows
    (whole groups, so a group never splits), one after the other: the KV cache and prefill
    hold one wave, not the batch.  With `EngineConfig.refill` (the default) the waves are not
    fixed: when G sampler rows are free, the next prompt's group is prefilled into them while
    the other rows go on, so short rows do not wait for the wave's longest.  Row b of the whole
    batch samples with key fold_in(PRNGKey(seed), b) whatever its wave or slot, so waves change
    memory and speed, not trajectories.  `key_ids` (one int per prompt, with a policy whose
    `prefill` / `refill` take `row_ids`) replaces the batch position: sample g of prompt p
    draws with fold_in(PRNGKey(seed), key_ids[p] + g), so a prompt samples the same text in
    any batch (evaluation keys each question by its id and text)."""
    t_start = time.perf_counter()
    dicts, metas, timings, samples = self.run_rows(prompts, samples_per_prompt, seed, uids,
                                                   key_ids=key_ids)
    stats = timings.pop("stats")
    traj = assemble(dicts, self.config.widths, self.config.pad_id)
    timings["rollout_s"] = time.perf_counter() - t_start
    return RolloutBatch(traj=traj, meta=TrajectoryMeta(rows=metas, protocol=self.protocol.name),
                        timings=timings, stats=stats,
                        samples=assemble_samples(samples, self.config.widths, self.config.pad_id))

  def run_rows(self, prompts: Sequence, samples_per_prompt: int = 1, seed: int = 0,
               uids: Optional[Sequence[int]] = None, first_row: int = 0,
               key_ids: Optional[Sequence[int]] = None
               ) -> tuple[list[dict], list[RowMeta], dict, list]:
    """`run` before assembly: (host row dicts, row records, timings with the hooks' counters
    under "stats", a restart protocol's step samples as (batch row, sample dict) pairs).  `first_row` is the index of these prompts' first row in a larger batch
    (rows of one batch split over processes keep the keys they would have had together)."""
    self._retrieval_s, self._retrieval_wait_s, calls0 = 0.0, 0.0, self.retrieval_calls
    self._seed, self._stats = int(seed), {}
    prompts = list(prompts)
    inputs = [as_prompt_input(p) for p in prompts]
    self._inputs = inputs
    if not inputs:
      raise ValueError("run() needs at least one prompt")
    g = int(samples_per_prompt)
    if g < 1:
      raise ValueError(f"samples_per_prompt must be >= 1, got {samples_per_prompt}")
    uids = list(range(len(inputs))) if uids is None else [int(u) for u in uids]
    if len(uids) != len(inputs):
      raise ValueError(f"{len(uids)} uids for {len(inputs)} prompts")
    if key_ids is not None and len(key_ids) != len(inputs):
      raise ValueError(f"{len(key_ids)} key_ids for {len(inputs)} prompts")
    per_wave = max(1, self.config.wave_rows // g) if self.config.wave_rows else len(inputs)
    refill = per_wave < len(inputs) and self.refills()
    dicts, metas, samples = [], [], []
    for start in range(0, len(inputs), len(inputs) if refill else per_wave):
      wave = slice(start, len(inputs) if refill else start + per_wave)
      held = min(per_wave, len(inputs[wave]))
      if self.config.spare_rows == -1:      # sized by the hooks for this wave's rows
        spare = self.spare_rows(held * g)
      else:
        spare = (-(-self.config.spare_rows * held // len(inputs))
                 if self.config.spare_rows else 0)
      self._run_wave(prompts[wave], inputs[wave], uids[wave], g, seed, first_row + start * g,
                     spare, held, None if key_ids is None else list(key_ids)[wave])
      d, m, s = self._finish(prompt_offset=start, row_offset=len(dicts))
      dicts += d
      metas += m
      samples += s
    return dicts, metas, {"retrieval_s": self._retrieval_s,
                          "retrieval_wait_s": self._retrieval_wait_s,
                          "retrieval_calls": self.retrieval_calls - calls0,
                          "stats": dict(self._stats)}, samples

  def refills(self) -> bool:
    """Whether waves refill freed rows (`EngineConfig.refill`, a policy with `refill`, no
    hooks: REX-RAG's clones take the wave's spare rows, so its waves stay fixed)."""
    return bool(self.config.refill and hasattr(self.policy, "refill") and not self.hooks)

  def streams(self) -> bool:
    """Whether turns stream (`EngineConfig.decode_chunk`, a policy with `chunked_decode`, no
    hooks, a protocol that keeps its context)."""
    return bool(self.config.decode_chunk > 0 and getattr(self.policy, "chunked_decode", False)
                and not self.hooks and not self.restart and not self.format_retries)

  def _run_wave(self, prompts, inputs, uids, g: int, seed: int, first_row: int, spare: int,
                held: int, key_ids: Optional[list] = None):
    """Prefill the first `held` prompts (plus spare rows for hooks), then turn after turn; the
    rest of the prompts wait in a queue for freed rows (`EngineConfig.refill`)."""
    self._prompts, self._inputs, self._uids = list(prompts), list(inputs), list(uids)
    self._key_ids = key_ids
    # restart contexts are all rendered one way, so consecutive ones share the longest prefix
    render = self.renderer.context_ids if self.restart else self.renderer.prompt_ids
    self._prompt_ids = [self._fit_prompt(render(x), x) for x in inputs]
    extra = spare_prompts(held, g, spare, getattr(self.policy, "row_multiple", 1))
    keyed = {} if key_ids is None else {
        "row_ids": self._row_ids(list(range(held)) + [0] * extra, g)}
    state = self.policy.prefill(self._prompt_ids[:held] + [self._prompt_ids[0]] * extra,
                                samples_per_prompt=g, seed=seed, first_row=first_row, **keyed)
    self._rows, self._g = {}, g
    for p in range(held):
      self._add_group(p, range(p * g, (p + 1) * g))
    free = list(range(held * g, (held + extra) * g))
    if free:
      state = self.policy.set_done(state, free)
    self._state, self._free = state, free
    self._queue = list(range(held, len(inputs)))
    self._first_row = first_row
    self._capacity = getattr(state, "cache_length", None)

    total_turns = self.protocol.max_turns + (1 if self.protocol.final_turn else 0)
    if self.streams():
      self._stream(total_turns)
      return
    while True:
      if self._queue:
        self._refill()
      live = [r for r in sorted(self._rows) if not self._rows[r].done]
      if not live:
        break
      last = [r for r in live if self._rows[r].turn == total_turns - 1]
      if last and self.protocol.final_turn:
        self._final_turn_prefix(last)
        live = [r for r in live if not self._rows[r].done]
      if live:
        self._turn(live, total_turns)
      out_of_turns = []
      for r in sorted(self._rows):          # every row still going decoded this turn
        row = self._rows[r]
        if not row.done:
          if row.regenerate:                # a format retry: the same turn again
            row.regenerate = False
            continue
          row.turn += 1
          row.format_retries = 0
          if row.turn >= total_turns:
            row.done, row.stop_reason = True, "max_turns"
            out_of_turns.append(r)
      if out_of_turns and (self._queue or any(not x.done for x in self._rows.values())):
        self._state = self.policy.set_done(self._state, self._slots(out_of_turns))

  def _stream(self, total_turns: int) -> None:
    """The wave's turns decoded `decode_chunk` steps at a time (see `EngineConfig`): after
    each call, rows whose turn ended are read and observed at once, set done in the sampler,
    and their searches sent (one batched call per decode call) to a retrieval thread while the
    other rows decode on.  When no row is decoding, the searches still out are waited for and
    every row's observation is extended (which reopens the row).  A row sees the turns,
    documents and sampling keys of whole turns."""
    prefix = self.protocol.final_turn_segments() if self.protocol.final_turn else []
    prefix = self.renderer.tokenize(prefix) if prefix else None
    partial: dict = {}                     # row -> (ids, logprobs) of its unfinished turn
    inflight: list = []                    # (future, rows) of searches in the thread
    ready, stop = [], []                   # rows to extend / to mark done in the sampler
    waiting: set = set()                   # rows whose search is in flight

    def enter(r):                          # row r starts its turn (the final one: the prefix)
      row = self._rows[r]
      if prefix is not None and row.turn == total_turns - 1:
        if not self._append_final_prefix(row, *prefix[:2]):
          stop.append(r)
          return
        row.pending = row.pending + list(prefix[0])
      if row.pending:
        ready.append(r)
        stop.append(r)                     # held until the turn's end: no decoding before it

    def after(r, goes_on):                 # row r's turn was observed
      row = self._rows[r]
      if not goes_on:
        stop.append(r)
        return
      row.turn += 1
      if row.turn >= total_turns:
        row.done, row.stop_reason = True, "max_turns"
        stop.append(r)
        return
      if not row.pending and r in waiting:   # set done while it waited: reopen it
        self._state = self.policy.truncate(self._state, [row.slot], [row.sampler_len])
      enter(r)

    def decoding():                        # rows that decode in the next call
      held = waiting.union(ready)
      return [r for r in sorted(self._rows) if not self._rows[r].done and r not in held]

    for r in sorted(self._rows):
      enter(r)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                               thread_name_prefix="retrieval") as pool:
      while True:
        if stop and (self._queue or any(not x.done for x in self._rows.values())):
          self._state = self.policy.set_done(self._state, self._slots(stop))
        stop = []
        if ready and not decoding() and not inflight:
          self._sync_lengths(ready)        # (after set_done: an extend reopens its rows)
          self._extend(ready, [self._rows[r].pending for r in ready])
          ready = []
        if self._queue:
          before = set(self._rows)
          self._refill()
          for r in sorted(set(self._rows) - before):
            enter(r)
        rows = decoding()
        if not rows and not inflight and not ready:
          break
        if rows:
          self._state, out = self.policy.decode(self._state, steps=self.config.decode_chunk)
          toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
          lps, reasons = np.asarray(out.logprobs), np.asarray(out.stop_reason)
          ended = []
          for r in rows:
            slot = self._rows[r].slot
            ids, lp = partial.setdefault(r, ([], []))
            ids += toks[slot, :lens[slot]].tolist()
            lp += lps[slot, :lens[slot]].tolist()
            reason = int(reasons[slot])
            cap = self._turn_cap(r)
            if reason == PAUSED and cap is not None and len(ids) >= cap:
              reason = BUDGET              # the question's own turn budget is spent
            if reason != PAUSED:
              ids, lp = partial.pop(r)
              self._read_turn(r, ids, lp, reason, total_turns)
              ended.append(r)
          searching = [r for r in ended if self._is_search(r)]
          for r in ended:
            if r not in searching:
              after(r, self._observe(r, (), total_turns))
          if searching:
            inflight.append((pool.submit(self._search, *self._search_request(searching)),
                             searching))
            waiting.update(searching)
            stop += searching              # no decoding past the search until its documents
            if decoding():                 # the call runs while other rows decode on
              self._stats["searches_behind_decoding"] = (
                  self._stats.get("searches_behind_decoding", 0) + 1)
        # documents that arrived; wait for the searches when no row decodes
        while inflight:
          future, rows = inflight[0]
          if not future.done() and decoding():
            break
          inflight.pop(0)
          t0 = time.perf_counter()
          results = future.result()
          self._retrieval_wait_s += time.perf_counter() - t0
          hits = self._take_hits(rows, results)
          for r in rows:
            waiting.discard(r)
            after(r, self._observe(r, hits[r], total_turns))

  def _add_group(self, p: int, slots) -> None:
    """Rows of prompt p's G samples (batch rows p * G + g), decoding in sampler rows `slots`."""
    ids = self._prompt_ids[p]
    for g, slot in enumerate(slots):
      self._rows[p * self._g + g] = _Row(
          tokens=list(ids), labels=[int(Source.PROMPT)] * len(ids), logprobs=[0.0] * len(ids),
          turns=[-1] * len(ids), prompt_len=len(ids), group_id=self._uids[p], prompt_index=p,
          sample_index=g, sampler_len=len(ids), slot=int(slot))

  def _refill(self) -> None:
    """Rows that finished give their sampler rows to the next queued prompts, whole groups."""
    for row in self._rows.values():
      if row.done and not row.released:
        row.released = True
        self._free.append(row.slot)
    k = min(len(self._free) // self._g, len(self._queue))
    if not k:
      return
    self._free.sort()
    prompts, self._queue = self._queue[:k], self._queue[k:]
    slots, self._free = self._free[:k * self._g], self._free[k * self._g:]
    keyed = {} if self._key_ids is None else {"row_ids": self._row_ids(prompts, self._g)}
    self._state = self.policy.refill(self._state, slots, [self._prompt_ids[p] for p in prompts],
                                     samples_per_prompt=self._g, seed=self._seed,
                                     first_row=self._first_row + prompts[0] * self._g, **keyed)
    for i, p in enumerate(prompts):
      self._add_group(p, slots[i * self._g:(i + 1) * self._g])
    self._stats["refilled_groups"] = self._stats.get("refilled_groups", 0) + k

  def _row_ids(self, prompts, g: int) -> list[int]:
    """The sampling key index of each row of `prompts` (wave positions): key_ids[p] + sample."""
    return [int(self._key_ids[p]) + j for p in prompts for j in range(g)]

  def _slots(self, rows) -> list[int]:
    return [self._rows[r].slot for r in rows]

  def spare_rows(self, rows: int) -> int:
    """Spare sampler rows for a run of `rows` rows (see EngineConfig.spare_rows)."""
    return spare_rows_for(self.config.spare_rows, self.hooks, rows)

  # ------------------------------------------------------------------------------------------
  def _final_turn_prefix(self, live):
    """Appends the protocol's forced-answer text (ENV) to every live row before the last turn."""
    segs = self.protocol.final_turn_segments()
    if not segs:
      return
    ids, labels, _ = self.renderer.tokenize(segs)
    go, stop = [], []
    for r in live:
      (go if self._append_final_prefix(self._rows[r], ids, labels) else stop).append(r)
    self._extend(go, [list(ids) for _ in go])
    if stop:
      self._state = self.policy.set_done(self._state, self._slots(stop))

  def _append_final_prefix(self, row: _Row, ids, labels) -> bool:
    """Appends the forced-answer text to the row (False, and the row ends: "budget", when it
    leaves no room for a generated token)."""
    if self._over_budget(row, len(ids)):
      row.done, row.stop_reason = True, "budget"
      return False
    row.append(ids, Source.ENV, row.turn)
    row.labels[-len(ids):] = labels
    return True

  def _turn(self, live, total_turns: int):
    """Decode one turn of every live row (each at its own turn), parse, hooks, one batched
    retrieval, observations appended by `extend`."""
    self._state, out = self.policy.decode(self._state)
    toks = np.asarray(out.tokens)
    lens = np.asarray(out.lengths)
    lps = np.asarray(out.logprobs)
    reasons = np.asarray(out.stop_reason)
    for r in live:
      slot = self._rows[r].slot
      self._read_turn(r, toks[slot, :lens[slot]].tolist(), lps[slot, :lens[slot]],
                      int(reasons[slot]), total_turns)

    for t in sorted({self._rows[r].turn for r in live}) if self.hooks else ():
      views = [TurnView(row=r, turn=t, final=t == total_turns - 1, action=self._rows[r].action,
                        text=self._rows[r].turn_text, group_id=self._rows[r].group_id,
                        clone_of=self._rows[r].clone_of,
                        prompt=self._prompts[self._rows[r].prompt_index])
               for r in live if self._rows[r].turn == t]
      editor = RowEditor(self, t)
      for hook in self.hooks:
        hook(views, editor)
      live = live + [r for r in editor.created if r not in live]

    hits = self._retrieve([r for r in live if self._is_search(r)])
    ext_rows, done_rows = [], []
    for r in live:
      (ext_rows if self._observe(r, hits.get(r, ()), total_turns) else done_rows).append(r)
    self._sync_lengths(ext_rows)
    self._extend(ext_rows, [self._rows[r].pending for r in ext_rows])
    if done_rows:
      self._state = self.policy.set_done(self._state, self._slots(done_rows))

  def _read_turn(self, r: int, ids: list, logprobs, reason: int, total_turns: int) -> None:
    """Row r's turn of sampler tokens `ids`: parsed into its action, kept up to the action's
    end (and never past an eos in an inline stream), appended and recorded."""
    row = self._rows[r]
    t, final = row.turn, row.turn == total_turns - 1
    row.sampler_len += len(ids)            # what the sampler holds, also past a cut below
    cap = self._turn_cap(r)
    if cap is not None and len(ids) > cap:   # as a sampler with this turn budget would stop
      ids, logprobs, reason = ids[:cap], logprobs[:cap], BUDGET
    eos_tail = bool(ids) and ids[-1] in self.eos_ids
    body = ids[:-1] if eos_tail else ids
    text = decode(self.tokenizer, body)
    action = self.protocol.parse(text, final=final)
    keep = len(ids)
    if action.keep is not None and action.keep < len(text):
      keep = tokens_covering(self.tokenizer, body, text, action.keep)
    continuing = action.kind in (Kind.SEARCH, Kind.INVALID)
    if (continuing and eos_tail and self.protocol.observation_role == "inline"
        and not self.restart):
      keep = min(keep, len(body))      # never continue an inline stream after an eos token
    if keep < len(ids):                # the text of exactly the kept tokens
      text = decode(self.tokenizer, ids[:keep])
    row.end_token_text = (decode(self.tokenizer, ids[-1:])
                          if eos_tail and keep == len(ids) else None)
    row.turn_start = len(row.tokens)
    row.turn_ids = ids[:keep]
    row.turn_text = text
    row.action = action
    row.resume = False
    row.pending = []
    row.append(ids[:keep], Source.POLICY, t, logprobs[:keep])
    row.recorded = row.recorded and keep == 0
    if reason == CACHE_FULL:
      row.action = Action(Kind.END, reason="budget")
    elif reason == NOT_RUN:
      row.action = Action(Kind.END, reason="sampler_finished")
    row.records.append(TurnRecord(turn=t, action=row.action.kind.value, text=text,
                                  start=row.turn_start, end=len(row.tokens),
                                  query=action.query if action.kind == Kind.SEARCH else None,
                                  all_queries=action.all_queries, reason=row.action.reason))

  def _turn_cap(self, r: int):
    """Row r's question's own turn budget (`Protocol.turn_budget`), or None."""
    return self.protocol.turn_budget(self._inputs[self._rows[r].prompt_index])

  def _observe(self, r: int, hits, total_turns: int) -> bool:
    """After row r's turn (and its search's `hits`): the row ends (False) or its observation
    is appended and waits in `pending` for the sampler (True)."""
    row = self._rows[r]
    if self._retries(row):
      return self._regenerate(row)
    t, final = row.turn, row.turn == total_turns - 1
    kind = row.action.kind
    obs = []
    if row.resume:
      kind = None
    elif kind == Kind.SEARCH:
      content = self.protocol.observation(row.action.query, hits)
      obs = self.renderer.wrap_observation(content, row.end_token_text)
      row.records[-1].doc_ids = tuple(hit_id(h) for h in hits)
      row.records[-1].doc_texts = tuple(hit_contents(h) for h in hits)
    elif kind == Kind.INVALID:
      obs = self.renderer.wrap_observation(self.protocol.invalid_observation(),
                                           row.end_token_text)
      if not obs:
        kind = Kind.END
    if kind == Kind.ANSWER:
      row.done, row.answer, row.stop_reason = True, row.action.answer, "answer"
    elif kind == Kind.END:
      reason = row.action.reason or "end"
      row.done, row.stop_reason = True, ("max_turns" if reason in _FINAL_REASONS else reason)
    elif kind == Kind.SEARCH and final:    # served and recorded; nothing is decoded after it
      row.done, row.stop_reason = True, "max_turns"
    if self.restart:
      row.transcript.append(row.turn_text + "".join(seg.text for seg in obs))
      if kind in (Kind.SEARCH, Kind.INVALID):
        row.steps.append(RestartStep(row.turn_text, row.action.query if kind == Kind.SEARCH
                                     else None, tuple(hits)))
    if row.done:
      return False
    if self.restart and kind in (Kind.SEARCH, Kind.INVALID):
      return self._restart(row)
    ids, labels, truncated = self.renderer.tokenize(obs)
    row.records[-1].obs_truncated = truncated
    if self._over_budget(row, len(ids)):
      row.done, row.stop_reason = True, "budget"
      return False
    row.append(ids, Source.ENV, t)
    if ids:
      row.labels[-len(ids):] = labels
    row.pending = row.pending + ids
    return True

  def _retries(self, row: _Row) -> bool:
    """Whether the row's malformed turn is decoded again (`Protocol.format_retries` times at
    most, for the parse failures in `Protocol.retry_reasons`)."""
    a = row.action
    return (row.format_retries < self.format_retries and not row.resume and a is not None
            and a.kind == Kind.END and a.reason in getattr(self.protocol, "retry_reasons", ()))

  def _regenerate(self, row: _Row) -> bool:
    """Drops the row's turn (tokens, record) and decodes it again from the same history: the
    sampler row is truncated back (`_sync_lengths`) and, with a policy that has `reseed`,
    given a new stream, so the retry samples anew (R3-RAG's code regenerates a step whose
    `Step j:` header check fails, at most 3 generations in all)."""
    row.format_retries += 1
    self._stats["format_retries"] = self._stats.get("format_retries", 0) + 1
    row.records.pop()
    row.cut(row.turn_start)
    row.recorded = True                   # back to the turn's prompt: nothing new to record
    row.action, row.pending, row.regenerate = None, [], True
    if hasattr(self.policy, "reseed"):
      salt = 1000 * (row.turn + 1) + row.format_retries
      self._state = self.policy.reseed(self._state, [row.slot], [salt])
    return True

  def _restart(self, row: _Row) -> bool:
    """Records the row's (prompt, turn) sample and makes its next prompt the row's content;
    the sampler keeps the shared prefix and is extended with the rest (`pending`).  False when
    the new prompt leaves no room for a generated token (the row ends: "budget")."""
    row.samples.append(row.sample())
    row.recorded = True
    ids = self.renderer.context_ids(self._inputs[row.prompt_index],
                                    self.protocol.restart_history(row.steps))
    if self._capacity is not None and len(ids) + 1 > self._capacity:
      row.done, row.stop_reason = True, "budget"
      return False
    common = 0
    for a, b in zip(row.tokens, ids):
      if a != b:
        break
      common += 1
    if common == 0:
      raise ValueError(f"{self.protocol.name}: consecutive restart prompts share no first token; "
                       f"the sampler needs at least one to keep")
    row.tokens, row.labels = list(ids), [int(Source.PROMPT)] * len(ids)
    row.logprobs, row.turns = [0.0] * len(ids), [-1] * len(ids)
    row.prompt_len = len(ids)
    row.pending = list(ids[common:])
    return True

  # ------------------------------------------------------------------------------------------
  def _is_search(self, r) -> bool:
    row = self._rows[r]
    return not row.resume and row.action is not None and row.action.kind == Kind.SEARCH

  def _retrieve(self, rows):
    """One batched retrieval call for every searching row of this turn."""
    if not rows:
      return {}
    t0 = time.perf_counter()
    results = self._search(*self._search_request(rows))
    self._retrieval_wait_s += time.perf_counter() - t0
    return self._take_hits(rows, results)

  def _search_request(self, rows) -> tuple:
    """(queries, k, per-query context lists or None) of the searching rows."""
    k = self.protocol.top_k
    extra = max(len(self._rows[r].seen_docs) for r in rows) if self.protocol.dedup_docs else 0
    queries = [self._rows[r].action.query for r in rows]
    contexts = self._retrieval_contexts(rows)
    if getattr(self.retriever, "needs_records", False):
      contexts = dict(contexts or {},
                      records=[self._prompts[self._rows[r].prompt_index] for r in rows])
    return queries, k + extra, contexts

  def _search(self, queries, k, contexts):
    """The retriever call (the only engine work that runs off the main thread when turns
    stream: it touches no row)."""
    t0 = time.perf_counter()
    if contexts is None:
      results = self.retriever.search(queries, k)
    else:
      results = self.retriever.search_with_context(queries, k, **contexts)
    self._retrieval_s += time.perf_counter() - t0
    self.retrieval_calls += 1
    if len(results) != len(queries):
      raise ValueError(f"retriever returned {len(results)} result lists for {len(queries)} "
                       f"queries")
    return results

  def _take_hits(self, rows, results) -> dict:
    """{row: its top-k hits}, without documents the row has seen when the protocol dedups and
    within its documents-per-trajectory cap; the row's seen documents are updated."""
    k = self.protocol.top_k
    out = {}
    for r, hits in zip(rows, results):
      row = self._rows[r]
      hits = list(hits)
      if self.protocol.dedup_docs:
        hits = [h for h in hits if hit_id(h) not in row.seen_docs]
      limit = k
      cap = self.protocol.max_docs_per_trajectory
      if cap is not None:
        limit = max(0, min(k, cap - len(row.seen_docs)))
      hits = hits[:limit]
      row.seen_docs.extend(hit_id(h) for h in hits)
      out[r] = hits
    return out

  def _fit_prompt(self, ids: list, inp) -> list:
    """A prompt longer than the policy takes (`max_prompt_len`) loses its middle: the head
    (instructions) and the tail (the question's end, the generation prompt) stay, as
    long-context evaluations cut, and the cut is counted in the step's stats
    (`prompts_truncated`), so one over-long question never aborts a batch."""
    limit = getattr(self.policy, "max_prompt_len", None)
    if not limit or len(ids) <= limit:
      return ids
    self._stats["prompts_truncated"] = self._stats.get("prompts_truncated", 0) + 1
    warnings.warn(f"prompt of {len(ids)} tokens is longer than the policy's {limit}: its middle "
                  f"is cut ({str(getattr(inp, 'question', ''))[:60]!r})", stacklevel=3)
    head = limit // 2
    return list(ids[:head]) + list(ids[len(ids) - (limit - head):])

  def _retrieval_contexts(self, rows) -> Optional[dict]:
    """{keyword: per-query list} from the protocol's `retrieval_context`, when the retriever
    takes them (`search_with_context`) and the protocol gives them; else None."""
    if not hasattr(self.retriever, "search_with_context"):
      return None
    per_row = []
    for r in rows:
      row = self._rows[r]
      response = decode(self.tokenizer, row.tokens[row.prompt_len:])
      per_row.append(self.protocol.retrieval_context(self._inputs[row.prompt_index], response))
    if any(c is None for c in per_row):
      return None
    return {key: [c[key] for c in per_row] for key in per_row[0]}

  def _over_budget(self, row: _Row, n_obs: int) -> bool:
    """True when appending n_obs tokens leaves no room for one more generated token."""
    after = len(row.tokens) + n_obs
    if self._capacity is not None and after + 1 > self._capacity:
      return True
    if self.response_budget is not None and after - row.prompt_len >= self.response_budget:
      return True
    return False

  def _sync_lengths(self, rows):
    """Truncates sampler rows whose history runs past the kept tokens (cut actions, eos)."""
    cut = [r for r in rows if self._rows[r].sampler_len != len(self._rows[r].tokens)
           - len(self._rows[r].pending)]
    if cut:
      lengths = [len(self._rows[r].tokens) - len(self._rows[r].pending) for r in cut]
      self._state = self.policy.truncate(self._state, self._slots(cut), lengths)
      for r, n in zip(cut, lengths):
        self._rows[r].sampler_len = n

  def _extend(self, rows, id_lists):
    rows = [r for r, ids in zip(rows, id_lists) if ids]
    id_lists = [ids for ids in id_lists if ids]
    step = self.max_extend or max((len(x) for x in id_lists), default=1)
    offset = 0
    while rows:
      chunk = [ids[offset:offset + step] for ids in id_lists]
      sel = [i for i, c in enumerate(chunk) if c]
      if not sel:
        break
      self._state = self.policy.extend(self._state, [self._rows[rows[i]].slot for i in sel],
                                       [chunk[i] for i in sel])
      for i in sel:
        self._rows[rows[i]].sampler_len += len(chunk[i])
      offset += step
    for r in rows:
      self._rows[r].pending = []

  # ---- row edits used by hooks (see RowEditor) ---------------------------------------------
  def _clone(self, src: int, t: int) -> int:
    if not self._free:
      raise RuntimeError("no spare sampler rows left to clone into; raise EngineConfig.spare_rows")
    dst = self._free.pop(0)
    self._state = self.policy.clone_rows(self._state, [self._rows[src].slot], [dst])
    row = copy.deepcopy(self._rows[src])
    row.clone_of, row.cloned_at_turn, row.slot = src, t, dst
    new = max(self._rows) + 1            # batch rows: originals, then clones in creation order
    self._rows[new] = row
    return new

  def _delete_span(self, r: int, start: int, end: Optional[int]):
    row = self._rows[r]
    text = row.turn_text
    end = len(text) if end is None else end
    if not 0 <= start <= end <= len(text):
      raise ValueError(f"row {r}: span [{start}, {end}) is outside its last turn of "
                       f"{len(text)} characters")
    if end != len(text):
      raise ValueError(f"row {r}: only a span that ends the last turn can be deleted without "
                       f"recomputing the cache (span ends at {end} of {len(text)})")
    keep = tokens_within(self.tokenizer, row.turn_ids, text, start)
    row.cut(row.turn_start + keep)
    row.turn_ids = row.turn_ids[:keep]
    row.turn_text = decode(self.tokenizer, row.turn_ids)
    row.records[-1].text = row.turn_text
    row.records[-1].end = row.turn_start + keep
    row.end_token_text = None
    row.answer = None

  def _insert(self, r: int, segments: Sequence[Segment], t: int):
    row = self._rows[r]
    ids, labels, _ = self.renderer.tokenize(segments)
    if self._capacity is not None:     # never past the cache: keep what leaves a token's room
      room = max(self._capacity - 1 - len(row.tokens), 0)
      if len(ids) > room:
        ids, labels = list(ids)[:room], list(labels)[:room]
        self._stats["inserts_cut"] = self._stats.get("inserts_cut", 0) + 1
    row.append(ids, Source.INJECTED, t)
    if ids:
      row.labels[-len(ids):] = labels
    row.pending = row.pending + ids

  def _resume(self, r: int):
    row = self._rows[r]
    if self._over_budget(row, 0):      # an insert filled the cache: nothing more can be decoded
      row.done, row.stop_reason = True, "budget"
      return
    row.resume, row.done, row.stop_reason = True, False, ""
    row.records[-1].action = "continue"

  # ------------------------------------------------------------------------------------------
  def _finish(self, prompt_offset: int = 0, row_offset: int = 0) -> tuple[list, list, list]:
    """The wave's rows as host dicts and records (originals first, then clones) and its step
    samples as (row, dict) pairs, indexed in the whole batch (`prompt_offset`: the wave's first prompt; `row_offset`: rows before it)."""
    order = sorted(r for r in self._rows if self._rows[r].clone_of is None)
    order += sorted(r for r in self._rows if self._rows[r].clone_of is not None)
    index = {r: row_offset + i for i, r in enumerate(order)}
    dicts, metas, samples = [], [], []
    for r in order:
      row = self._rows[r]
      dicts.append(dict(tokens=row.tokens, labels=row.labels, logprobs=row.logprobs,
                        turns=row.turns, prompt_len=row.prompt_len, group_id=row.group_id))
      response = decode(self.tokenizer, row.tokens[row.prompt_len:])
      if self.restart:
        done = row.samples + ([] if row.recorded else [row.sample()])
        samples += [(index[r], d) for d in done]
        response = "".join(row.transcript)
      meta = RowMeta(
          row=index[r], group_id=row.group_id, prompt_index=prompt_offset + row.prompt_index,
          sample_index=row.sample_index, sampler_row=row.slot, cloned_at_turn=row.cloned_at_turn,
          clone_of=None if row.clone_of is None else index[row.clone_of],
          answer=row.answer, stop_reason=row.stop_reason, response_text=response,
          turns=row.records)
      meta.extra = self.protocol.annotate(meta)
      metas.append(meta)
    return dicts, metas, samples


class RowEditor:
  """The engine's row edits, valid during one hook call.

  `seed` is the run's seed, `turn` the turn being edited and `first_row` the index in the whole
  batch of this wave's (or process's) row 0: a hook that draws random numbers seeds each row's
  draws from these and the row's batch index (`first_row + view.row` for an original row), so a
  row's edits depend neither on the runs before it (exact resume) nor on how the batch was
  split into waves or processes."""

  def __init__(self, engine, turn: int):
    self._engine, self._turn = engine, turn
    self.created: list[int] = []

  @property
  def seed(self) -> int:
    return self._engine._seed

  @property
  def turn(self) -> int:
    return self._turn

  @property
  def first_row(self) -> int:
    return self._engine._first_row

  @property
  def free_rows(self) -> int:
    """Spare rows left to clone into this run (a clone with none left is an error)."""
    return len(self._engine._free)

  def note(self, key: str, n: float = 1) -> None:
    """Adds n to the run's counter `key` (returned as `RolloutBatch.stats`)."""
    stats = self._engine._stats
    stats[key] = stats.get(key, 0) + n

  def clone(self, row: int) -> int:
    """A copy of `row` (history, cache, this turn's action) in a spare row of its group."""
    dst = self._engine._clone(row, self._turn)
    self.created.append(dst)
    return dst

  def delete_span(self, row: int, start: int, end: Optional[int] = None) -> None:
    """Deletes characters [start, end) of the row's last turn (end = the turn's end)."""
    self._engine._delete_span(row, start, end)

  def insert(self, row: int, segments: Sequence[Segment]) -> None:
    """Appends labelled text after the row's last turn; it is fed to the sampler next."""
    self._engine._insert(row, segments, self._turn)

  def resume(self, row: int) -> None:
    """The row continues decoding next turn, without retrieval or an observation."""
    self._engine._resume(row)

  def text(self, row: int) -> str:
    return self._engine._rows[row].turn_text
