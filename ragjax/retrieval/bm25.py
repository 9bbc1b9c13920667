"""BM25 over the passage store, backed by bm25s (sparse scores precomputed at index time).

Queries are tokenised with the same bm25s tokenizer and stopword list as the corpus; words the
corpus never saw are dropped, and a query with no known word returns no hits (BM25 would give
every passage score 0, which is noise, not a ranking).  Hits with score 0 are dropped too.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

_META = "ragjax_bm25.json"


class BM25Index:
  def __init__(self, model, n: int, stopwords: str):
    self._model, self.n, self.stopwords = model, n, stopwords
    self._vocab = model.vocab_dict

  @classmethod
  def build(cls, texts: Sequence[str], k1: float = 0.9, b: float = 0.4,
            stopwords: str = "en") -> "BM25Index":
    """k1=0.9, b=0.4 are Pyserini's defaults, which Search-R1's BM25 server uses."""
    import bm25s
    model = bm25s.BM25(k1=k1, b=b)
    tokens = bm25s.tokenize(list(texts), stopwords=stopwords, show_progress=False)
    model.index(tokens, show_progress=False)
    return cls(model, len(texts), stopwords)

  def _query_tokens(self, queries: Sequence[str]) -> list[list[str]]:
    import bm25s
    toks = bm25s.tokenize(list(queries), stopwords=self.stopwords, return_ids=False,
                          show_progress=False)
    return [[t for t in q if t in self._vocab] for q in toks]

  def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """-> (rows [Q, k] int64 with -1 where fewer than k passages match, scores [Q, k]).

    Scores are bm25s's own (`get_scores`, one query at a time); the top k of every query are
    picked here on the host in one batched selection (`top_k`), not by bm25s's `retrieve`,
    whose default selection calls `jax.lax.top_k` once per query on JAX's default device: on
    a GPU that is a transfer, a kernel and a sync per query, behind the policy's decoding.
    """
    rows = np.full((len(queries), k), -1, np.int64)
    scores = np.full((len(queries), k), -np.inf, np.float32)
    toks = self._query_tokens(queries)
    live = [i for i, t in enumerate(toks) if t]
    if live:
      top, top_scores = top_k(np.stack([self._model.get_scores(toks[i]) for i in live]), k)
      rows[live, :top.shape[1]] = top
      scores[live, :top.shape[1]] = top_scores
    return rows, scores

  def save(self, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    self._model.save(directory, show_progress=False)
    with open(os.path.join(directory, _META), "w") as f:
      json.dump({"n": self.n, "stopwords": self.stopwords}, f)

  @classmethod
  def load(cls, directory: str, mmap: bool = True) -> "BM25Index":
    import bm25s
    meta_path = os.path.join(directory, _META)
    if not os.path.exists(meta_path):
      raise FileNotFoundError(f"no BM25 index at {directory} (missing {_META})")
    with open(meta_path) as f:
      meta = json.load(f)
    model = bm25s.BM25.load(directory, mmap=mmap, show_progress=False)
    return cls(model, meta["n"], meta["stopwords"])


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
  """The k best positive scores of every row of `scores` [Q, N], best first, ties to the lower
  index (as `jax.lax.top_k`).  -> (indices [Q, k] int64, -1 past a row's last positive score;
  their scores [Q, k], -inf there)."""
  q, n = scores.shape
  k = min(k, n)
  idx = np.full((q, k), -1, np.int64)
  val = np.full((q, k), -np.inf, np.float32)
  if k == 0 or q == 0:
    return idx, val
  for r in range(q):
    row = scores[r]
    cand = np.flatnonzero(row > 0)                # in index order; BM25 rows are mostly 0
    if len(cand) > k:
      vals = row[cand]
      cand = cand[vals >= np.partition(vals, len(vals) - k)[len(vals) - k]]   # ties kept
    best = cand[np.argsort(-row[cand], kind="stable")[:k]]
    idx[r, :len(best)] = best
    val[r, :len(best)] = row[best]
  return idx, val
