"""An LRU cache in front of any `Retriever`: repeated (query, k) pairs skip the backend.

RL rollouts repeat queries a lot (G samples of one prompt often issue the same first search),
so the cache sits in the client and can wrap an in-process retriever the same way.  Only the
misses of a batch go to the backend, in one batched call.
"""

from __future__ import annotations

import collections
import threading
from typing import Sequence

from ragjax.retrieval.types import Hit, Retriever, check_search_args


class LRUCache:
  def __init__(self, maxsize: int):
    if maxsize < 0:
      raise ValueError(f"cache size must be >= 0, got {maxsize}")
    self.maxsize = maxsize
    self._data: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()
    self.hits = self.misses = 0

  def get(self, key):
    with self._lock:
      if key in self._data:
        self._data.move_to_end(key)
        self.hits += 1
        return self._data[key]
      self.misses += 1
      return None

  def put(self, key, value) -> None:
    if self.maxsize == 0:
      return
    with self._lock:
      self._data[key] = value
      self._data.move_to_end(key)
      while len(self._data) > self.maxsize:
        self._data.popitem(last=False)

  def __len__(self) -> int:
    return len(self._data)


def cached_search(cache: LRUCache, queries: Sequence[str], k: int, backend) -> list[list[Hit]]:
  """Answers from `cache` where possible; `backend(missing_queries, k)` for the rest."""
  queries = check_search_args(queries, k)
  out: list = [None] * len(queries)
  missing: dict[str, list[int]] = {}
  for i, q in enumerate(queries):
    got = cache.get((q, k))
    if got is None:
      missing.setdefault(q, []).append(i)
    else:
      out[i] = list(got)
  if missing:
    uniq = list(missing)
    for q, hits in zip(uniq, backend(uniq, k)):
      cache.put((q, k), tuple(hits))
      for i in missing[q]:
        out[i] = list(hits)
  return out


class CachedRetriever:
  """Wraps an in-process `Retriever` with an LRU cache of `maxsize` (query, k) entries."""

  def __init__(self, inner: Retriever, maxsize: int = 100_000):
    self.inner, self.cache = inner, LRUCache(maxsize)

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    return cached_search(self.cache, queries, k, self.inner.search)
