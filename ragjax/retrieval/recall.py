"""Retrieval quality against QA files: recall@k of gold paragraphs and of answer strings.

Gold paragraphs are identified by Wikipedia title (HotpotQA's own convention for supporting
facts): a question's support recall@k is the fraction of its gold titles among the titles of the
top-k hits.  Answer recall@k is whether any normalised gold answer occurs as a whole-token span
in a normalised top-k passage (DPR's "has answer"), with SQuAD normalisation.
"""

from __future__ import annotations

import dataclasses
import re
import string
from typing import Optional, Sequence

from ragjax.retrieval.paragraphs import record_gold_titles
from ragjax.retrieval.records import RecordError, iter_json_records
from ragjax.retrieval.types import Hit


@dataclasses.dataclass(frozen=True)
class Question:
  id: str
  question: str
  answers: tuple[str, ...]
  gold_titles: tuple[str, ...]     # empty when the file names no supporting paragraphs


def normalize_answer(s: str) -> str:
  s = s.lower()
  s = "".join(ch for ch in s if ch not in set(string.punctuation))
  s = re.sub(r"\b(a|an|the)\b", " ", s)
  return " ".join(s.split())


def _answers(rec: dict, where: str) -> tuple[str, ...]:
  if isinstance(rec.get("golden_answers"), list):
    ans = rec["golden_answers"]
  elif "answer" in rec:
    ans = [rec["answer"]] + list(rec.get("answer_aliases") or [])
  else:
    raise ValueError(f"{where}: record has neither 'golden_answers' nor 'answer'")
  return tuple(str(a) for a in ans if str(a).strip())


def read_questions(path: str, limit: Optional[int] = None) -> list[Question]:
  """HotpotQA / 2Wiki (JSON list or jsonl), HF hotpot_qa rows, IRCoT, MuSiQue, FlashRAG jsonl;
  gold titles per format from `ragjax.retrieval.paragraphs`."""
  out = []
  for loc, rec in iter_json_records(path):
    if limit is not None and len(out) >= limit:
      break
    where = f"{path}:{loc.line}"
    if isinstance(rec, RecordError):
      raise ValueError(f"{where}: {rec.detail}")
    q = rec.get("question", rec.get("question_text"))
    if not isinstance(q, str):
      raise ValueError(f"{where}: record has no string 'question'")
    try:
      gold = record_gold_titles(rec, where)
    except RecordError as e:
      raise ValueError(f"{where}: {e.detail}") from None
    out.append(Question(str(rec.get("id", rec.get("_id", loc.line))), q, _answers(rec, where), gold))
  return out


def has_answer(answers: Sequence[str], text: str) -> bool:
  t = f" {normalize_answer(text)} "
  return any(f" {a} " in t for a in map(normalize_answer, answers) if a)


def recall_table(questions: Sequence[Question], hits: Sequence[Sequence[Hit]],
                 ks: Sequence[int]) -> dict:
  """{k: {"support_recall", "support_all", "answer_recall", "n_support", "n"}} averaged."""
  table = {}
  for k in ks:
    sup, sup_all, ans, n_sup = 0.0, 0.0, 0.0, 0
    for q, hs in zip(questions, hits):
      top = hs[:k]
      if q.gold_titles:
        found = {h.title for h in top}
        frac = sum(t in found for t in q.gold_titles) / len(q.gold_titles)
        sup += frac
        sup_all += frac == 1.0
        n_sup += 1
      ans += any(has_answer(q.answers, h.contents) for h in top)
    table[k] = {"support_recall": sup / max(n_sup, 1), "support_all": sup_all / max(n_sup, 1),
                "answer_recall": ans / max(len(questions), 1), "n_support": n_sup, "n": len(questions)}
  return table


def format_table(table: dict, title: str = "") -> str:
  lines = [title] if title else []
  lines.append(f"{'k':>4} | {'support recall':>14} | {'all gold found':>14} | {'answer recall':>13}")
  lines.append("-" * 56)
  for k, row in table.items():
    lines.append(f"{k:>4} | {row['support_recall']:>14.4f} | {row['support_all']:>14.4f} | "
                 f"{row['answer_recall']:>13.4f}")
  return "\n".join(lines)
