"""Is run A better than run B on the same questions?  Paired bootstrap and McNemar, per dataset
and for the average.

    rows, md = compare_runs(suite, preds_a, preds_b, name_a="A", name_b="B")

Questions are paired by dataset and index (and must have the same id).  Per dataset: the
difference of the column's own metric (percent points) with a 95% paired-bootstrap interval
(questions resampled, both runs together), and McNemar's test on a binary score (the column's
metric when it is binary, else EM): exact two-sided binomial on the discordant pairs when
there are fewer than 25, else the chi-square statistic with continuity correction
(|b - c| - 1)^2 / (b + c) on 1 degree of freedom.  For the average: the macro difference with
a stratified bootstrap (each dataset resampled on its own, then averaged, as the table's
macro average) and McNemar pooled over every question (REX-RAG's "Overall", seeds §1.7); its
A and B are the macro means over the paired questions.  A dataset where the runs hold
different question counts is compared on the questions both have, and the table says so.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from ragjax.report.bootstrap import Estimate, bootstrap_diff

BINARY = ("em", "cover_em", "letter_em", "math_equiv", "acc")
EXACT_BELOW = 25


def mcnemar(a: Sequence[float], b: Sequence[float]) -> dict:
  """McNemar's test on paired 0/1 outcomes: b = A right & B wrong, c = A wrong & B right."""
  from scipy import stats
  x, y = np.asarray(a, bool), np.asarray(b, bool)
  if x.shape != y.shape:
    raise ValueError(f"McNemar needs paired outcomes, got {x.shape} and {y.shape}")
  n01, n10 = int(np.sum(x & ~y)), int(np.sum(~x & y))
  n = n01 + n10
  if n == 0:
    return {"b": 0, "c": 0, "p": 1.0, "method": "no discordant pairs"}
  if n < EXACT_BELOW:
    p = float(stats.binomtest(n01, n, 0.5, alternative="two-sided").pvalue)
    return {"b": n01, "c": n10, "p": min(1.0, p), "method": "exact binomial"}
  chi2 = (abs(n01 - n10) - 1) ** 2 / n
  return {"b": n01, "c": n10, "p": float(stats.chi2.sf(chi2, 1)), "chi2": chi2,
          "method": "chi-square, continuity-corrected"}


def stratified_macro_diff(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], *,
                          resamples: int = 2000, level: float = 0.95, seed: int = 0) -> Estimate:
  """Mean over datasets of mean(a) - mean(b), each dataset's questions resampled separately."""
  diffs = [np.asarray(a, np.float64) - np.asarray(b, np.float64) for a, b in pairs]
  diffs = [d for d in diffs if d.size]
  if not diffs:
    return Estimate(float("nan"), float("nan"), float("nan"), 0)
  rng = np.random.default_rng(seed)
  boots = np.zeros(resamples)
  for d in diffs:
    boots += d[rng.integers(0, d.size, (resamples, d.size))].mean(axis=1)
  boots /= len(diffs)
  alpha = (1 - level) / 2
  return Estimate(float(np.mean([d.mean() for d in diffs])), float(np.quantile(boots, alpha)),
                  float(np.quantile(boots, 1 - alpha)), int(sum(d.size for d in diffs)))


def paired_scores(key: str, a: list[dict], b: list[dict], metric: str) -> tuple[list, list]:
  """The two runs' scores on the questions both have, in index order; ids must agree."""
  by_b = {r["index"]: r for r in b}
  xs, ys = [], []
  for r in a:
    other = by_b.get(r["index"])
    if other is None:
      continue
    if str(other["id"]) != str(r["id"]):
      raise ValueError(f"{key}: question {r['index']} is {r['id']!r} in one run and "
                       f"{other['id']!r} in the other; the runs used different data")
    if metric in r["scores"] and metric in other["scores"]:
      xs.append(r["scores"][metric])
      ys.append(other["scores"][metric])
  return xs, ys


@dataclasses.dataclass(frozen=True)
class PairedColumn:
  """One dataset column as `compare_runs` reads a suite's: its key in the predictions, its
  title, the metric paired."""
  key: str
  name: str
  metric: str


