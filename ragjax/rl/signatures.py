"""Signature metrics: for each method, the quantity its paper's claim is about.

A signature is registered under kind "signature" and maps one trajectory and its dataset
record to a (numerator, denominator) pair; over a set of rows its value is sum(num) /
sum(den), so a rate over the rows it applies to ("of the questions whose first search failed,
the share that searched again") and a plain mean are the same shape.  `rl.signatures` names
the ones a run logs: the trainer logs `signature/<name>` every step (its sampled rows), and
`python -m ragjax.ablate` compares the two arms' greedy test rollouts question by question
(`ragjax.report.bootstrap.bootstrap_ratio_diff`).

  name                        method      num / den
  two_hop_em                  Search-R1   EM / 2-hop question
  retry_after_failed_search   ReZero      searched again / first search found no gold answer
  em_after_failed_search      ReZero      EM / first search found no gold answer
  refine_has_answer           AutoRefine  <refine> blocks containing a gold answer / blocks
  step_relevance              R3-RAG      share of the gold passages retrieved / search step
  gold_recall                 R3-RAG      share of the gold passages any step retrieved /
                                          question (with gold passages)
  em_medium_hard              UR²         EM / question of medium or hard difficulty (as the
                                          start policy's samples scored it)
  searched                    REX-RAG     searched at least once / question (the dead end
                                          of a policy that answers from memory)

"Found no gold answer": no gold answer string in the step's documents (cover match, SQuAD
normalisation).  R3-RAG's relevance is the gold judge's (`ragjax.services.gold_judge`) computed
from document ids: the share of the record's `supporting_ids` among the step's `doc_ids`.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from ragjax import registry
from ragjax.data import curriculum
from ragjax.example_fields import record_field
from ragjax.metrics import answer_metrics, cover_exact_match
from ragjax.rl.rewards.autorefine import refine_texts

Pair = tuple[float, float]


def signature(name: str) -> Callable:
  """Registers `fn(row, example) -> (num, den)` as signature `name`."""
  return registry.register("signature", name)


def first_search_failed(row, example: Mapping) -> bool:
  """The row searched and its first search's documents hold no gold answer."""
  docs = row.doc_texts
  return bool(docs) and cover_exact_match(" ".join(docs[0]), example["golden_answers"]) == 0


def em(row, example: Mapping) -> float:
  return answer_metrics(row.answer, example["golden_answers"])["em"]


@signature("two_hop_em")
def two_hop_em(row, example: Mapping) -> Pair:
  """Search-R1 (multi-hop): exact match on the 2-hop questions."""
  if (example.get("metadata") or {}).get("qtype") != "2hop":
    return 0.0, 0.0
  return em(row, example), 1.0


@signature("retry_after_failed_search")
def retry_after_failed_search(row, example: Mapping) -> Pair:
  """ReZero: of the rows whose first search found no gold answer, the share that searched
  again."""
  if not first_search_failed(row, example):
    return 0.0, 0.0
  return float(row.num_searches >= 2), 1.0


@signature("em_after_failed_search")
def em_after_failed_search(row, example: Mapping) -> Pair:
  """ReZero: exact match of the rows whose first search found no gold answer."""
  if not first_search_failed(row, example):
    return 0.0, 0.0
  return em(row, example), 1.0


@signature("refine_has_answer")
def refine_has_answer(row, example: Mapping) -> Pair:
  """AutoRefine: the share of `<refine>` blocks that contain a gold answer."""
  texts = refine_texts(row, required=False)
  return (float(sum(cover_exact_match(t, example["golden_answers"]) > 0 for t in texts)),
          float(len(texts)))


@signature("step_relevance")
def step_relevance(row, example: Mapping) -> Pair:
  """R3-RAG: per search step, the share of the question's gold passages it retrieved."""
  gold = set(example.get("supporting_ids") or ())
  steps = row.doc_ids
  if not gold or not steps:
    return 0.0, 0.0
  return float(sum(len(gold & set(ids)) / len(gold) for ids in steps)), float(len(steps))


@signature("gold_recall")
def gold_recall(row, example: Mapping) -> Pair:
  """R3-RAG, per question: the share of its gold passages that any of its search steps
  retrieved (0 for a question answered without searching)."""
  gold = set(example.get("supporting_ids") or ())
  if not gold:
    return 0.0, 0.0
  found = set().union(*(set(ids) for ids in row.doc_ids))
  return len(gold & found) / len(gold), 1.0


@signature("em_medium_hard")
def em_medium_hard(row, example: Mapping) -> Pair:
  """UR²: exact match on the questions of medium or hard difficulty (the records'
  `difficulty_score` or label, `ragjax.data.curriculum.difficulty`); unscored questions do not
  count."""
  if record_field(example, "difficulty_score") is None and \
      record_field(example, "difficulty") is None:
    return 0.0, 0.0
  if curriculum.difficulty(example)[0] not in ("medium", "hard"):
    return 0.0, 0.0
  return em(row, example), 1.0


@signature("searched")
def searched(row, example: Mapping) -> Pair:
  """REX-RAG, where the dead end is answering from memory: the share of rows that searched
  at least once before answering."""
  del example
  return float(row.num_searches >= 1), 1.0


def pairs(name: str, rows: Sequence, examples: Sequence[Mapping]) -> tuple[np.ndarray, np.ndarray]:
  """(num, den) arrays of signature `name` over `rows` and their records."""
  fn = registry.lookup("signature", name)
  out = np.asarray([fn(r, ex) for r, ex in zip(rows, examples)], np.float64).reshape(-1, 2)
  return out[:, 0], out[:, 1]


def signature_metrics(names: Sequence[str], rows: Sequence,
                      examples: Sequence[Mapping]) -> dict[str, float]:
  """{"signature/<name>": sum(num) / sum(den)} for each name that applies to some row, and
  `signature/<name>_n`, the rows it applies to (its denominator's count)."""
  stats = {}
  for name in names:
    num, den = pairs(name, rows, examples)
    if den.sum() > 0:
      stats[f"signature/{name}"] = float(num.sum() / den.sum())
    stats[f"signature/{name}_n"] = float((den > 0).sum())
  return stats
