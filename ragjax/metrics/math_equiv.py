"""Rule-based math answer equivalence (UR²'s MATH500 / Minerva columns), with `math-verify`.

    math_equal("\\\\frac{1}{2}", ["0.5"])  -> 1.0

UR² scores math with Hendrycks' `is_equiv` and then an LLM judge (seeds_ur2_rezero.md §A3.1,
§A6); a rule-only verifier is the documented local substitute (§A9.4).  Both sides are parsed
as LaTeX (wrapped in `$...$` when they carry no delimiters) and compared symbolically by
math-verify (sets, intervals, fractions vs decimals, units stripped); a normalised string match
is tried first so answers sympy cannot parse (text, names) still count.
"""

from __future__ import annotations

import threading
from typing import Optional, Sequence


def _as_latex(text: str) -> str:
  t = text.strip()
  return t if t.startswith("$") or "\\boxed" in t else f"${t}$"


def _plain(text: str) -> str:
  return "".join(text.replace("\\!", "").replace("$", "").split()).lower()


def math_equal(prediction: Optional[str], golden_answers: Sequence[str] | str) -> float:
  """1.0 iff the prediction is equivalent to any gold answer (an empty prediction is 0)."""
  if prediction is None or not prediction.strip():
    return 0.0
  golds = [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)
  if any(_plain(prediction) == _plain(g) for g in golds):
    return 1.0
  from math_verify import parse, verify
  # math-verify times out with SIGALRM, which only the main thread may set.
  timeout = 5 if threading.current_thread() is threading.main_thread() else None
  pred = parse(_as_latex(prediction), parsing_timeout=timeout)
  if not pred:
    return 0.0
  for g in golds:
    gold = parse(_as_latex(g), parsing_timeout=timeout)
    if gold and verify(gold, pred, timeout_seconds=timeout):
      return 1.0
  return 0.0
