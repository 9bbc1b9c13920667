"""Plain question/answer files: `{question, answer}` records (UR²'s / R1-Searcher's QA eval
sets, `{idx, question, answer}` jsonl) and FireAct's Bamboogle csv (`Question,Answer`).

`answer` is one string or a list of aliases; keys are matched case-insensitively, so both
layouts read the same.  The id is the record's `id` / `idx` / `_id`, else its position.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional

from ragjax.data.schema import DataError, Example, make_example, require_str, require_str_list
from ragjax.data.sources import iter_records


def read_plain_qa(path: str, data_source: Optional[str] = None) -> Iterator[Example]:
  stem = os.path.splitext(os.path.basename(path))[0]
  for row, (where, rec) in enumerate(iter_records(path)):
    if not isinstance(rec, dict):
      raise DataError(where, None, f"expected a record, got {type(rec).__name__}")
    low = {str(k).lower(): v for k, v in rec.items()}
    if "answer" not in low and "answers" in low:
      low["answer"] = low["answers"]
    rid = next((low[k] for k in ("id", "idx", "_id") if low.get(k) is not None), row)
    yield make_example(where, id=f"{stem}_{rid}", question=require_str(low, "question", where),
                       golden_answers=require_str_list(low, "answer", where, coerce_number=True),
                       data_source=data_source or stem)
