"""UR² math sets: MATH-500 / Minerva (`question` or `problem`, final `answer`) and GSM8K
(`answer` is the worked solution ending in '#### N').

`golden_answers` is the final answer only; GSM8K answers with thousands separators also get
the separator-free alias ('1,000' and '1000').  Worked solutions go to `metadata.solution`.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional

from ragjax.data.schema import DataError, Example, make_example, require_str
from ragjax.data.sources import iter_records


def gsm8k_final_answer(solution: str, where: str) -> str:
  if "####" not in solution:
    raise DataError(where, "answer", "GSM8K answer has no '#### <final answer>' line")
  final = solution.rsplit("####", 1)[1].strip()
  if not final:
    raise DataError(where, "answer", "empty final answer after '####'")
  return final


def read_math(path: str, data_source: Optional[str] = None) -> Iterator[Example]:
  stem = os.path.splitext(os.path.basename(path))[0]
  for row, (where, rec) in enumerate(iter_records(path)):
    question = require_str(rec, "question" if "question" in rec else "problem", where)
    answer = require_str(rec, "answer", where, coerce_number=True)
    meta = {}
    if "####" in answer:
      meta["solution"] = answer
      answer = gsm8k_final_answer(answer, where)
      answers = [answer, answer.replace(",", "")]
    else:
      answers = [answer]
    for key in ("solution", "subject", "level", "unique_id"):
      if key in rec:
        meta[key] = rec[key]
    rid = rec.get("unique_id", rec.get("id", row))
    yield make_example(where, id=f"{stem}_{rid}", question=question, golden_answers=answers,
                       data_source=data_source or stem, metadata=meta)
