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



def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
  """sum(num) / sum(den) along the last axis; NaN where the denominator is 0."""
  d = den.sum(axis=-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(d > 0, num.sum(axis=-1) / np.where(d > 0, d, 1), np.nan)


def _ratio_estimate(stat, arrays: Sequence[np.ndarray], n: int, resamples: int, level: float,
                    seed: int) -> Estimate:
  """`stat(*arrays)` on the questions and on `resamples` draws of them (undefined draws
  dropped), as an Estimate with a percentile interval."""
  point = float(stat(*arrays))
  if not np.isfinite(point):
    return Estimate(float("nan"), float("nan"), float("nan"), 0)
  idx = np.random.default_rng(seed).integers(0, arrays[0].size, (resamples, arrays[0].size))
  draws = stat(*(x[idx] for x in arrays))
  draws = draws[np.isfinite(draws)]
  alpha = (1 - level) / 2
  return Estimate(point, float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha)),
                  n)


def bootstrap_ratio(num: Sequence[float], den: Sequence[float], *, resamples: int = 2000,
                    level: float = 0.95, seed: int = 0) -> Estimate:
  """sum(num) / sum(den) over questions (a rate over the questions it applies to) with a
  percentile bootstrap over questions; `n` counts the questions with den > 0."""
  x, d = np.asarray(num, np.float64), np.asarray(den, np.float64)
  if x.shape != d.shape:
    raise ValueError(f"num and den need equal lengths, got {x.shape} and {d.shape}")
  return _ratio_estimate(_ratio, (x, d), int((d > 0).sum()), resamples, level, seed)


def bootstrap_ratio_diff(num_b: Sequence[float], den_b: Sequence[float], num_a: Sequence[float],
                         den_a: Sequence[float], *, resamples: int = 2000, level: float = 0.95,
                         seed: int = 0) -> Estimate:
  """Paired bootstrap of ratio(B) - ratio(A), ratio = sum(num) / sum(den), over the same
  questions: each draw takes questions, and both arms' ratios are computed on that draw (the
  questions a rate applies to may differ between arms, e.g. "the first search failed").
  `n`: the questions it applies to in both arms."""
  arrays = tuple(np.asarray(x, np.float64) for x in (num_b, den_b, num_a, den_a))
  if len({x.shape for x in arrays}) != 1:
    raise ValueError(f"a paired ratio bootstrap needs equal lengths, got "
                     f"{[x.shape for x in arrays]}")
  n = int(((arrays[1] > 0) & (arrays[3] > 0)).sum())
  return _ratio_estimate(lambda nb, db, na, da: _ratio(nb, db) - _ratio(na, da), arrays, n,
                         resamples, level, seed)
