"""The reader: question files in the field's formats, read into the one `Example` schema.

Every question file a recipe trains or evaluates on is read here (`data.*_files` through
`wiring.components.load_data`, UR²'s task files, R3-RAG's cold-start questions, benchmark
suites through `read_records`); the synthetic world is generated in memory instead.  The TFDS
builders (`ragjax.data.builders`) are an optional export of the same rows, not a second path.

    examples = read_examples("nq_test.jsonl")           # format from the extension
    examples = read_examples("dev.json", "hotpotqa")

Formats: FlashRAG jsonl (`flashrag`), verl parquet (`verl`), raw HotpotQA / 2Wiki / MuSiQue
json (`hotpotqa`, `2wiki`, `musique`), UR²'s multiple-choice and math sets (`mcq`, `math`) and
plain `{question, answer}` files (`qa`: UR² QA sets, Bamboogle csv).  Every bad record is a
`DataError` naming the file, line and field.  `read_records` adds a metadata filter and a limit.
"""

from __future__ import annotations

import importlib
import os
from typing import Optional

from ragjax.data.schema import Example

READERS = {
    "flashrag": ("ragjax.data.flashrag", "read_flashrag"),
    "verl": ("ragjax.data.verl", "read_verl"),
    "hotpotqa": ("ragjax.data.hotpotqa", "read_hotpotqa"),
    "2wiki": ("ragjax.data.twowiki", "read_twowiki"),
    "musique": ("ragjax.data.musique", "read_musique"),
    "mcq": ("ragjax.data.choice", "read_multiple_choice"),
    "math": ("ragjax.data.mathsets", "read_math"),
    "qa": ("ragjax.data.plainqa", "read_plain_qa"),
}
_BY_EXTENSION = {".jsonl": "flashrag", ".parquet": "verl"}


def read_examples(path: str, fmt: Optional[str] = None) -> list[Example]:
  """Every question of `path`; the format comes from `fmt` or the file extension."""
  if fmt is None:
    fmt = _BY_EXTENSION.get(os.path.splitext(path)[1])
    if fmt is None:
      raise ValueError(f"{path}: cannot tell the format from the extension; give one of "
                       f"{sorted(READERS)}")
  if fmt not in READERS:
    raise ValueError(f"unknown question-file format {fmt!r}; known: {sorted(READERS)}")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path}: no such question file")
  module, fn = READERS[fmt]
  return list(getattr(importlib.import_module(module), fn)(path))


def as_record(example) -> dict:
  """A dataset example (`Example` or a mapping) as the plain dict trainers and engines take."""
  return example.to_record() if hasattr(example, "to_record") else dict(example)


def matches(record: dict, where) -> bool:
  """`where` ({field: value} or its items): each field of the record's metadata (or the record
  itself) equals the value, compared as strings."""
  meta = record.get("metadata") or {}
  items = where.items() if hasattr(where, "items") else where
  return all(str(meta.get(k, record.get(k))) == str(v) for k, v in items)


def read_records(path: str, fmt: Optional[str] = None, where=(), limit: int = 0) -> list[dict]:
  """The records (plain dicts) of `path` matching `where`, the first `limit` if > 0."""
  if limit and limit < 0:
    raise ValueError(f"limit must be >= 0 (0 = all), got {limit!r}")
  out = []
  for ex in read_examples(path, fmt):
    rec = as_record(ex)
    if matches(rec, where):
      out.append(rec)
      if limit and len(out) >= limit:
        break
  return out
