"""FlashRAG jsonl questions: {id, question, golden_answers: [..], metadata?: {..}}.

This is the format users point a builder at for their own data; our own world writer emits it
too.  Schema-only fields (options, supporting ids/titles) may ride in `metadata`.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional

from ragjax.data.schema import DataError, Example, make_example, require_str, require_str_list
from ragjax.data.sources import iter_json_records


def read_flashrag(path: str, data_source: Optional[str] = None) -> Iterator[Example]:
  source = data_source or os.path.splitext(os.path.basename(path))[0]
  for where, rec in iter_json_records(path):
    meta = rec.get("metadata") or {}
    if not isinstance(meta, dict):
      raise DataError(where, "metadata", f"expected an object, got {type(meta).__name__}")
    meta = dict(meta)
    extra = {}
    for key in ("options", "supporting_ids", "supporting_titles"):
      if key in meta:
        extra[key] = require_str_list(meta, key, where, allow_empty=True)
        del meta[key]
    rec_source = meta.pop("data_source", None)
    yield make_example(
        where, id=require_str(rec, "id", where, coerce_number=True),
        question=require_str(rec, "question", where),
        golden_answers=require_str_list(rec, "golden_answers", where, coerce_number=True),
        data_source=rec_source if isinstance(rec_source, str) and rec_source else source,
        metadata=meta, **extra)
