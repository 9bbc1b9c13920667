"""Per-question scores of a parsed answer: every metric a suite can ask for except the judge's.

    scores = score_answer(row.answer, record["golden_answers"], ("em", "f1", "letter_em"))

EM / F1 / cover-EM are SQuAD-normalised (`ragjax.metrics.answer_metrics`, the same functions
the rewards use); letter EM and math equivalence are UR²'s multiple-choice and math columns.
A trajectory with no answer scores 0 on every metric.  `acc` (an LLM judge) is filled in by
`ragjax.eval.judging`.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ragjax.metrics import answer_metrics, letter_match, math_equal


def score_answer(answer: Optional[str], golden_answers: Sequence[str],
                 metrics: Sequence[str]) -> dict[str, float]:
  out = {}
  if {"em", "f1", "cover_em"} & set(metrics):
    base = answer_metrics(answer, golden_answers)
    out.update({k: v for k, v in base.items() if k in metrics})
  if "letter_em" in metrics:
    out["letter_em"] = letter_match(answer, golden_answers)
  if "math_equiv" in metrics:
    out["math_equiv"] = math_equal(answer, golden_answers)
  return out