@dataclasses.dataclass(frozen=True)
class PairedColumns:
  """The columns `compare_runs` pairs, standing in for a suite."""
  datasets: tuple


def compare_runs(suite, preds_a: dict, preds_b: dict, name_a: str = "A", name_b: str = "B",
                 *, resamples: int = 2000, seed: int = 0) -> tuple[list[dict], str]:
  rows, pairs, pooled_a, pooled_b = [], [], [], []
  for spec in suite.datasets:
    if spec.key not in preds_a or spec.key not in preds_b:
      rows.append({"dataset": spec.name, "key": spec.key, "n": 0, "status": "not in both"})
      continue
    n_a, n_b = len(preds_a[spec.key]), len(preds_b[spec.key])
    xs, ys = paired_scores(spec.key, preds_a[spec.key], preds_b[spec.key], spec.metric)
    binary = spec.metric if spec.metric in BINARY else "em"
    ba, bb = paired_scores(spec.key, preds_a[spec.key], preds_b[spec.key], binary)
    diff = bootstrap_diff(xs, ys, resamples=resamples, seed=seed) if xs else None
    test = mcnemar(ba, bb) if ba else None
    pairs.append((xs, ys))
    pooled_a += ba
    pooled_b += bb
    rows.append({"dataset": spec.name, "key": spec.key, "n": len(xs), "n_a": n_a, "n_b": n_b,
                 "metric": spec.metric,
                 "a": 100 * float(np.mean(xs)) if xs else None,
                 "b": 100 * float(np.mean(ys)) if ys else None,
                 "diff": None if diff is None else 100 * diff.mean,
                 "ci95": None if diff is None else [100 * diff.low, 100 * diff.high],
                 "mcnemar_on": binary, "mcnemar": test, "status": "ok"})
  macro = stratified_macro_diff(pairs, resamples=resamples, seed=seed)
  means = [(np.mean(x), np.mean(y)) for x, y in pairs if len(x)]
  rows.append({"dataset": "Avg (macro)", "key": "_average", "n": macro.n,
               "a": 100 * float(np.mean([m[0] for m in means])) if means else None,
               "b": 100 * float(np.mean([m[1] for m in means])) if means else None,
               "diff": 100 * macro.mean if macro.n else None,
               "ci95": [100 * macro.low, 100 * macro.high] if macro.n else None,
               "mcnemar_on": "pooled", "mcnemar": mcnemar(pooled_a, pooled_b) if pooled_a
               else None, "status": "ok" if macro.n else "no paired questions"})
  return rows, render_comparison(rows, name_a, name_b)


def render_comparison(rows: list[dict], name_a: str, name_b: str) -> str:
  def f(x):
    return "–" if x is None else f"{x:.1f}"
  lines = [f"A = {name_a}", f"B = {name_b}", "",
           "| dataset | n | A | B | A − B (points) | 95% paired bootstrap | McNemar p (b / c) |",
           "|---|---|---|---|---|---|---|"]
  for r in rows:
    if r["status"] != "ok":
      lines.append(f"| {r['dataset']} | 0 | – | – | – | – | {r['status']} |")
      continue
    t = r["mcnemar"]
    test = "–" if t is None else f"{t['p']:.3g} ({t['b']} / {t['c']}, {r['mcnemar_on']})"
    ci = "–" if r["ci95"] is None else f"[{r['ci95'][0]:.1f}, {r['ci95'][1]:.1f}]"
    lines.append(f"| {r['dataset']} | {r['n']} | {f(r.get('a'))} | {f(r.get('b'))} | "
                 f"{f(r['diff'])} | {ci} | {test} |")
  uneven = [r for r in rows if r.get("n_a", r["n"]) != r.get("n_b", r["n"])]
  if uneven:
    lines.append("")
    lines += [f"- {r['dataset']}: A: {r['n_a']} questions, B: {r['n_b']}; compared on the "
              f"{r['n']} both have (the runs' tables are not like for like)." for r in uneven]
  return "\n".join(lines)
