"""Bucketed widths: jitted functions see a few array shapes, so they compile a few programs."""

from __future__ import annotations


def pick_bucket(buckets: tuple[int, ...], n: int, what: str) -> int:
  """The smallest bucket holding n tokens, or a clear error naming what overflowed."""
  for b in buckets:
    if n <= b:
      return b
  raise ValueError(f"{what} has {n} tokens, more than the largest bucket {buckets[-1]}")
