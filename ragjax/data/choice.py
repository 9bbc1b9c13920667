"""UR² multiple-choice sets: MMLU-Pro (`options`, `answer` letter, `answer_index`) and MedQA
(`options` list or {letter: text}, `answer` text, `answer_idx` letter).

`golden_answers` holds the answer letter (what letter extraction scores against); the option
text is kept in `metadata.answer_text`.  Letter, index and text must agree, otherwise the
record is rejected rather than silently scored against the wrong option.
"""

from __future__ import annotations

import os
import string
from typing import Iterator, Optional

from ragjax.data.schema import DataError, Example, make_example, require_str, require_str_list
from ragjax.data.sources import iter_records

LETTERS = string.ascii_uppercase


def _options(rec: dict, where: str) -> tuple[str, ...]:
  opts = rec.get("options")
  if isinstance(opts, dict):
    keys = list(opts)
    if keys != list(LETTERS[:len(keys)]):
      raise DataError(where, "options", f"letter keys must be A, B, C, ... in order, got {keys}")
    opts = [opts[k] for k in keys]
    rec = {"options": opts}
  out = require_str_list(rec, "options", where, coerce_number=True)
  if len(out) < 2 or len(out) > len(LETTERS):
    raise DataError(where, "options", f"expected 2..26 options, got {len(out)}")
  return out


def _letter(value, where: str, field: str, n: int) -> int:
  if not isinstance(value, str) or len(value.strip()) != 1 or value.strip().upper() not in LETTERS[:n]:
    raise DataError(where, field, f"expected one of {LETTERS[:n]!r}, got {value!r}")
  return LETTERS.index(value.strip().upper())


def read_multiple_choice(path: str, data_source: Optional[str] = None) -> Iterator[Example]:
  stem = os.path.splitext(os.path.basename(path))[0]
  for row, (where, rec) in enumerate(iter_records(path)):
    question = require_str(rec, "question", where)
    options = _options(rec, where)
    n = len(options)
    if "answer_idx" in rec:  # MedQA: answer is the option text
      idx = _letter(rec["answer_idx"], where, "answer_idx", n)
      text = require_str(rec, "answer", where, coerce_number=True)
      if text.strip() != options[idx].strip():
        raise DataError(where, "answer", f"{text!r} is not option {LETTERS[idx]} ({options[idx]!r})")
    elif "answer" in rec:  # MMLU-Pro: answer is the letter, answer_index the 0-based index
      idx = _letter(rec["answer"], where, "answer", n)
      if "answer_index" in rec and rec["answer_index"] != idx:
        raise DataError(where, "answer_index", f"{rec['answer_index']!r} disagrees with answer letter {LETTERS[idx]}")
    else:
      raise DataError(where, "answer", "missing (need 'answer' letter or 'answer_idx' + 'answer')")
    rid = rec.get("question_id", rec.get("id"))
    meta = {"answer_text": options[idx], "answer_index": idx}
    for key in ("category", "src", "meta_info"):
      if key in rec:
        meta[key] = rec[key]
    yield make_example(where, id=f"{stem}_{rid if rid is not None else row}", question=question,
                       golden_answers=[LETTERS[idx]], options=options,
                       data_source=data_source or stem, metadata=meta)
