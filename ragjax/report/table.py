"""The evaluation table: one row per (split, system), EM with a CI per question type."""

from __future__ import annotations

from typing import Mapping, Sequence

from ragjax.report.bootstrap import Estimate, bootstrap_mean


def em_by_type(scores: Sequence[float], qtypes: Sequence[str], order: Sequence[str]
               ) -> dict[str, Estimate]:
  """'all' plus one estimate per question type in `order` (types absent give n=0)."""
  out = {"all": bootstrap_mean(scores)}
  for qt in order:
    out[qt] = bootstrap_mean([s for s, t in zip(scores, qtypes) if t == qt])
  return out


def markdown_table(rows: Sequence[Mapping], columns: Sequence[str], metric: str = "EM",
                   extra: Sequence[tuple[str, str]] = ()) -> str:
  """rows: {"split", "system", "searches", <column>: Estimate}; columns: 'all' + types;
  `extra`: (header, row key) of more Estimate columns (e.g. F1 over all questions)."""
  head = (["split", "system"] + [f"{metric} {c}" for c in columns] + [h for h, _ in extra]
          + ["searches/q"])
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = ([r["split"], r["system"]] + [str(r[c]) for c in columns]
             + [str(r[k]) for _, k in extra])
    cells.append(f"{r.get('searches', float('nan')):.2f}")
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def step_table(records: Sequence[Mapping], columns: Sequence[tuple[str, str]],
               digits: int = 3) -> str:
  """One markdown row per training step (`metrics.jsonl` records that carry `step`): the
  `columns` given as (header, metric key); a step that did not log a key shows '-'."""
  steps = [r for r in records if "step" in r]
  lines = ["| step | " + " | ".join(h for h, _ in columns) + " |",
           "|" + "---|" * (len(columns) + 1)]
  for r in steps:
    cells = [str(int(r["step"]))]
    for _, key in columns:
      v = r.get(key)
      cells.append("-" if v is None else (f"{v:.{digits}f}" if isinstance(v, float)
                                          else str(v)))
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)
