"""In-process retrievers: a query encoder or BM25 in front of a vector index and the passage store.

Empty (whitespace-only) queries get an empty hit list from every backend, so a policy that
emits `<search></search>` sees "no results" rather than arbitrary passages.  Long queries are
truncated by the encoder's `max_length` (dense) or used whole (BM25).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from ragjax.retrieval.store import PassageStore
from ragjax.retrieval.types import Hit, check_search_args


class VectorIndex(Protocol):
  dim: int

  def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    ...


def _split_empty(queries: list[str]) -> list[int]:
  return [i for i, q in enumerate(queries) if q.strip()]


class DenseRetriever:
  """Encoder (kind="query") -> ScaNN or exact index -> passages.

  The three stages are separate methods so the server can run them over the queries of many
  requests at once and time each (`ragjax.retrieval.query_batcher`)."""

  def __init__(self, store: PassageStore, encoder, index: VectorIndex):
    if encoder.dim != index.dim:
      raise ValueError(f"encoder dim {encoder.dim} does not match index dim {index.dim}")
    self.store, self.encoder, self.index = store, encoder, index

  def encode(self, queries: Sequence[str]) -> np.ndarray:
    return self.encoder.encode(list(queries), kind="query")

  def search_vectors(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return self.index.search(vectors, k)

  def fetch(self, rows: np.ndarray, scores: np.ndarray) -> list[list[Hit]]:
    return self.store.hits(rows, scores)

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    queries = check_search_args(queries, k)
    out: list[list[Hit]] = [[] for _ in queries]
    live = _split_empty(queries)
    if live:
      rows, scores = self.search_vectors(self.encode([queries[i] for i in live]), k)
      for i, hits in zip(live, self.fetch(rows, scores)):
        out[i] = hits
    return out


class BM25Retriever:
  def __init__(self, store: PassageStore, index):
    self.store, self.index = store, index

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    queries = check_search_args(queries, k)
    out: list[list[Hit]] = [[] for _ in queries]
    live = _split_empty(queries)
    if live:
      rows, scores = self.index.search([queries[i] for i in live], k)
      for i, hits in zip(live, self.store.hits(rows, scores)):
        out[i] = hits
    return out
