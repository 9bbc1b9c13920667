"""`ChatModel` over any OpenAI-compatible `/v1/chat/completions` endpoint.

    chat = OpenAIChatClient("http://127.0.0.1:8001/v1", "judge", cache_path="runs/judge.jsonl")
    replies = chat.complete([[{"role": "user", "content": "2 + 2?"}]], max_tokens=8)

vLLM, SGLang, hosted APIs and `python -m ragjax.services.chat_server` all speak it.  One POST per
conversation, up to `max_concurrency` in flight (a thread pool; a batching server such as
ragjax's or vLLM's merges them into one decode).  Each request has a connect/read `timeout`;
connection errors, timeouts, 429 and 5xx are retried with jittered exponential backoff (a
restarting server is waited out), other 4xx are not (the request itself is wrong).  Retrying
stops after `max_retries` retries or when the call's overall `deadline` (seconds, shared by all
requests of one `complete`) has passed, whichever comes first.  Every failure is one
`ChatServiceError` naming the URL, the attempts and the cause; the replies that did arrive are
on it (`partial`) and, with `cache_path`, already on disk (see `ragjax.services.reply_cache`),
so a rerun pays only for what is missing.

Counters a trainer can log (`stats()`): `requests_sent` (HTTP attempts), `retry_count`,
`cache_hits`, `cache_misses`, `failures`.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import threading
import time
from typing import Optional, Sequence

import requests

from ragjax.services.reply_cache import ChatCache, request_key, request_record
from ragjax.services.chat_model import (ChatServiceError, ChatServiceUnavailable, Completion,
                                        check_messages_list, check_sampling, check_stop)


def chat_completions_url(base_url: str) -> str:
  """`http://h:p` / `http://h:p/v1` / a full `.../chat/completions` URL -> the endpoint URL."""
  if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
    raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
  url = base_url.rstrip("/")
  if url.endswith("/chat/completions"):
    return url
  if url.endswith("/v1"):
    return url + "/chat/completions"
  return url + "/v1/chat/completions"


class _Retryable(Exception):
  """A retryable HTTP status (429, 5xx)."""


class _Rejected(Exception):
  """A non-retryable answer (4xx other than 429, or a malformed 200)."""


class OpenAIChatClient:
  """See the module docstring.  `api_key_env` names the environment variable holding the key
  (read once, here; never logged); None sends no Authorization header."""

  def __init__(self, base_url: str, model: str, *, api_key_env: Optional[str] = None,
               max_concurrency: int = 8, timeout: float = 120.0, connect_timeout: float = 10.0,
               max_retries: int = 8, backoff: float = 0.5, max_backoff: float = 8.0,
               deadline: float = 900.0, cache_path: Optional[str] = None):
    self.url = chat_completions_url(base_url)
    if not isinstance(model, str) or not model:
      raise ValueError(f"model must be a non-empty string, got {model!r}")
    if max_concurrency < 1:
      raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    for name, v in (("timeout", timeout), ("connect_timeout", connect_timeout),
                    ("deadline", deadline)):
      if not v > 0:
        raise ValueError(f"{name} must be > 0 seconds, got {v}")
    if max_retries < 0 or backoff < 0 or max_backoff < 0:
      raise ValueError(f"max_retries, backoff and max_backoff must be >= 0, got "
                       f"{max_retries}, {backoff}, {max_backoff}")
    self.model = model
    self.max_concurrency, self.timeout = max_concurrency, timeout
    self.connect_timeout = connect_timeout
    self.max_retries, self.backoff, self.max_backoff = max_retries, backoff, max_backoff
    self.deadline = deadline
    self._headers = {"Content-Type": "application/json"}
    if api_key_env is not None:
      key = os.environ.get(api_key_env)
      if not key:
        raise ValueError(f"api_key_env={api_key_env!r}: that environment variable is not set")
      self._headers["Authorization"] = f"Bearer {key}"
    self.cache = ChatCache(cache_path) if cache_path else None
    self._local = threading.local()
    self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
    self._lock = threading.Lock()
    self.requests_sent = self.retry_count = self.cache_hits = self.cache_misses = 0
    self.failures = 0

  # ---- counters ----
  def _count(self, name: str, n: int = 1) -> None:
    with self._lock:
      setattr(self, name, getattr(self, name) + n)

  def stats(self) -> dict:
    with self._lock:
      return {"requests_sent": self.requests_sent, "retry_count": self.retry_count,
              "cache_hits": self.cache_hits, "cache_misses": self.cache_misses,
              "failures": self.failures}

  # ---- one request ----
  def _session(self) -> requests.Session:
    s = getattr(self._local, "session", None)
    if s is None:
      s = self._local.session = requests.Session()
    return s

  def _attempt(self, body: dict, remaining: float) -> Completion:
    """One POST: the completion, or `_Retryable` / `_Rejected` / a requests exception."""
    self._count("requests_sent")
    r = self._session().post(self.url, json=body, headers=self._headers,
                             timeout=(min(self.connect_timeout, remaining),
                                      min(self.timeout, remaining)))
    if r.status_code == 429 or r.status_code >= 500:
      raise _Retryable(f"HTTP {r.status_code}: {r.text[:200]}")
    if r.status_code != 200:
      raise _Rejected(f"rejected the request: HTTP {r.status_code}: {r.text[:300]}")
    try:
      payload = r.json()
      choice = payload["choices"][0]
      content = choice["message"].get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
      raise _Rejected(f"answered without choices[0].message: {r.text[:200]}") from None
    if content is not None and not isinstance(content, str):
      raise _Rejected(f"answered a non-string message content: {r.text[:200]}")
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    return Completion(content or "", str(choice.get("finish_reason") or "stop"),
                      usage.get("prompt_tokens"), usage.get("completion_tokens"))

  def _post(self, body: dict, t_end: float) -> Completion:
    attempts, last = 0, "no attempt made"
    while True:
      remaining = t_end - time.monotonic()
      if attempts > self.max_retries or remaining <= 0:
        why = "retries exhausted" if attempts > self.max_retries else \
            f"deadline of {self.deadline:g}s passed"
        raise ChatServiceUnavailable(f"POST {self.url} failed after {attempts} attempts ({why}): "
                                     f"{last}")
      if attempts:
        delay = min(self.max_backoff, self.backoff * 2 ** (attempts - 1))
        time.sleep(min(delay * (0.5 + random.random() / 2), remaining))
        self._count("retry_count")
        remaining = t_end - time.monotonic()
        if remaining <= 0:
          continue
      attempts += 1
      try:
        return self._attempt(body, remaining)
      except requests.Timeout:
        last = f"timed out after {min(self.timeout, remaining):.3g}s"
      except requests.ConnectionError as e:
        last = f"connection failed ({type(e).__name__}: {str(e)[:160]})"
      except _Retryable as e:
        last = str(e)
      except _Rejected as e:
        raise ChatServiceError(f"POST {self.url} {e} (attempt {attempts}, not retried)") from None

  def _one(self, key: str, record: dict, body: dict, t_end: float) -> Completion:
    out = self._post(body, t_end)
    if self.cache is not None:
      self.cache.put(key, record, out.text, out.finish_reason)
    return out

  # ---- ChatModel ----
  def generate(self, messages_list, max_tokens: int = 256, temperature: float = 0.0,
               stop: Optional[Sequence[str]] = None, top_p: float = 1.0,
               seed: Optional[int] = None) -> list[Completion]:
    """Completions (text, finish_reason, usage) in request order; see `complete`."""
    convs = check_messages_list(messages_list)
    check_sampling(max_tokens, temperature, top_p)
    stop = check_stop(stop)
    t_end = time.monotonic() + self.deadline
    out: list = [None] * len(convs)
    todo: dict[str, tuple[dict, dict, list[int]]] = {}
    for i, msgs in enumerate(convs):
      record = request_record(self.model, msgs, max_tokens, temperature, stop, top_p)
      if seed is not None:
        record["seed"] = int(seed)
      key = request_key(record)
      hit = self.cache.get(key) if self.cache is not None else None
      if hit is not None:
        self._count("cache_hits")
        out[i] = Completion(hit["text"], hit["finish_reason"] or "stop")
        continue
      if key in todo:
        todo[key][2].append(i)
        continue
      body = {"model": self.model, "messages": record["messages"], "max_tokens": max_tokens,
              "temperature": float(temperature)}
      if stop:
        body["stop"] = list(stop)
      if top_p != 1.0:
        body["top_p"] = float(top_p)
      if seed is not None:
        body["seed"] = int(seed)
      todo[key] = (record, body, [i])
    if not todo:
      return out
    if self.cache is not None:
      self._count("cache_misses", len(todo))
    with self._lock:
      if self._pool is None:
        self._pool = concurrent.futures.ThreadPoolExecutor(self.max_concurrency,
                                                           thread_name_prefix="chat-client")
    futures = {self._pool.submit(self._one, k, rec, body, t_end): rows
               for k, (rec, body, rows) in todo.items()}
    errors = []
    for fut, rows in futures.items():
      try:
        c = fut.result()
      except ChatServiceError as e:
        errors.append(e)
        continue
      for i in rows:
        out[i] = c
    if errors:
      self._count("failures", len(errors))
      kind = (ChatServiceUnavailable if all(isinstance(e, ChatServiceUnavailable) for e in errors)
              else ChatServiceError)
      raise kind(f"{errors[0]} ({len(errors)} of {len(todo)} requests failed; the "
                 f"other replies are kept{' in the cache' if self.cache else ''})",
                 partial=[c.text if c is not None else None for c in out])
    return out

  def complete(self, messages_list, max_tokens: int = 256, temperature: float = 0.0,
               stop: Optional[Sequence[str]] = None, top_p: float = 1.0,
               seed: Optional[int] = None) -> list[str]:
    """One reply per conversation, in order.  Identical requests in one call are sent once;
    pass a distinct `seed` per draw to get distinct samples of one prompt (the seed is part of
    the request and of the cache key)."""
    return [c.text for c in self.generate(messages_list, max_tokens, temperature, stop, top_p,
                                          seed)]

  def close(self) -> None:
    if self._pool is not None:
      self._pool.shutdown(wait=True)
      self._pool = None
    if self.cache is not None:
      self.cache.close()
