"""Merges requests arriving from many threads into batched decodes of one `LocalChatModel`.

A background thread waits for a request, then keeps collecting for up to `max_wait_ms` (or
until `max_batch` are waiting), splits what it has by sampling settings (temperature, top_p,
stop strings, seed: one sampler call needs them equal; `max_tokens` may differ per row) and
runs one `generate_tokens` per group, answering each request's future.  While a batch decodes,
new requests queue up and form the next batch, so under load batches fill without waiting.
`submit` raises `Overloaded` when `max_queue` requests are already waiting.

A group the model has not compiled programs for (`model.is_compiled` False: a first top-p or
greedy request, a new stop width, a longer prompt bucket) is handed to a compile thread and
decoded there once compiled, so its seconds of compilation never hold up the groups the model
has compiled already, which the batching thread keeps serving.

Counters: `requests` (submitted), `batches` (model calls), `rows` (requests answered),
`compiling` (groups on the compile thread now), `cold_groups` (groups ever sent there).
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
    self.compiling = self.cold_groups = 0
    self._cold = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="chat-compile")
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

  def _dispatch(self, items: list[_Item]) -> None:
    """Runs a compiled group here; one that would compile goes to the compile thread."""
    temperature, top_p, stop, _ = items[0].key
    probe = getattr(self.model, "is_compiled", None)
    try:
      compiled = probe is None or probe([it.prompt for it in items],
                                        [it.max_tokens for it in items], temperature,
                                        stop or None, top_p)
    except Exception:  # noqa: BLE001  (a bad request: `_run` answers it with the error)
      compiled = True
    if compiled:
      self._run(items)
      return
    with self._lock:
      self.compiling += 1
      self.cold_groups += 1
    self._cold.submit(self._run_cold, items)

  def _run_cold(self, items: list[_Item]) -> None:
    try:
      self._run(items)
    finally:
      with self._lock:
        self.compiling -= 1

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
        self._dispatch(items)

  def close(self) -> None:
    """Stops the thread; requests still queued get a RuntimeError."""
    self._closed.set()
    self._thread.join(timeout=30)
    self._cold.shutdown(wait=True)
    while True:
      try:
        it = self._queue.get_nowait()
      except queue.Empty:
        break
      it.future.set_exception(RuntimeError("the batcher was closed"))

  def stats(self) -> dict:
    with self._lock:
      return {"requests": self.requests, "batches": self.batches, "rows": self.rows,
              "pending": self.pending(), "compiling": self.compiling,
              "cold_groups": self.cold_groups}
