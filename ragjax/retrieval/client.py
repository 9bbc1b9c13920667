"""HTTP client for a Search-R1 `/retrieve` server that satisfies the `Retriever` protocol.

Timeouts on every request, retries with exponential backoff on connection errors, timeouts,
429 and 5xx (a restarting server is waited out), no retry on other 4xx (the request is wrong),
and an LRU cache of (query, k).  Every failure is a `RetrievalError` naming the URL, the number
of attempts and the cause.
"""

from __future__ import annotations

import random
import time
from typing import Optional, Sequence

import requests

from ragjax.retrieval.cache import LRUCache, cached_search
from ragjax.retrieval.types import Hit, check_search_args


class RetrievalError(RuntimeError):
  pass


def parse_result(payload: dict, n_queries: int, url: str) -> list[list[Hit]]:
  """Reads either Search-R1 result form (with scores, or bare documents)."""
  if not isinstance(payload, dict) or not isinstance(payload.get("result"), list):
    raise RetrievalError(f"{url}: response has no 'result' list: {str(payload)[:200]}")
  rows = payload["result"]
  if len(rows) != n_queries:
    raise RetrievalError(f"{url}: sent {n_queries} queries, got {len(rows)} result lists")
  out = []
  for qi, row in enumerate(rows):
    hits = []
    for j, item in enumerate(row):
      doc, score = (item["document"], item.get("score", 0.0)) if "document" in item else (item, 0.0)
      if "contents" not in doc:
        raise RetrievalError(f"{url}: result[{qi}][{j}] has no 'contents': {str(item)[:200]}")
      hits.append(Hit(str(doc.get("id", "")), doc["contents"], float(score)))
    out.append(hits)
  return out


class SearchClient:
  """`SearchClient("http://127.0.0.1:8000").search(queries, k)`."""

  def __init__(self, url: str, *, timeout: float = 30.0, retries: int = 5, backoff: float = 0.5,
               max_backoff: float = 8.0, cache_size: int = 10_000, batch_size: int = 512,
               session: Optional[requests.Session] = None):
    url = url.rstrip("/")
    self.url = url if url.endswith("/retrieve") else url + "/retrieve"
    self.timeout, self.retries = timeout, retries
    self.backoff, self.max_backoff = backoff, max_backoff
    self.batch_size = batch_size
    self.cache = LRUCache(cache_size)
    self._session = session or requests.Session()

  def _post(self, queries: list[str], k: int) -> list[list[Hit]]:
    body = {"queries": queries, "topk": k, "return_scores": True}
    last = "no attempt made"
    for attempt in range(self.retries + 1):
      if attempt:
        delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        time.sleep(delay * (0.5 + random.random() / 2))
      try:
        r = self._session.post(self.url, json=body, timeout=self.timeout)
      except requests.Timeout:
        last = f"timed out after {self.timeout:g}s"
        continue
      except requests.ConnectionError as e:
        last = f"connection failed ({type(e).__name__}: {str(e)[:160]})"
        continue
      if r.status_code == 429 or r.status_code >= 500:
        last = f"HTTP {r.status_code}: {r.text[:200]}"
        continue
      if r.status_code != 200:
        raise RetrievalError(f"POST {self.url} rejected the request: HTTP {r.status_code}: {r.text[:300]}")
      try:
        payload = r.json()
      except ValueError:
        raise RetrievalError(f"POST {self.url} answered non-JSON: {r.text[:200]}") from None
      return parse_result(payload, len(queries), self.url)
    raise RetrievalError(f"POST {self.url} failed after {self.retries + 1} attempts: {last}")

  def _search_uncached(self, queries: list[str], k: int) -> list[list[Hit]]:
    out: list[list[Hit]] = []
    for s in range(0, len(queries), self.batch_size):
      out.extend(self._post(queries[s:s + self.batch_size], k))
    return out

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    queries = check_search_args(queries, k)
    if not queries:
      return []
    return cached_search(self.cache, queries, k, self._search_uncached)

  def health(self) -> dict:
    url = self.url[: -len("/retrieve")] + "/health"
    try:
      r = self._session.get(url, timeout=self.timeout)
      r.raise_for_status()
      return r.json()
    except requests.RequestException as e:
      raise RetrievalError(f"GET {url} failed: {e}") from None
