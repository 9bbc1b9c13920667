"""The one example schema every dataset is read into, and its validation.

Training and evaluation never look at a source format: importers turn each record into an
`Example`, and every error says where it came from (file, line or record, field) so a user
can fix their file instead of reading a stack trace.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping, Optional

# One error type and one set of field checks for every record reader (retrieval's corpus and
# question readers use them too): a bad record is a DataError naming file, line and field.
from ragjax.retrieval.records import RecordError as DataError
from ragjax.retrieval.records import check_utf8, find_bad_text, require_str

FIELDS = ("id", "question", "golden_answers", "options", "supporting_ids", "supporting_titles",
          "data_source", "metadata")


@dataclasses.dataclass(frozen=True)
class Example:
  """One QA example.  `golden_answers[0]` is the canonical answer, the rest are aliases.

  `options` is non-empty only for multiple choice (then `golden_answers` holds the letter).
  `supporting_ids` / `supporting_titles` name the passages that answer it, when known.
  `metadata` is free-form JSON (hop chains, question type, original fields).
  """
  id: str
  question: str
  golden_answers: tuple[str, ...]
  data_source: str
  options: tuple[str, ...] = ()
  supporting_ids: tuple[str, ...] = ()
  supporting_titles: tuple[str, ...] = ()
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def to_record(self) -> dict:
    """Plain dict in `FIELDS` order (what `load_split` returns)."""
    return {"id": self.id, "question": self.question, "golden_answers": list(self.golden_answers),
            "options": list(self.options), "supporting_ids": list(self.supporting_ids),
            "supporting_titles": list(self.supporting_titles), "data_source": self.data_source,
            "metadata": dict(self.metadata)}

  def to_flashrag(self) -> dict:
    """FlashRAG jsonl record; schema-only fields travel in `metadata`."""
    meta = dict(self.metadata)
    for key in ("options", "supporting_ids", "supporting_titles"):
      if getattr(self, key):
        meta[key] = list(getattr(self, key))
    meta.setdefault("data_source", self.data_source)
    return {"id": self.id, "question": self.question, "golden_answers": list(self.golden_answers),
            "metadata": meta}


def require_str_list(rec: Mapping, field: str, where: str, *, allow_empty: bool = False,
                     coerce_number: bool = False) -> tuple[str, ...]:
  """rec[field] as a tuple of non-empty strs (a bare string counts as a one-item list)."""
  if not isinstance(rec, Mapping):
    raise DataError(where, None, f"expected a JSON object, got {type(rec).__name__}")
  if field not in rec or rec[field] is None:
    raise DataError(where, field, "missing")
  value = rec[field]
  if isinstance(value, str):
    value = [value]
  if not isinstance(value, (list, tuple)):
    raise DataError(where, field, f"expected a list of strings, got {type(value).__name__}")
  out = []
  for i, item in enumerate(value):
    if coerce_number and isinstance(item, (int, float)) and not isinstance(item, bool):
      item = str(item)
    if not isinstance(item, str):
      raise DataError(where, f"{field}[{i}]", f"expected a string, got {type(item).__name__}")
    check_utf8(item, where, f"{field}[{i}]")
    if not item.strip():
      raise DataError(where, f"{field}[{i}]", "empty string")
    out.append(item)
  if not out and not allow_empty:
    raise DataError(where, field, "empty list")
  return tuple(out)


def dedupe(items: Iterable[str]) -> tuple[str, ...]:
  """Order-preserving de-duplication (answer aliases, supporting titles)."""
  seen, out = set(), []
  for item in items:
    if item not in seen:
      seen.add(item)
      out.append(item)
  return tuple(out)


def make_example(where: str, *, id: str, question: str, golden_answers: Iterable[str],
                 data_source: str, options: Iterable[str] = (), supporting_ids: Iterable[str] = (),
                 supporting_titles: Iterable[str] = (), metadata: Optional[Mapping] = None) -> Example:
  """Builds an Example and checks the invariants every consumer relies on."""
  answers = dedupe(a.strip() for a in golden_answers)
  if not id.strip():
    raise DataError(where, "id", "empty")
  if not question.strip():
    raise DataError(where, "question", "empty")
  if not answers or not all(answers):
    raise DataError(where, "golden_answers", "no non-empty answer")
  meta = dict(metadata or {})
  try:
    json.dumps(meta, ensure_ascii=False)
  except (TypeError, ValueError, RecursionError) as e:
    raise DataError(where, "metadata", f"not JSON-serialisable: {e}") from None
  bad = find_bad_text(meta)
  if bad:
    raise DataError(where, f"metadata.{bad[0]}", bad[1])
  return Example(id=id, question=question.strip(), golden_answers=answers,
                 data_source=data_source, options=tuple(options),
                 supporting_ids=tuple(supporting_ids), supporting_titles=tuple(supporting_titles),
                 metadata=meta)


def example_from_record(rec: Mapping, where: str = "<record>") -> Example:
  """Inverse of `Example.to_record` with full validation (used by readers of our own files)."""
  return make_example(
      where, id=require_str(rec, "id", where, coerce_number=True),
      question=require_str(rec, "question", where),
      golden_answers=require_str_list(rec, "golden_answers", where, coerce_number=True),
      data_source=require_str(rec, "data_source", where, allow_empty=True),
      options=require_str_list(rec, "options", where, allow_empty=True) if "options" in rec else (),
      supporting_ids=(require_str_list(rec, "supporting_ids", where, allow_empty=True)
                      if "supporting_ids" in rec else ()),
      supporting_titles=(require_str_list(rec, "supporting_titles", where, allow_empty=True)
                         if "supporting_titles" in rec else ()),
      metadata=rec.get("metadata") or {})
