"""SQuAD answer normalisation and the answer metrics every method reports (EM, token F1, cover-EM).

One implementation, so training rewards and evaluation tables can never disagree.
"""

from __future__ import annotations

import collections
import re
import string
from typing import Optional, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)
_YES_NO = frozenset({"yes", "no", "noanswer"})


def normalize_answer(text: str) -> str:
  """lowercase -> drop punctuation -> drop articles a|an|the -> collapse whitespace."""
  text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


_SPACED_PUNCT = frozenset(string.punctuation + "\u2018\u2019\u00b4`")
_BOOLS = {"True": "yes", "False": "no"}


def normalize_answer_spaced(text: str) -> str:
  """R1-Searcher's and UR²'s reward-server normalisation: "True"/"False" -> yes/no, `_` ->
  space, lowercase, punctuation (and curly quotes, acute, backtick) -> a space rather than
  dropped ("Jean-Luc" is two tokens), drop articles, collapse whitespace."""
  text = _BOOLS.get(text, text).replace("_", " ").lower()
  text = "".join(" " if ch in _SPACED_PUNCT else ch for ch in text)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def _golds(golden_answers) -> list[str]:
  if isinstance(golden_answers, str):
    return [golden_answers]
  golds = [g for g in golden_answers if isinstance(g, str)]
  if not golds:
    raise ValueError(f"golden_answers must be a string or a non-empty list of strings, got {golden_answers!r}")
  return golds


def exact_match(prediction: str, golden_answers: Sequence[str] | str) -> float:
  """1.0 iff the normalised prediction equals any normalised gold alias.  An empty normalised
  prediction or alias never matches (articles are dropped, so the gold letter "A" and the
  answer "The" both normalise to "")."""
  pred = normalize_answer(prediction)
  return float(bool(pred) and any(pred == normalize_answer(g) for g in _golds(golden_answers)))


def cover_exact_match(prediction: str, golden_answers: Sequence[str] | str) -> float:
  """1.0 iff any non-empty normalised gold alias is a substring of the normalised prediction."""
  pred = normalize_answer(prediction)
  return float(any(normalize_answer(g) in pred for g in _golds(golden_answers)
                   if normalize_answer(g)))


def cover_word_match(text: str, golden_answers: Sequence[str] | str) -> float:
  """1.0 iff a non-empty normalised gold alias occurs in the normalised text as whole words
  (cover EM on word boundaries: the gold "no" is not found in "not", "1" not in "1999")."""
  padded = f" {normalize_answer(text)} "
  return float(any(f" {normalize_answer(g)} " in padded for g in _golds(golden_answers)
                   if normalize_answer(g)))


def _f1(pred: str, gold: str, normalize=normalize_answer) -> float:
  p, g = normalize(pred), normalize(gold)
  if (p in _YES_NO or g in _YES_NO) and p != g:
    return 0.0
  pt, gt = p.split(), g.split()
  common = collections.Counter(pt) & collections.Counter(gt)
  same = sum(common.values())
  if same == 0:
    return 0.0
  precision, recall = same / len(pt), same / len(gt)
  return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golden_answers: Sequence[str] | str,
             normalize=normalize_answer) -> float:
  """SQuAD token F1 (multiset overlap), max over gold aliases; yes/no/noanswer must match.
  `normalize_answer_spaced` gives UR²'s reward F1."""
  return max(_f1(prediction, g, normalize) for g in _golds(golden_answers))


def answer_metrics(answer: Optional[str], golden_answers) -> dict[str, float]:
  """EM, F1 and cover-EM of a parsed answer; a trajectory with no answer scores 0 on all."""
  if answer is None:
    return {"em": 0.0, "f1": 0.0, "cover_em": 0.0}
  return {"em": exact_match(answer, golden_answers), "f1": token_f1(answer, golden_answers),
          "cover_em": cover_exact_match(answer, golden_answers)}
