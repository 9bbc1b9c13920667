"""A disk cache of chat replies keyed by the full request, so a resumed run does not pay twice.

The file is JSON lines, one record per reply, appended as each reply arrives:

    {"key": sha256, "request": {model, messages, max_tokens, temperature, stop, top_p},
     "text": ..., "finish_reason": ...}

`key` is the SHA-256 of the canonical JSON of `request`, so any change to the model name, a
message, the token budget, the temperature, top_p or the stop strings is a different entry.
A run killed mid-write leaves a partial last line; loading skips any line that is not a whole
JSON record (counted in `skipped_lines`), and the first append after such a tail starts a new
line first, so the fragment never merges with a good record.  Each record is one `os.write` on
an O_APPEND descriptor, so several processes may append to one file (each sees the others'
records when it next opens the file).  Sampled replies (temperature > 0) are cached too: a
resumed run replays the same sample instead of drawing a new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import Optional, Sequence

from ragjax.services.chat_model import (ChatModel, ChatServiceError, Message, check_messages_list,
                                        check_sampling, check_stop)


def request_record(model: str, messages: Sequence[Message], max_tokens: int, temperature: float,
                   stop: Sequence[str], top_p: float = 1.0) -> dict:
  """The request fields a reply depends on, in canonical form."""
  return {"model": model, "messages": [{"role": m["role"], "content": m["content"]}
                                       for m in messages],
          "max_tokens": int(max_tokens), "temperature": float(temperature),
          "stop": list(stop), "top_p": float(top_p)}


def request_key(record: dict) -> str:
  blob = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
  return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ChatCache:
  """Reply texts by request key, backed by an append-only JSONL file (see module docstring)."""

  def __init__(self, path: str, fsync: bool = False):
    self.path, self.fsync = path, fsync
    self._data: dict[str, dict] = {}
    self._lock = threading.Lock()
    self.skipped_lines = 0
    self._needs_newline = False
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(path):
      self._load()
    self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

  def _load(self) -> None:
    with open(self.path, "rb") as f:
      blob = f.read()
    if blob and not blob.endswith(b"\n"):
      self._needs_newline = True
    for line in blob.split(b"\n"):
      if not line.strip():
        continue
      try:
        rec = json.loads(line.decode("utf-8"))
        key, text = rec["key"], rec["text"]
        if not isinstance(key, str) or not isinstance(text, str):
          raise ValueError("bad field types")
      except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        self.skipped_lines += 1
        continue
      self._data[key] = {"text": text, "finish_reason": rec.get("finish_reason")}

  def get(self, key: str) -> Optional[dict]:
    """{"text", "finish_reason"} (None when the writer did not know it) or None."""
    with self._lock:
      return self._data.get(key)

  def put(self, key: str, request: dict, text: str, finish_reason: Optional[str] = None) -> None:
    line = json.dumps({"key": key, "request": request, "text": text,
                       "finish_reason": finish_reason}, ensure_ascii=False) + "\n"
    data = line.encode("utf-8")
    with self._lock:
      if self._needs_newline:
        data = b"\n" + data
        self._needs_newline = False
      os.write(self._fd, data)
      if self.fsync:
        os.fsync(self._fd)
      self._data[key] = {"text": text, "finish_reason": finish_reason}

  def __len__(self) -> int:
    return len(self._data)

  def __contains__(self, key: str) -> bool:
    return key in self._data

  def close(self) -> None:
    with self._lock:
      if self._fd >= 0:
        os.close(self._fd)
        self._fd = -1


class CachedChatModel:
  """Any `ChatModel` behind a `ChatCache`: only the misses of a batch reach the model, in one
  call; replies are written as soon as the call returns (or, when it fails with a
  `ChatServiceError`, the replies in its `partial`)."""

  def __init__(self, inner: ChatModel, path: str, model_name: str = "local"):
    self.inner, self.model_name = inner, model_name
    self.cache = ChatCache(path)
    self.cache_hits = self.cache_misses = 0

  def complete(self, messages_list, max_tokens: int = 256, temperature: float = 0.0,
               stop: Optional[Sequence[str]] = None, top_p: float = 1.0,
               seed: Optional[int] = None) -> list[str]:
    convs = check_messages_list(messages_list)
    check_sampling(max_tokens, temperature, top_p)
    stop = check_stop(stop)
    out: list = [None] * len(convs)
    missing: dict[str, list[int]] = {}
    records: dict[str, dict] = {}
    for i, msgs in enumerate(convs):
      rec = request_record(self.model_name, msgs, max_tokens, temperature, stop, top_p)
      if seed is not None:
        rec["seed"] = int(seed)
      key = request_key(rec)
      hit = self.cache.get(key)
      if hit is not None:
        out[i] = hit["text"]
        self.cache_hits += 1
      else:
        missing.setdefault(key, []).append(i)
        records[key] = rec
    if not missing:
      return out
    keys = list(missing)
    self.cache_misses += len(keys)
    try:
      texts = self.inner.complete([records[k]["messages"] for k in keys], max_tokens=max_tokens,
                                  temperature=temperature, stop=stop or None, top_p=top_p,
                                  seed=seed)
    except ChatServiceError as e:
      partial = e.partial or [None] * len(keys)
      for k, t in zip(keys, partial):
        if t is not None:
          self.cache.put(k, records[k], t)
          for i in missing[k]:
            out[i] = t
      raise ChatServiceError(str(e), partial=out) from e
    for k, t in zip(keys, texts):
      self.cache.put(k, records[k], t)
      for i in missing[k]:
        out[i] = t
    return out
