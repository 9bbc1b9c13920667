"""Record readers for jsonl, JSON-list, csv and parquet files that remember where each record was.

Each reader yields `(where, record)`; `where` ('path line 12' or 'path record 3') goes into
every `DataError`.  Files are decoded with 'surrogateescape' so one bad byte is reported with
its line and field instead of failing the whole file with a bare UnicodeDecodeError.
"""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any, Iterator

from ragjax.data.schema import DataError, find_bad_utf8

Located = tuple[str, Any]


def _check(where: str, rec: Any) -> None:
  bad = find_bad_utf8(rec)
  if bad:
    raise DataError(where, bad, "invalid UTF-8")


def iter_jsonl(path: str) -> Iterator[Located]:
  """One JSON object per line; blank lines are skipped, line numbers are 1-based."""
  with open(path, "rb") as f:
    for lineno, raw in enumerate(f, start=1):
      line = raw.decode("utf-8", errors="surrogateescape").strip()
      if not line:
        continue
      where = f"{path} line {lineno}"
      try:
        rec = json.loads(line)
      except json.JSONDecodeError as e:
        raise DataError(where, None, f"invalid JSON ({e.msg} at column {e.colno})") from None
      if not isinstance(rec, dict):
        raise DataError(where, None, f"expected a JSON object, got {type(rec).__name__}")
      _check(where, rec)
      yield where, rec


def iter_json_list(path: str) -> Iterator[Located]:
  """A JSON array of objects (the official HotpotQA / 2Wiki / MuSiQue layout); records 0-based."""
  with open(path, "rb") as f:
    text = f.read().decode("utf-8", errors="surrogateescape")
  try:
    data = json.loads(text)
  except json.JSONDecodeError as e:
    raise DataError(f"{path} line {e.lineno}", None, f"invalid JSON ({e.msg})") from None
  if not isinstance(data, list):
    raise DataError(path, None, f"expected a JSON list of records, got {type(data).__name__}")
  for i, rec in enumerate(data):
    where = f"{path} record {i}"
    if not isinstance(rec, dict):
      raise DataError(where, None, f"expected a JSON object, got {type(rec).__name__}")
    _check(where, rec)
    yield where, rec


def iter_json_records(path: str) -> Iterator[Located]:
  """jsonl or JSON list, chosen by the first non-space byte ('[' means a list)."""
  with open(path, "rb") as f:
    head = f.read(4096).lstrip()
  if head.startswith(b"["):
    return iter_json_list(path)
  return iter_jsonl(path)


def iter_parquet(path: str) -> Iterator[Located]:
  """Rows of a parquet file as dicts (nested structs/lists become dicts/lists)."""
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  try:
    table = pq.read_table(path)
  except Exception as e:  # pyarrow raises several types for a broken file
    raise DataError(path, None, f"cannot read parquet: {e}") from None
  row = 0
  for batch in table.to_batches(max_chunksize=4096):
    try:
      rows = batch.to_pylist()
    except UnicodeDecodeError as e:
      raise DataError(f"{path} rows {row}..{row + batch.num_rows - 1}", None,
                      f"invalid UTF-8: {e}") from None
    for rec in rows:
      yield f"{path} row {row}", rec
      row += 1


def iter_csv(path: str) -> Iterator[Located]:
  """CSV with a header row; line numbers count the header as line 1."""
  with open(path, "rb") as f:
    text = f.read().decode("utf-8", errors="surrogateescape")
  reader = csv.DictReader(io.StringIO(text))
  for rec in reader:
    where = f"{path} line {reader.line_num}"
    _check(where, rec)
    yield where, rec


def iter_records(path: str) -> Iterator[Located]:
  """Dispatch on the file extension (.jsonl/.json/.parquet/.csv)."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"data file not found: {path}")
  ext = os.path.splitext(path)[1].lower()
  if ext == ".parquet":
    return iter_parquet(path)
  if ext == ".csv":
    return iter_csv(path)
  if ext in (".json", ".jsonl"):
    return iter_json_records(path)
  raise DataError(path, None, f"unknown file type {ext!r}; expected .jsonl, .json, .parquet or .csv")
