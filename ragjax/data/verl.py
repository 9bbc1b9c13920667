"""verl / Search-R1 parquet rows: {data_source, prompt: [{role, content}], reward_model:
{ground_truth}, extra_info?: {question, answer, index}}.

`reward_model.ground_truth` comes in three shapes in the wild: Search-R1's {"target": [..]},
a list, or one string.  A string may be several answers joined with ', ' (the Agentic-RAG
copies do this), so when `extra_info.answer` holds the list we take that instead of guessing
where to split.  The question is `extra_info.question` when present, else the last user turn.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional

from ragjax.data.schema import DataError, Example, make_example, require_str, require_str_list
from ragjax.data.sources import iter_records


def _ground_truth(rec: dict, where: str) -> tuple[str, ...]:
  rm = rec.get("reward_model")
  if not isinstance(rm, dict):
    raise DataError(where, "reward_model", "missing or not a struct")
  if "ground_truth" not in rm or rm["ground_truth"] is None:
    raise DataError(where, "reward_model.ground_truth", "missing")
  gt = rm["ground_truth"]
  if isinstance(gt, dict):
    if "target" not in gt:
      raise DataError(where, "reward_model.ground_truth", "struct without 'target'")
    return require_str_list(gt, "target", where + " reward_model.ground_truth", coerce_number=True)
  extra = rec.get("extra_info")
  if isinstance(gt, str) and isinstance(extra, dict) and isinstance(extra.get("answer"), list):
    return require_str_list(extra, "answer", where + " extra_info", coerce_number=True)
  return require_str_list(rm, "ground_truth", where + " reward_model", coerce_number=True)


def _question(rec: dict, where: str) -> str:
  extra = rec.get("extra_info")
  if isinstance(extra, dict) and isinstance(extra.get("question"), str) and extra["question"].strip():
    return extra["question"]
  prompt = rec.get("prompt")
  if not isinstance(prompt, list) or not prompt:
    raise DataError(where, "prompt", "missing or not a list of {role, content} messages")
  users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
  if not users:
    raise DataError(where, "prompt", "no message with role 'user'")
  return require_str(users[-1], "content", where + " prompt[user]")


def read_verl(path: str, data_source: Optional[str] = None) -> Iterator[Example]:
  stem = os.path.splitext(os.path.basename(path))[0]
  for row, (where, rec) in enumerate(iter_records(path)):
    extra = rec.get("extra_info") if isinstance(rec.get("extra_info"), dict) else {}
    index = extra.get("index")
    rid = rec.get("id") or f"{stem}_{index if index is not None else row}"
    source = data_source or rec.get("data_source") or stem
    if not isinstance(source, str):
      raise DataError(where, "data_source", f"expected a string, got {type(source).__name__}")
    yield make_example(where, id=str(rid), question=_question(rec, where),
                       golden_answers=_ground_truth(rec, where), data_source=source,
                       metadata={"prompt": rec.get("prompt"), "ability": rec.get("ability"),
                                 "split": extra.get("split")})
