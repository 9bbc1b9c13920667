"""Percentile-bootstrap confidence intervals for per-question scores."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Estimate:
  """A mean with its bootstrap interval; `n` questions behind it."""
  mean: float
  low: float
  high: float
  n: int

  def __str__(self) -> str:
    if self.n == 0:
      return "n/a"
    return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def bootstrap_mean(scores: Sequence[float], *, resamples: int = 2000, level: float = 0.95,
                   seed: int = 0) -> Estimate:
  """Mean of `scores` with a percentile bootstrap interval (deterministic from `seed`)."""
  x = np.asarray(scores, np.float64)
  if x.size == 0:
    return Estimate(float("nan"), float("nan"), float("nan"), 0)
  rng = np.random.default_rng(seed)
  means = x[rng.integers(0, x.size, (resamples, x.size))].mean(axis=1)
  alpha = (1 - level) / 2
  return Estimate(float(x.mean()), float(np.quantile(means, alpha)),
                  float(np.quantile(means, 1 - alpha)), int(x.size))


def bootstrap_diff(a: Sequence[float], b: Sequence[float], *, resamples: int = 2000,
                   level: float = 0.95, seed: int = 0) -> Estimate:
  """Paired bootstrap of mean(a) - mean(b) over the same questions."""
  x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if x.shape != y.shape:
    raise ValueError(f"paired bootstrap needs equal lengths, got {x.shape} and {y.shape}")
  return bootstrap_mean(x - y, resamples=resamples, level=level, seed=seed)
