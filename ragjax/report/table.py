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
