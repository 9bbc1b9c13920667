"""JSON record files (jsonl, or one JSON list of objects): read with where each record is, and written.

Every reader of corpus and question files goes through `iter_json_records` (the retrieval
corpus reader, recall's question reader, the dataset importers), so a bad record is reported
the same way everywhere: a `RecordError` naming the file, the line (for a JSON list also the
record's index) and the field.  Bytes are decoded with 'surrogateescape', so one bad byte
costs its record, not the file, and is reported with the field that holds it; so is a lone
surrogate escape (`"\\ud800"`: valid JSON, not valid text; Arrow and every encoder reject it
later), a value the json module refuses (nesting deeper than the interpreter's recursion
limit, an integer over 4300 digits), and a line starting with a byte-order mark is read, not lost.

This module sits in `ragjax.retrieval` because retrieval may not import `ragjax.data`;
`ragjax.data` imports it (its `DataError` is `RecordError`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Iterable, Iterator, Mapping, Optional

_WS = re.compile(r"\s*")
_SURROGATE = re.compile("[\ud800-\udfff]")         # a bad byte ('surrogateescape') or a lone one
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # how a lone surrogate is written in JSON
_BOM = "\ufeff"


class RecordError(ValueError):
  """A bad record: `where` is 'file line N' or 'file record N', `field` the offending key."""

  def __init__(self, where: str, field: Optional[str], problem: str):
    self.where, self.field, self.problem = where, field, problem
    super().__init__(f"{where}: {self.detail}")

  @property
  def detail(self) -> str:
    """The message without the location."""
    return (f"field '{self.field}': " if self.field else "") + self.problem


@dataclasses.dataclass(frozen=True)
class Location:
  """Where a record starts: its 1-based line, and for a JSON list its 0-based index."""
  path: str
  line: int
  index: Optional[int] = None

  def __str__(self) -> str:
    if self.index is None:
      return f"{self.path} line {self.line}"
    return f"{self.path} record {self.index} (line {self.line})"


def text_problem(value: str) -> Optional[str]:
  """Why a string is not valid text (an undecodable byte, a lone surrogate), or None."""
  bad = _SURROGATE.search(value)
  if not bad:
    return None
  code = ord(bad[0])
  if 0xDC80 <= code <= 0xDCFF:        # 'surrogateescape' wrote the byte code - 0xDC00 here
    return f"invalid UTF-8 byte 0x{code - 0xDC00:02x} at character {bad.start()}"
  return f"lone surrogate U+{code:04X} at character {bad.start()} (not valid Unicode text)"


def check_utf8(value: str, where: str, field: str) -> None:
  """Readers decode with 'surrogateescape', so an invalid byte shows up here as a surrogate."""
  problem = text_problem(value)
  if problem:
    raise RecordError(where, field, problem)


def find_bad_text(obj: Any) -> Optional[tuple[str, str]]:
  """(path, problem) of the first string, key or value, that is not valid text, else None.
  Walks with its own stack: a record nested as deep as json allows is no reason to fail."""
  stack = [("", obj)]
  while stack:
    path, node = stack.pop()
    if isinstance(node, str):
      problem = text_problem(node)
      if problem:
        return path or "<value>", problem
    elif isinstance(node, Mapping):
      items = []
      for k, v in node.items():
        sub = f"{path}.{k}" if path else str(k)
        if isinstance(k, str) and text_problem(k):
          return sub, f"key: {text_problem(k)}"
        items.append((sub, v))
      stack.extend(reversed(items))
    elif isinstance(node, (list, tuple)):
      stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(node)]))
  return None


def require_str(rec: Mapping, field: str, where: str, *, allow_empty: bool = False,
                coerce_number: bool = False) -> str:
  """rec[field] as a str; missing, wrong type or empty -> RecordError naming the field."""
  if not isinstance(rec, Mapping):
    raise RecordError(where, None, f"expected a JSON object, got {type(rec).__name__}")
  if field not in rec or rec[field] is None:
    raise RecordError(where, field, "missing")
  value = rec[field]
  if coerce_number and isinstance(value, (int, float)) and not isinstance(value, bool):
    value = str(value)
  if not isinstance(value, str):
    raise RecordError(where, field, f"expected a string, got {type(value).__name__}")
  check_utf8(value, where, field)
  if not allow_empty and not value.strip():
    raise RecordError(where, field, "empty")
  return value


def _parse_error(e: Exception, where: str) -> RecordError:
  if isinstance(e, json.JSONDecodeError):
    return RecordError(where, None, f"invalid JSON ({e.msg} at column {e.colno})")
  if isinstance(e, RecursionError):
    return RecordError(where, None, "invalid JSON (nested deeper than the parser's recursion limit)")
  return RecordError(where, None, f"invalid JSON ({e})")        # e.g. an integer over 4300 digits


def _checked(rec: Any, raw: str, loc: Location) -> Any:
  """The record, or the RecordError that stands in its place."""
  if not isinstance(rec, dict):
    return RecordError(str(loc), None, f"expected a JSON object, got {type(rec).__name__}")
  if _SURROGATE.search(raw) or _SURROGATE_ESCAPE.search(raw):     # cheap test before the walk
    bad = find_bad_text(rec)
    if bad:
      return RecordError(str(loc), *bad)
  return rec


def _line_records(path: str) -> Iterator[tuple[Location, Any]]:
  with open(path, "rb") as f:                 # streamed: corpora can be far larger than memory
    for lineno, raw in enumerate(f, start=1):
      line = raw.decode("utf-8", errors="surrogateescape")
      if lineno == 1:
        line = line.removeprefix(_BOM)
      if not line.strip():
        continue
      loc = Location(path, lineno)
      try:
        rec = json.loads(line)
      except (ValueError, RecursionError) as e:         # JSONDecodeError is a ValueError
        yield loc, _parse_error(e, str(loc))
        continue
      yield loc, _checked(rec, line, loc)


def _list_records(path: str, text: str) -> Iterator[tuple[Location, Any]]:
  """Elements of a JSON list one at a time (raw_decode), so each knows its line; a syntax error
  ends the file (there is no telling where the next element starts)."""
  decoder = json.JSONDecoder()
  pos = _WS.match(text, text.index("[") + 1).end()
  line, counted, index = 1, 0, 0
  if text.startswith("]", pos):
    return
  while True:
    line += text.count("\n", counted, pos)
    counted = pos
    loc = Location(path, line, index)
    try:
      rec, end = decoder.raw_decode(text, pos)
    except (ValueError, RecursionError) as e:
      at = Location(path, getattr(e, "lineno", line))
      yield at, _parse_error(e, str(at))
      return
    yield loc, _checked(rec, text[pos:end], loc)
    index += 1
    pos = _WS.match(text, end).end()
    if text.startswith(",", pos):
      pos = _WS.match(text, pos + 1).end()
      continue
    if not text.startswith("]", pos) or text[pos + 1:].strip():
      at = Location(path, line + text.count("\n", counted, pos))
      yield at, RecordError(str(at), None, "invalid JSON (expected ',' or the list's closing ']')")
    return


def iter_json_records(path: str) -> Iterator[tuple[Location, Any]]:
  """(location, record) per record of a .jsonl file or a JSON list (chosen by the first
  non-space byte).  A record that cannot be read (bad JSON, not an object, undecodable bytes)
  comes as a `RecordError` in its place, so each caller decides to skip it or stop."""
  if os.path.isdir(path):
    raise RecordError(path, None, "is a directory; expected a .jsonl file or a .json list")
  with open(path, "rb") as f:
    head = f.read(4096).removeprefix(_BOM.encode()).lstrip()
  if not head.startswith(b"["):
    yield from _line_records(path)
    return
  with open(path, "rb") as f:
    text = f.read().decode("utf-8", errors="surrogateescape").removeprefix(_BOM)
  yield from _list_records(path, text)


def write_jsonl(path: str, records: Iterable[dict], append: bool = False) -> int:
  """One JSON object per line (UTF-8, key order kept, so output is byte-stable); returns the count."""
  n = 0
  with open(path, "a" if append else "w", encoding="utf-8", newline="\n") as f:
    for rec in records:
      f.write(json.dumps(rec, ensure_ascii=False) + "\n")
      n += 1
  return n
