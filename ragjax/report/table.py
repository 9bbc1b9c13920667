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


def markdown_table(rows: Sequence[Mapping], columns: Sequence[str], metric: str = "EM") -> str:
  """rows: {"split", "system", "searches", <column>: Estimate}; columns: 'all' + types."""
  head = ["split", "system"] + [f"{metric} {c}" for c in columns] + ["searches/q"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = [r["split"], r["system"]] + [str(r[c]) for c in columns]
    cells.append(f"{r.get('searches', float('nan')):.2f}")
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)
