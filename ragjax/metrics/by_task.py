"""An answer metric by name, and UR²'s metric per task, for scoring a record's parsed answer.

    score = answer_score("task", "\\\\frac{1}{2}", {"golden_answers": ["0.5"], "task": "math"})

`task` scores each record with its task's metric, as UR² reports its sets (seeds_ur2_rezero.md
§A6): multiple choice by letter EM (MMLU-Pro, MedQA), math by equivalence (MATH500, Minerva;
the paper's LLM judge is the documented local substitute's rule check), open-domain QA by token
F1 (HotpotQA, 2Wiki, Bamboogle, MuSiQue).  A record's task is its own `task` field or
`metadata.task`; "" falls back to EM.  A missing answer scores 0 on every metric.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ragjax.example_fields import record_field
from ragjax.metrics.answer import cover_exact_match, exact_match, token_f1
from ragjax.metrics.choice import letter_match
from ragjax.metrics.math_equiv import math_equal

METRICS = {"em": exact_match, "f1": token_f1, "cover_em": cover_exact_match,
           "letter_em": letter_match, "math_equiv": math_equal}
TASK_METRICS = {"mcq": "letter_em", "math": "math_equiv", "qa": "f1", "": "em"}
NAMES = tuple(METRICS) + ("task",)


def metric_of(name: str, record: Mapping) -> str:
  if name != "task":
    return name
  task = record_field(record, "task", "") or ""
  if task not in TASK_METRICS:
    raise ValueError(f"record {record.get('id', '?')}: no metric for task {task!r}; known "
                     f"tasks: {sorted(t for t in TASK_METRICS if t)}")
  return TASK_METRICS[task]


def answer_score(name: str, answer: Optional[str], record: Mapping) -> float:
  """`name` (one of NAMES) of `answer` against the record's golden answers."""
  if name not in NAMES:
    raise ValueError(f"unknown answer metric {name!r}; known: {NAMES}")
  if answer is None or not answer.strip():
    return 0.0
  return float(METRICS[metric_of(name, record)](answer, record["golden_answers"]))
