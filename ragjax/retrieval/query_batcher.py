"""One query-encoder call for the queries of all concurrent requests, and a cache by query text.

Query encoding dominates a dense retriever's time (FlashRAG measured the e5 query encoder at
6.63 s of a 6.68 s batch), and a request-at-a-time server encodes each request's few queries in
its own calls.  Here the server's handlers `submit(queries, k)` from their threads and one
worker thread takes every request waiting (up to `max_batch` queries), encodes the distinct
texts it has not seen in one encoder call, searches each group of requests sharing a k, fetches
the passages, and hands each request its hits with the time split (queue / encode / search /
fetch).  While the encoder is busy, new requests queue up and form the next batch.

The encoder runs fixed-shape calls at a few bucketed token widths (`TextEncoder`: one compiled
program per bucket), so a text's vector does not depend on what it was batched with, and the
index scores each query on its own: a query gets the same hits alone, batched with others, or
from the cache (which holds exactly the vector the encoder gave).

Retrievers without separate stages (BM25) are searched request by request in the same worker,
as are requests carrying per-query `contexts` for a retriever with `search_with_context` (a task
router, UR²'s proxy): those go to `search_with_context` whole; a plain index ignores contexts.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Optional

import numpy as np

from ragjax.retrieval.query_cache import LRUCache
from ragjax.retrieval.types import Hit


@dataclasses.dataclass
class Timing:
  """Seconds spent on one submitted chunk (its batch's encode / search / fetch)."""
  queue_s: float = 0.0
  encode_s: float = 0.0
  search_s: float = 0.0
  fetch_s: float = 0.0
  batch_queries: int = 0        # queries in the batch this chunk rode in (all requests)
  encoded: int = 0              # texts that batch sent to the encoder
  cached: int = 0               # this chunk's queries answered from the text cache

  def add(self, other: "Timing") -> None:
    for f in ("queue_s", "encode_s", "search_s", "fetch_s"):
      setattr(self, f, getattr(self, f) + getattr(other, f))
    self.batch_queries = max(self.batch_queries, other.batch_queries)
    self.encoded += other.encoded
    self.cached += other.cached

  def to_json(self) -> dict:
    out = dataclasses.asdict(self)
    for f in ("queue_s", "encode_s", "search_s", "fetch_s"):
      out[f] = round(out[f], 6)
    return out


@dataclasses.dataclass
class _Job:
  queries: list
  k: int
  submitted: float
  contexts: dict = dataclasses.field(default_factory=dict)
  done: threading.Event = dataclasses.field(default_factory=threading.Event)
  hits: Optional[list] = None
  error: Optional[BaseException] = None
  timing: Timing = dataclasses.field(default_factory=Timing)


class QueryBatcher:
  """`submit(queries, k) -> (hits, Timing)` from any thread; `close()` stops the worker."""

  def __init__(self, retriever, max_batch: int = 256, cache_size: int = 10_000):
    if max_batch < 1:
      raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    self.retriever, self.max_batch = retriever, max_batch
    self.staged = all(hasattr(retriever, m) for m in ("encode", "search_vectors", "fetch"))
    self.takes_context = hasattr(retriever, "search_with_context")
    self.cache = LRUCache(cache_size)
    self._jobs: collections.deque = collections.deque()
    self._cv = threading.Condition()
    self._closed = False
    self._worker = threading.Thread(target=self._loop, name="query-batcher", daemon=True)
    self._worker.start()

  def submit(self, queries: list[str], k: int, contexts: Optional[dict] = None
             ) -> tuple[list[list[Hit]], Timing]:
    """Hits per query and the time split; `contexts` = {name: one value per query}."""
    contexts = contexts if contexts and self.takes_context else {}
    job = _Job(list(queries), k, time.perf_counter(), contexts)
    with self._cv:
      if self._closed:
        raise RuntimeError("the query batcher is closed")
      self._jobs.append(job)
      self._cv.notify()
    job.done.wait()
    if job.error is not None:
      raise job.error
    return job.hits, job.timing

  def close(self) -> None:
    with self._cv:
      self._closed = True
      self._cv.notify()
    self._worker.join(timeout=10)

  def _take(self) -> list[_Job]:
    with self._cv:
      while not self._jobs and not self._closed:
        self._cv.wait()
      if not self._jobs:
        return []
      batch = [self._jobs.popleft()]
      size = len(batch[0].queries)
      while self._jobs and size + len(self._jobs[0].queries) <= self.max_batch:
        size += len(self._jobs[0].queries)
        batch.append(self._jobs.popleft())
      return batch

  def _loop(self) -> None:
    while True:
      batch = self._take()
      if not batch:
        return
      try:
        plain = [j for j in batch if not j.contexts]
        self._run_whole([j for j in batch if j.contexts])
        if plain:
          self._run(plain) if self.staged else self._run_whole(plain)
      except BaseException as e:      # every waiting request gets the error, the worker lives on
        for job in batch:
          job.error = e
      for job in batch:
        job.done.set()

  def _run_whole(self, batch: list[_Job]) -> None:
    for job in batch:
      t0 = time.perf_counter()
      job.timing.queue_s = t0 - job.submitted
      if job.contexts:
        job.hits = self.retriever.search_with_context(job.queries, job.k, **job.contexts)
      else:
        job.hits = self.retriever.search(job.queries, job.k)
      job.timing.search_s = time.perf_counter() - t0
      job.timing.batch_queries = len(job.queries)

  def _run(self, batch: list[_Job]) -> None:
    start = time.perf_counter()
    total = sum(len(j.queries) for j in batch)
    vectors: dict[str, np.ndarray] = {}
    texts = [q for q in dict.fromkeys(q for j in batch for q in j.queries) if q.strip()]
    for q in texts:
      got = self.cache.get(q)
      if got is not None:
        vectors[q] = got
    for job in batch:
      job.timing.queue_s = start - job.submitted
      job.timing.batch_queries = total
      job.timing.cached = sum(q in vectors for q in job.queries)
    missing = [q for q in texts if q not in vectors]
    if missing:
      for q, v in zip(missing, self.retriever.encode(missing)):
        vectors[q] = v
        self.cache.put(q, v)
    encode_s = time.perf_counter() - start
    search_s = fetch_s = 0.0
    for job in batch:
      job.hits = [[] for _ in job.queries]
    for k in sorted({j.k for j in batch}):
      slots = [(job, i) for job in batch if job.k == k for i, q in enumerate(job.queries) if q.strip()]
      if not slots:
        continue
      t0 = time.perf_counter()
      rows, scores = self.retriever.search_vectors(
          np.stack([vectors[job.queries[i]] for job, i in slots]), k)
      t1 = time.perf_counter()
      for (job, i), hits in zip(slots, self.retriever.fetch(rows, scores)):
        job.hits[i] = hits
      search_s += t1 - t0
      fetch_s += time.perf_counter() - t1
    for job in batch:
      job.timing.encode_s, job.timing.search_s, job.timing.fetch_s = encode_s, search_s, fetch_s
      job.timing.encoded = len(missing)
