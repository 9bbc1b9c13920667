"""HTTP client for a Search-R1 `/retrieve` server that satisfies the `Retriever` protocol.

Timeouts on every request; retries with exponential backoff on what passes (connection
errors, timeouts, 429, 502, 503, 504: a restarting or overloaded server is waited out) until a
`deadline` in seconds per call, with at most `retries` retries; no retry on other 4xx or on a
500 (the same request would fail the same way); an LRU cache of (query, k).  Every failure is
a `RetrievalError` naming the URL, the number of attempts and the cause; `retry_count` counts
the retries for a trainer's metrics.  `search_with_context` sends per-query `contexts` (UR²'s
task and reasoning so far) for a server that routes or summarises with them.
"""

from __future__ import annotations

import random
import time
from typing import Optional, Sequence

import requests

from ragjax.errors import ServiceUnavailable
from ragjax.retrieval.query_cache import LRUCache, cached_search
from ragjax.retrieval.types import Hit, check_search_args


class RetrievalError(RuntimeError):
  """The retriever rejected a request, or answered something unreadable."""


class RetrievalUnavailable(RetrievalError, ServiceUnavailable):
  """No answer within `retriever.deadline` (the server is down or stalled)."""


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


def check_reachable(url: str, timeout: float = 10.0) -> None:
  """Refuses at once a URL where no server answers (refused connection, unknown host, no
  answer within `timeout`): any HTTP answer, even a 404, means a server is there."""
  if not isinstance(url, str) or not url.startswith(("http://", "https://")):
    raise ValueError(f"retriever.url must be an http(s) URL, got {url!r}")
  try:
    requests.get(url[: -len("/retrieve")] + "/health" if url.endswith("/retrieve") else url,
                 timeout=timeout)
  except requests.RequestException as e:
    raise RetrievalError(f"retriever.url {url}: no server answers ({type(e).__name__}); start "
                         f"the retrieval server first (python -m ragjax.retrieval.server)") from None


class SearchClient:
  """`SearchClient("http://127.0.0.1:8000").search(queries, k)`."""

  TRANSIENT = frozenset({429, 502, 503, 504})

  def __init__(self, url: str, *, timeout: float = 30.0, retries: int = 1000,
               deadline: float = 120.0, backoff: float = 0.5, max_backoff: float = 8.0,
               cache_size: int = 10_000, batch_size: int = 512,
               session: Optional[requests.Session] = None):
    url = url.rstrip("/")
    self.url = url if url.endswith("/retrieve") else url + "/retrieve"
    if timeout <= 0 or deadline <= 0 or retries < 0:
      raise ValueError(f"{url}: timeout and deadline must be > 0 and retries >= 0, got "
                       f"{timeout}, {deadline}, {retries}")
    self.timeout, self.retries, self.deadline = timeout, retries, deadline
    self.backoff, self.max_backoff = backoff, max_backoff
    self.batch_size = batch_size
    self.cache = LRUCache(cache_size)
    self.retry_count = 0
    self._session = session or requests.Session()

  def _post(self, queries: list[str], k: int, contexts: Optional[dict] = None
            ) -> list[list[Hit]]:
    body = {"queries": queries, "topk": k, "return_scores": True}
    if contexts:
      body["contexts"] = contexts
    last = "no attempt made"
    end = time.monotonic() + self.deadline
    attempt = 0
    while True:
      if attempt:
        delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        delay *= 0.5 + random.random() / 2
        if attempt > self.retries or time.monotonic() + delay > end:
          break
        time.sleep(delay)
        self.retry_count += 1
      attempt += 1
      try:
        r = self._session.post(self.url, json=body,
                               timeout=max(0.1, min(self.timeout, end - time.monotonic())))
      except requests.Timeout:
        last = f"timed out after {self.timeout:g}s"
        continue
      except requests.ConnectionError as e:
        last = f"connection failed ({type(e).__name__}: {str(e)[:160]})"
        continue
      if r.status_code in self.TRANSIENT:
        last = f"HTTP {r.status_code}: {r.text[:200]}"
        continue
      if r.status_code != 200:
        raise RetrievalError(f"POST {self.url} rejected the request: HTTP {r.status_code}: {r.text[:300]}")
      try:
        payload = r.json()
      except ValueError:
        raise RetrievalError(f"POST {self.url} answered non-JSON: {r.text[:200]}") from None
      return parse_result(payload, len(queries), self.url)
    raise RetrievalUnavailable(f"POST {self.url} failed after {attempt} attempts in "
                         f"{self.deadline:g}s (retriever.deadline): {last}")

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

  def search_with_context(self, queries: Sequence[str], k: int, **contexts) -> list[list[Hit]]:
    """`search` with per-query context lists (strings), cached by (query, k, contexts)."""
    queries = check_search_args(queries, k)
    n = len(queries)
    contexts = {name: [str(x) for x in v] for name, v in contexts.items() if v is not None}
    for name, v in contexts.items():
      if len(v) != n:
        raise ValueError(f"{n} queries but {len(v)} {name!r} values")
    names = sorted(contexts)
    keys = [(q, k, tuple(contexts[m][i] for m in names)) for i, q in enumerate(queries)]
    out: list = [None] * n
    missing: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
      got = self.cache.get(key)
      if got is None:
        missing.setdefault(key, []).append(i)
      else:
        out[i] = list(got)
    todo = list(missing)
    for s in range(0, len(todo), self.batch_size):
      chunk = todo[s:s + self.batch_size]
      first = [missing[key][0] for key in chunk]
      hits = self._post([queries[i] for i in first], k,
                        {m: [contexts[m][i] for i in first] for m in names})
      for key, h in zip(chunk, hits):
        self.cache.put(key, tuple(h))
        for i in missing[key]:
          out[i] = list(h)
    return out

  def health(self) -> dict:
    url = self.url[: -len("/retrieve")] + "/health"
    try:
      r = self._session.get(url, timeout=self.timeout)
      r.raise_for_status()
      return r.json()
    except requests.RequestException as e:
      raise RetrievalError(f"GET {url} failed: {e}") from None
