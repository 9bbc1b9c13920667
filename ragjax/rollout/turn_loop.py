"""The engine's turn loop: a wave's rows decoded, read, searched and observed to the end.

Each decode call advances the rows that are decoding.  A row whose turn ended is read
(`Turns.read`); hooks see the turn's rows and may edit them; the searching rows' queries go to
the retriever in one batched call (`RetrievalStep`); each row is then observed
(`Turns.observe`): it ends, or its observation waits in `Row.pending`.  At the barrier -- no row
decoding and no search out -- every pending observation goes into the sampler in one extend
(no re-prefill); rows that stopped are set done; freed rows take queued prompts
(`Wave.refill`); the next decode call starts.  The loop ends when every row is done, after the
protocol's turns, or when a row runs out of its token budget.

Whole turns (`EngineConfig.decode_chunk` 0): one decode call runs every live row to the end of
its turn, so the barrier follows every call and the retrieval call is made at once, after the
hooks.

Chunks (`decode_chunk` > 0): a decode call runs at most that many steps; rows mid-turn come
back PAUSED and resume in the next call under the same per-turn budget.  A row whose turn ended
is read at once and held (set done in the sampler) while the other rows decode on, and the
searches of the rows that ended in one call go, in one batched call, to a retrieval thread.
When no row decodes, the searches still out are waited for; at the barrier the extend reopens
the held rows.  A row sees the turns, documents and sampling keys of whole turns.  Hooks (they
see a turn's rows together) and restart contexts run whole turns.

The two also differ in three places, kept so that each gives the sampler exactly the calls it
gave before they shared this loop (an extend's shape and the cache window it attends depend on
the rows it carries, so merging or dropping one could move a log-prob's last bits):
  * the final turn's forced prefix: its own extend at the start of the final turn (whole
    turns), or joined to the row's last observation in one extend (chunks);
  * a row that ran out of turns: its last observation is extended, then the row set done
    (whole turns), or it is set done without that extend (chunks);
  * set done: whole turns set the rows a turn ended done after the barrier's extend, and the
    rows out of turns after them; chunks set every row stopped since the last call done before
    the extend (which reopens the held ones).  Rows out of turns (chunks: any row) are set done
    only while a row may still decode.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from typing import Sequence

import numpy as np

from ragjax.rollout.hooks import run_hooks
from ragjax.rollout.retrieval_step import RetrievalStep
from ragjax.rollout.turns import Turns
from ragjax.rollout.waves import Wave
from ragjax.sampling.sampler_config import BUDGET, PAUSED


class TurnLoop:
  def __init__(self, wave: Wave, turns: Turns, retrieval: RetrievalStep, hooks: Sequence,
               chunk: int):
    self.wave, self.rows, self.turns = wave, wave.rows, turns
    self.retrieval, self.hooks, self.chunk = retrieval, list(hooks), int(chunk)
    self.ready: list[int] = []         # rows whose pending ids go in at the barrier
    self.stopped: list[int] = []       # rows to set done while a row may still decode
    self.ended: list[int] = []         # whole turns: rows the turn ended (set done at once)
    self.inflight: list = []           # chunks: (future, rows) of searches in the thread
    self.waiting: set = set()          # chunks: rows whose search is out
    self.partial: dict = {}            # chunks: row -> (ids, logprobs) of its unfinished turn
    self.pool = None

  def run(self) -> None:
    """The wave's turns, to the end."""
    for r in self.rows.ids():
      self._enter(r)
    with self._retrieval_thread() as self.pool:
      while True:
        self._settle()
        for r in self.wave.refill():
          self._enter(r)
        if not (self._decoding() or self.inflight or self.ready):
          break
        if not self.chunk:
          self._final_prefix()
        rows = self._decoding()
        if rows:
          self._turns_ended(self._decode(rows))
        self._collect()

  def _retrieval_thread(self):
    if not self.chunk:
      return contextlib.nullcontext()
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="retrieval")

  def _decoding(self) -> list[int]:
    """Rows that decode in the next call: live, not held for the barrier or a search."""
    held = self.waiting.union(self.ready)
    return [r for r in self.rows.live() if r not in held]

  def _settle(self) -> None:
    """The sampler learns which rows stopped; at the barrier it takes every pending
    observation in one extend (see the module docstring for the two orders)."""
    if self.chunk:                       # held rows too: the barrier's extend reopens them
      self._set_done(self.stopped)
    if self.ready and not self._decoding() and not self.inflight:
      self.rows.extend_pending(self.ready)
      self.ready = []
    if not self.chunk:
      if self.ended:
        self.rows.set_done(self.ended)
      self.ended = []
      self._set_done(self.stopped)

  def _set_done(self, rows: list[int]) -> None:
    """Sets `rows` done (the list is emptied) unless no row may decode any more."""
    if rows and (self.wave.queue or self.rows.any_live()):
      self.rows.set_done(rows)
    rows.clear()

  def _enter(self, r: int) -> None:
    """Chunks: row r starts a turn; the final one's forced prefix joins its pending
    observation, and a row with ids pending is held until the barrier."""
    if not self.chunk:
      return
    row = self.rows[r]
    if self.turns.final_prefix is not None and self.turns.is_final(row):
      if not self.turns.add_final_prefix(row, self.rows):
        self.stopped.append(r)
        return
      row.pending = row.pending + list(self.turns.final_prefix[0])
    if row.pending:
      self.ready.append(r)
      self.stopped.append(r)

  def _final_prefix(self) -> None:
    """Whole turns: the forced-answer text goes into every live row in its final turn, in one
    extend; rows it leaves no room end."""
    if self.turns.final_prefix is None:
      return
    last = [r for r in self.rows.live() if self.turns.is_final(self.rows[r])]
    go, stop = [], []
    for r in last:
      (go if self.turns.add_final_prefix(self.rows[r], self.rows) else stop).append(r)
    self.rows.extend(go, [list(self.turns.final_prefix[0]) for _ in go])
    if stop:
      self.rows.set_done(stop)

  def _decode(self, rows: list[int]) -> list[int]:
    """One decode call; the rows whose turn ended, read."""
    out = self.rows.decode(self.chunk)
    toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
    lps, reasons = np.asarray(out.logprobs), np.asarray(out.stop_reason)
    ended = []
    for r in rows:
      row = self.rows[r]
      sampler_row = row.sampler_row
      ids, lp = self.partial.pop(r, ([], []))
      ids += toks[sampler_row, :lens[sampler_row]].tolist()
      lp += lps[sampler_row, :lens[sampler_row]].tolist()
      reason = int(reasons[sampler_row])
      cap = self.turns.cap(self.wave.inputs[row.prompt_index])
      if reason == PAUSED and cap is not None and len(ids) >= cap:
        reason = BUDGET                  # the question's own turn budget is spent
      if reason == PAUSED:
        self.partial[r] = (ids, lp)
        continue
      self.turns.read(row, ids, lp, reason, cap)
      ended.append(r)
    return ended

  def _turns_ended(self, ended: list[int]) -> None:
    """Hooks, searches and observations of the rows whose turn ended."""
    if self.hooks:
      ended = run_hooks(self.hooks, self.rows, ended, self.turns.total - 1, self.wave.records,
                        self.wave.seed, self.wave.first_row)
    searching = [r for r in ended if self.turns.searches(self.rows[r])]
    if not self.chunk:                   # one retrieval call now, then every row in order
      hits = dict(zip(searching, self.retrieval.fetch(*self._request(searching)))
                  if searching else {})
      self.turns.prefetch([(self.rows[r], hits[r]) for r in searching])
      for r in ended:
        self._after(r, self._observe(r, hits.get(r, ())))
      return
    for r in ended:
      if r not in searching:
        self._after(r, self._observe(r, ()))
    if searching:
      request = self.retrieval.request(*self._request(searching))
      self.inflight.append((self.pool.submit(self.retrieval.search, *request), searching))
      self.waiting.update(searching)
      self.stopped += searching          # no decoding past the search until its documents
      if self._decoding():               # the call runs while other rows decode on
        self.rows.stats["searches_behind_decoding"] += 1

  def _request(self, rows: list[int]) -> tuple:
    """(rows, their prompt inputs, their records) for `RetrievalStep`."""
    rs = [self.rows[r] for r in rows]
    return (rs, [self.wave.inputs[x.prompt_index] for x in rs],
            [self.wave.records[x.prompt_index] for x in rs])

  def _collect(self) -> None:
    """Chunks: documents that arrived are observed; the searches are waited for when no row
    decodes."""
    while self.inflight:
      future, rows = self.inflight[0]
      if not future.done() and self._decoding():
        break
      self.inflight.pop(0)
      hits = self.retrieval.take_hits([self.rows[r] for r in rows], self.retrieval.wait(future))
      self.turns.prefetch([(self.rows[r], h) for r, h in zip(rows, hits)])
      for r, h in zip(rows, hits):
        self.waiting.discard(r)
        self._after(r, self._observe(r, h))

  def _observe(self, r: int, hits) -> bool:
    row = self.rows[r]
    return self.turns.observe(row, hits, self.rows, self.wave.inputs[row.prompt_index])

  def _after(self, r: int, goes_on: bool) -> None:
    """Row r's turn was observed: it stopped, or its next turn starts (`Turns.advance`)."""
    if not goes_on:
      (self.stopped if self.chunk else self.ended).append(r)
      return
    if not self.chunk:
      self.ready.append(r)               # its observation goes in, even after the last turn
    if self.turns.advance(self.rows[r]):
      self.stopped.append(r)
      return
    self._enter(r)
