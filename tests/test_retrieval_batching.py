"""QueryBatcher: queries of concurrent submits share one encoder call; the cache by query text;
empty queries; k groups; errors reach every waiting request and the worker survives.

The retriever here is a test double that records its encoder calls (the real server path, with
MiniLM and ScaNN, is tested end to end in test_retrieval_tune.py)."""

import threading
import time

import numpy as np
import pytest

from ragjax.retrieval.query_batcher import QueryBatcher
from ragjax.retrieval.types import Hit


class RecordingRetriever:
  """Stages like DenseRetriever; a text's vector is a hash of it; the encoder is slow enough
  for requests to pile up behind it, and can be told to fail."""

  def __init__(self, delay=0.2):
    self.encode_calls, self.search_calls, self.delay, self.fail = [], [], delay, False
    self.first_call = threading.Event()

  def encode(self, texts):
    self.encode_calls.append(list(texts))
    self.first_call.set()
    time.sleep(self.delay)
    if self.fail:
      raise RuntimeError("encoder out of memory")
    return np.array([[float(sum(map(ord, t))), float(len(t))] for t in texts], np.float32)

  def search_vectors(self, vectors, k):
    self.search_calls.append((len(vectors), k))
    rows = (vectors[:, :1].astype(np.int64) + np.arange(k)[None, :]) % 1000
    return rows, np.repeat(vectors[:, 1:2], k, axis=1)

  def fetch(self, rows, scores):
    return [[Hit(f"p{r}", f"text {r}", float(s)) for r, s in zip(rr, ss)] for rr, ss in zip(rows, scores)]

  def search(self, queries, k):             # the request-at-a-time answer, for comparison
    out = []
    for q in queries:
      if not q.strip():
        out.append([])
        continue
      v = np.array([[float(sum(map(ord, q))), float(len(q))]], np.float32)
      out.append(self.fetch(*self.search_vectors(v, k))[0])
    return out


def test_concurrent_submits_share_one_encoder_call_and_get_their_own_hits():
  r = RecordingRetriever()
  b = QueryBatcher(r, max_batch=64)
  try:
    results = {}
    first = threading.Thread(target=lambda: results.update(first=b.submit(["warm"], 3)))
    first.start()
    assert r.first_call.wait(10)              # the worker is busy encoding "warm"
    requests_ = {i: [f"q{i}a", f"q{i}b", "shared", ""] for i in range(5)}
    threads = [threading.Thread(target=lambda i=i: results.update({i: b.submit(requests_[i], 2 + i % 2)}))
               for i in requests_]
    for t in threads:
      t.start()
    time.sleep(0.05)
    for t in threads + [first]:
      t.join(10)
    # One call for "warm", one for the 11 distinct non-empty texts of the 5 queued requests.
    assert len(r.encode_calls) == 2 and sorted(r.encode_calls[1]) == sorted(
        {q for qs in requests_.values() for q in qs if q})
    assert sorted(n for n, _ in r.search_calls[1:]) == [6, 9]        # one search per k (3 and 2)
    for i, qs in requests_.items():
      hits, timing = results[i]
      assert hits == r.search(qs, 2 + i % 2) and hits[3] == []        # same as alone; "" -> []
      assert timing.batch_queries == 20 and timing.encoded == 11 and timing.queue_s > 0.1
    # The cache by query text: the same queries again are not encoded.
    hits, timing = b.submit(requests_[0], 2)
    assert len(r.encode_calls) == 2 and timing.cached == 3 and timing.encoded == 0
    assert hits == results[0][0]
  finally:
    b.close()


def test_an_encoder_error_reaches_every_waiting_request_and_the_worker_lives_on():
  r = RecordingRetriever(delay=0.05)
  b = QueryBatcher(r, cache_size=0)
  try:
    r.fail = True
    with pytest.raises(RuntimeError, match="encoder out of memory"):
      b.submit(["x"], 1)
    r.fail = False
    hits, timing = b.submit(["x"], 1)
    assert hits == r.search(["x"], 1) and timing.cached == 0
  finally:
    b.close()
  with pytest.raises(RuntimeError, match="closed"):
    b.submit(["x"], 1)


def test_large_requests_are_not_merged_past_max_batch():
  r = RecordingRetriever(delay=0.0)
  b = QueryBatcher(r, max_batch=4)
  try:
    hits, timing = b.submit([f"q{i}" for i in range(7)], 1)    # one job may exceed it alone
    assert len(hits) == 7 and timing.batch_queries == 7
  finally:
    b.close()
