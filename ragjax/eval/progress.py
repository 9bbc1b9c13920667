"""Progress of a long evaluation: questions done, throughput and time left, one line per batch.

    p = Progress(total=todo, log=print)
    p.update("nq", done_in_dataset, dataset_size, n_new)

Throughput counts only questions run in this process (a resumed run does not claim the
questions it read back from disk), and the ETA is the remaining questions at that rate.
"""

from __future__ import annotations

import time
from typing import Callable


def fmt_seconds(s: float) -> str:
  if s != s or s == float("inf"):
    return "?"
  s = int(round(s))
  h, rem = divmod(s, 3600)
  m, sec = divmod(rem, 60)
  return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


class Progress:
  def __init__(self, total: int, log: Callable[[str], None], clock=time.monotonic):
    self.total, self.log, self.clock = total, log, clock
    self.start = clock()
    self.done = 0

  @property
  def elapsed(self) -> float:
    return self.clock() - self.start

  @property
  def rate(self) -> float:
    return self.done / self.elapsed if self.done and self.elapsed > 0 else 0.0

  def eta(self) -> float:
    return (self.total - self.done) / self.rate if self.rate else float("inf")

  def update(self, key: str, dataset_done: int, dataset_size: int, new: int) -> None:
    self.done += new
    self.log(f"{key}: {dataset_done}/{dataset_size} | run {self.done}/{self.total} questions, "
             f"{self.rate:.2f} q/s, elapsed {fmt_seconds(self.elapsed)}, "
             f"ETA {fmt_seconds(self.eta())}")
