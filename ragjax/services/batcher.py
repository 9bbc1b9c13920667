"""Merges requests arriving from many threads into batched decodes of one `LocalChatModel`.

A background thread waits for a request, then keeps collecting for up to `max_wait_ms` (or
until `max_batch` are waiting), splits what it has by sampling settings (temperature, top_p,
stop strings, seed: one sampler call needs them equal; `max_tokens` may differ per row) and
runs one `generate_tokens` per group, answering each request's future.  While a batch decodes,
new requests queue up and form the next batch, so under load batches fill without waiting.
`submit` raises `Overloaded` when `max_queue` requests are already waiting.

Counters: `requests` (submitted), `batches` (model calls), `rows` (requests answered).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import queue
import threading
import time
from typing import Optional, Sequence


class Overloaded(RuntimeError):
  pass


@dataclasses.dataclass
class _Item:
  prompt: list
  max_tokens: int
  key: tuple
  future: concurrent.futures.Future


class RequestBatcher:
  """See the module docstring.  `model` needs `generate_tokens` and `max_batch`."""

  def __init__(self, model, *, max_batch: Optional[int] = None, max_wait_ms: float = 5.0,
               max_queue: int = 1024):
    self.model = model
    self.max_batch = int(max_batch or model.max_batch)
    if self.max_batch < 1:
      raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
    if max_wait_ms < 0:
      raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
    if max_queue < 1:
      raise ValueError(f"max_queue must be >= 1, got {max_queue}")
    self.max_wait = max_wait_ms / 1000.0
    self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
    self._closed = threading.Event()
    self._lock = threading.Lock()
    self.requests = self.batches = self.rows = 0
    self._thread = threading.Thread(target=self._loop, name="chat-batcher", daemon=True)
    self._thread.start()

  def submit(self, prompt: Sequence[int], max_tokens: int, temperature: float = 0.0,
             top_p: float = 1.0, stop: Sequence[str] = (), seed: Optional[int] = None
             ) -> concurrent.futures.Future:
    if self._closed.is_set():
      raise RuntimeError("the batcher is closed")
    fut: concurrent.futures.Future = concurrent.futures.Future()
    key = (float(temperature), float(top_p), tuple(stop), seed)
    try:
      self._queue.put_nowait(_Item(list(prompt), int(max_tokens), key, fut))
    except queue.Full:
      raise Overloaded(f"{self._queue.maxsize} requests are already waiting") from None
    with self._lock:
      self.requests += 1
    return fut

  def pending(self) -> int:
    return self._queue.qsize()

  def _collect(self) -> list[_Item]:
    try:
      first = self._queue.get(timeout=0.1)
    except queue.Empty:
      return []
    batch = [first]
    t_end = time.monotonic() + self.max_wait
    while len(batch) < self.max_batch:
      try:
        batch.append(self._queue.get_nowait())
        continue
      except queue.Empty:
        pass
      remaining = t_end - time.monotonic()
      if remaining <= 0:
        break
      try:
        batch.append(self._queue.get(timeout=remaining))
      except queue.Empty:
        break
    return batch

  def _run(self, items: list[_Item]) -> None:
    temperature, top_p, stop, seed = items[0].key
    try:
      outs = self.model.generate_tokens([it.prompt for it in items],
                                        [it.max_tokens for it in items], temperature,
                                        stop or None, top_p, seed)
    except Exception as e:                          # answered to every caller of the group
      for it in items:
        it.future.set_exception(e)
      return
    with self._lock:
      self.batches += 1
      self.rows += len(items)
    for it, out in zip(items, outs):
      it.future.set_result(out)

  def _loop(self) -> None:
    while not self._closed.is_set():
      batch = self._collect()
      groups: dict[tuple, list[_Item]] = {}
      for it in batch:
        groups.setdefault(it.key, []).append(it)
      for items in groups.values():
        self._run(items)

  def close(self) -> None:
    """Stops the thread; requests still queued get a RuntimeError."""
    self._closed.set()
    self._thread.join(timeout=30)
    while True:
      try:
        it = self._queue.get_nowait()
      except queue.Empty:
        break
      it.future.set_exception(RuntimeError("the batcher was closed"))

  def stats(self) -> dict:
    with self._lock:
      return {"requests": self.requests, "batches": self.batches, "rows": self.rows,
              "pending": self.pending()}
