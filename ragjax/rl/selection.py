"""What the trainer's periodic evaluations run on and report, for keep-best.

    trainer.eval_split = "dev" | "test"    the split evaluated every `trainer.eval_every` steps
    trainer.eval_per_source = N            at most N questions of each `data_source`, drawn as
                                           Hugging Face datasets' `shuffle(seed=42).select(
                                           range(N))` does (AutoRefine's `valid_500`: 500)
    trainer.keep_best_metric = "<split>/<metric>[_macro]"

Each evaluation logs `<split>/em`, `/f1`, `/cover_em` (the mean over questions) and their
`_macro` forms (the mean over `data_source` of each source's mean: AutoRefine's
`val/test_score/mean`, `verl/trainer/ppo/ray_trainer.py:584-621`).  Selecting on test data
is the authors' rule where they used it; a dev split is the clean alternative.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ragjax.example_fields import record_field

METRICS = ("em", "f1", "cover_em")
SPLITS = ("dev", "test")


def evaluation_metrics(answers: Sequence[Mapping[str, float]], sources: Sequence[str],
                       split: str) -> dict[str, float]:
  """`<split>/<metric>` (mean over questions) and `<split>/<metric>_macro` (mean over sources
  of each source's mean) of per-question answer metrics."""
  out = {}
  by_source: dict[str, list[int]] = {}
  for i, s in enumerate(sources):
    by_source.setdefault(s, []).append(i)
  for k in METRICS:
    values = np.asarray([a[k] for a in answers], np.float64)
    out[f"{split}/{k}"] = float(values.mean())
    out[f"{split}/{k}_macro"] = float(np.mean([values[idx].mean()
                                               for idx in by_source.values()]))
  return out


def record_source(record: Mapping) -> str:
  return str(record_field(record, "data_source", "") or "")


def per_source_sample(records: Sequence[Mapping], n: int, seed: int = 42) -> list:
  """At most `n` records of each `data_source` (sources in their first order): a source with
  more is permuted by `np.random.default_rng(seed)` and its first `n` kept, as Hugging Face
  datasets' `Dataset.shuffle(seed).select(range(n))` does (AutoRefine's
  `qa_search_test_merge.py:58-60`).  n = 0 keeps every record."""
  if not n:
    return list(records)
  groups: dict[str, list] = {}
  for r in records:
    groups.setdefault(record_source(r), []).append(r)
  out = []
  for group in groups.values():
    if len(group) > n:
      order = np.random.default_rng(seed).permutation(len(group))[:n]
      group = [group[i] for i in order]
    out.extend(group)
  return out


def evaluation_data(splits: Mapping[str, Sequence[Mapping]], split: str, per_source: int):
  """The records the trainer's periodic evaluations run on (None when the split is empty)."""
  records = splits.get(split) or []
  return per_source_sample(records, per_source) or None
