"""Record readers for jsonl, JSON-list, csv and parquet files that remember where each record was.

Each reader yields `(where, record)`; `where` ('path line 12' or 'path record 3 (line 40)')
goes into every `DataError`.  Files are decoded with 'surrogateescape' so one bad byte is reported with
its line and field instead of failing the whole file with a bare UnicodeDecodeError.
"""

from __future__ import annotations

import csv
import io
import os
from typing import Any, Iterator

from ragjax.data.schema import DataError, find_bad_text
from ragjax.retrieval import records

Located = tuple[str, Any]


def _check(where: str, rec: Any) -> None:
  bad = find_bad_text(rec)
  if bad:
    raise DataError(where, *bad)


def iter_json_records(path: str) -> Iterator[Located]:
  """jsonl or a JSON list (`ragjax.retrieval.records`); the first bad record raises its DataError."""
  for loc, rec in records.iter_json_records(path):
    if isinstance(rec, DataError):
      raise rec
    yield str(loc), rec


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
