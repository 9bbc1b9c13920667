"""Multiple-choice letter accuracy (UR²'s MMLU-Pro and MedQA columns, seeds_ur2_rezero.md
§A3.1): the extracted answer equals the gold letter, case-insensitively, after stripping."""

from __future__ import annotations

from typing import Optional, Sequence


def letter_match(prediction: Optional[str], golden_answers: Sequence[str] | str) -> float:
  if prediction is None or not prediction.strip():
    return 0.0
  golds = [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)
  return float(any(prediction.strip().lower() == g.strip().lower() for g in golds))
