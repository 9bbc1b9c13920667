"""Wall-clock timing shared by the benchmarks."""

from __future__ import annotations

import time


def best_time(fn, repeats: int, warmup: bool = False) -> float:
  """The fastest of `repeats` calls of `fn` in seconds (after one untimed call if `warmup`)."""
  if warmup:
    fn()
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t0)
  return best


def median_time(fn, repeats: int) -> float:
  """The median of `repeats` calls of `fn` in seconds, each waited for (`block_until_ready`),
  after one untimed call (compiles)."""
  import statistics

  import jax
  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return statistics.median(times)
