"""A turn's retrieval: the searching rows' request, the retriever call, the hits each row keeps.

`retriever` is anything with `search(queries, k) -> hits`; one that also has
`search_with_context(queries, k, **per_query_lists)` gets the protocol's `retrieval_context` of
each query (UR²'s task and reasoning so far), and each query's prompt record as `records` when
it sets `needs_records` (a noisy retriever that drops gold passages).  A protocol that dedups
documents asks for k + (the most documents a searching row has seen) and each row keeps its
unseen top k, within its documents-per-trajectory cap.

The step counts the run's retrieval time: `seconds` inside the retriever (`retrieval_s`), and
`wait_seconds` the rollout waited for it (`retrieval_wait_s`, less than `seconds` when searches
run in a thread behind decoding: `EngineConfig.decode_chunk`), and `calls`.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

from ragjax.rollout.protocols.base import Protocol, hit_id
from ragjax.rollout.row_store import Row
from ragjax.rollout.textspan import decode


class RetrievalStep:
  def __init__(self, protocol: Protocol, retriever, tokenizer):
    self.protocol, self.retriever, self.tokenizer = protocol, retriever, tokenizer
    self.seconds, self.wait_seconds, self.calls = 0.0, 0.0, 0

  def timings(self) -> dict:
    return {"retrieval_s": self.seconds, "retrieval_wait_s": self.wait_seconds,
            "retrieval_calls": self.calls}

  def request(self, rows: Sequence[Row], inputs: Sequence, records: Sequence) -> tuple:
    """(queries, k, per-query context lists or None) of the searching `rows`; `inputs` and
    `records` are their prompts (`PromptInput`s and the records given to the run)."""
    k = self.protocol.top_k
    extra = max(len(row.seen_docs) for row in rows) if self.protocol.dedup_docs else 0
    queries = [row.action.query for row in rows]
    contexts = self._contexts(rows, inputs)
    if getattr(self.retriever, "needs_records", False):
      contexts = dict(contexts or {}, records=list(records))
    return queries, k + extra, contexts

  def _contexts(self, rows: Sequence[Row], inputs: Sequence) -> Optional[dict]:
    """{keyword: per-query list} from the protocol's `retrieval_context`, when the retriever
    takes them (`search_with_context`) and the protocol gives them; else None."""
    if not hasattr(self.retriever, "search_with_context"):
      return None
    per_row = []
    for row, inp in zip(rows, inputs):
      response = decode(self.tokenizer, row.tokens[row.prompt_len:])
      per_row.append(self.protocol.retrieval_context(inp, response))
    if any(c is None for c in per_row):
      return None
    return {key: [c[key] for c in per_row] for key in per_row[0]}

  def search(self, queries, k, contexts) -> list:
    """The retriever call (it touches no row, so it may run in a thread)."""
    t0 = time.perf_counter()
    if contexts is None:
      results = self.retriever.search(queries, k)
    else:
      results = self.retriever.search_with_context(queries, k, **contexts)
    self.seconds += time.perf_counter() - t0
    self.calls += 1
    if len(results) != len(queries):
      raise ValueError(f"retriever returned {len(results)} result lists for {len(queries)} "
                       f"queries")
    return results

  def wait(self, future) -> list:
    """The results of a search running in a thread (the wait is counted)."""
    t0 = time.perf_counter()
    results = future.result()
    self.wait_seconds += time.perf_counter() - t0
    return results

  def fetch(self, rows: Sequence[Row], inputs: Sequence, records: Sequence) -> list:
    """One batched call for `rows`, waited for; each row's hits (see `take_hits`)."""
    t0 = time.perf_counter()
    results = self.search(*self.request(rows, inputs, records))
    self.wait_seconds += time.perf_counter() - t0
    return self.take_hits(rows, results)

  def take_hits(self, rows: Sequence[Row], results) -> list:
    """Each row's top-k hits, without documents it has seen when the protocol dedups and
    within its documents-per-trajectory cap; the rows' seen documents are updated."""
    k = self.protocol.top_k
    out = []
    for row, hits in zip(rows, results):
      hits = list(hits)
      if self.protocol.dedup_docs:
        hits = [h for h in hits if hit_id(h) not in row.seen_docs]
      limit = k
      cap = self.protocol.max_docs_per_trajectory
      if cap is not None:
        limit = max(0, min(k, cap - len(row.seen_docs)))
      hits = hits[:limit]
      row.seen_docs.extend(hit_id(h) for h in hits)
      out.append(hits)
    return out
