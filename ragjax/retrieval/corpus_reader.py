"""Corpus ingestion from the field's formats, with problems reported by file and line.

Accepted inputs (one file, format detected per record):
- FlashRAG / Search-R1 jsonl: `{"id", "contents": "\\"Title\\"\\ntext"}` or `{"id", "title", "text"}`;
  a JSON list of such records (e.g. HippoRAG corpora, which have no id: the row number is used).
- QA records whose paragraphs become passages (`ragjax.retrieval.paragraphs`): HotpotQA / 2Wiki
  `context` (list of `[title, sentences]` or HF's `{"title": [...], "sentences": [...]}`), IRCoT
  `contexts`, MuSiQue `paragraphs` (`{"title", "paragraph_text"}`), and FlashRAG question files
  carrying `metadata.context`.  Their text is whitespace-normalised; paragraphs shared by
  several questions are stored once (dedup on title + text) and given sequential ids.

Malformed records and duplicate ids are `Issue`s naming file, line and field; `on_error="skip"`
drops them and keeps going, `"fail"` raises `CorpusError` at the first one.  This is the one
corpus reader: the dataset package reads corpus files through it too.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Iterable, Iterator, Optional

from ragjax.retrieval.paragraphs import record_paragraphs
from ragjax.retrieval.records import RecordError, iter_json_records
from ragjax.retrieval.types import Passage, split_contents


class CorpusError(ValueError):
  """A corpus problem, with file and line in the message."""


@dataclasses.dataclass(frozen=True)
class Issue:
  file: str
  line: int
  kind: str      # "malformed" | "duplicate_id"
  message: str

  def __str__(self) -> str:
    return f"{self.file}:{self.line}: {self.kind}: {self.message}"


@dataclasses.dataclass
class IngestReport:
  """What ingestion kept, merged and dropped, so a build log can say it."""
  passages: int = 0
  records: int = 0
  merged_paragraphs: int = 0      # identical paragraphs from several QA records, stored once
  issues: list[Issue] = dataclasses.field(default_factory=list)

  def summary(self) -> str:
    kinds: dict[str, int] = {}
    for it in self.issues:
      kinds[it.kind] = kinds.get(it.kind, 0) + 1
    return (f"{self.passages} passages from {self.records} records; {self.merged_paragraphs} repeated "
            f"paragraphs merged; issues: {kinds or 'none'}")


def normalize_ws(text: str) -> str:
  return re.sub(r"\s+", " ", text).strip()


def _str_field(rec: dict, key: str, where: str) -> str:
  value = rec.get(key)
  if not isinstance(value, str):
    raise RecordError(where, None, f"field {key!r} must be a string, got {type(value).__name__}")
  return value


def _corpus_record(rec: dict, where: str) -> tuple[Optional[str], str, str]:
  """(id or None, title, text) of a FlashRAG corpus record."""
  if "contents" in rec:
    title, text = split_contents(_str_field(rec, "contents", where), require_quotes=False)
    if isinstance(rec.get("title"), str) and not title:
      title = rec["title"]
  elif "text" in rec:
    text = _str_field(rec, "text", where)
    title = rec.get("title") or ""
    if not isinstance(title, str):
      raise RecordError(where, None, "field 'title' must be a string")
  else:
    raise RecordError(where, None, f"record has none of 'contents', 'text', 'context', "
                                   f"'contexts', 'paragraphs' (keys: {sorted(rec)[:8]})")
  pid = rec.get("id", rec.get("_id"))
  if pid is not None and (not isinstance(pid, (str, int)) or isinstance(pid, bool)):
    raise RecordError(where, None, f"field 'id' must be a string or int, got {type(pid).__name__}")
  return (None if pid is None else str(pid)), title, text


def read_passages(paths: str | Iterable[str], on_error: str = "skip",
                  report: Optional[IngestReport] = None) -> Iterator[Passage]:
  """Yields unique passages from one or more corpus / QA files (formats in the module doc)."""
  if on_error not in ("skip", "fail"):
    raise ValueError(f"on_error must be 'skip' or 'fail', got {on_error!r}")
  paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
  report = report if report is not None else IngestReport()
  seen_ids: set[str] = set()
  seen_paras: set[tuple[str, str]] = set()
  next_auto = 0

  def problem(file, line, kind, message):
    issue = Issue(file, line, kind, message)
    if on_error == "fail":
      raise CorpusError(str(issue))
    report.issues.append(issue)

  for path in paths:
    path = os.fspath(path)
    if not os.path.exists(path):
      raise FileNotFoundError(f"corpus file not found: {path}")
    for loc, rec in iter_json_records(path):
      if isinstance(rec, RecordError):
        problem(path, loc.line, "malformed", rec.detail)
        continue
      report.records += 1
      where = f"{path}:{loc.line}"
      try:
        paras = record_paragraphs(rec, where)
        if paras is None:
          pid, title, text = _corpus_record(rec, where)
          found = [(pid if pid is not None else str(next_auto), title, text)]
        else:
          found = []
          for para in paras:
            text = normalize_ws(para.text)
            if (para.title, text) in seen_paras:
              report.merged_paragraphs += 1
              continue
            seen_paras.add((para.title, text))
            found.append((str(next_auto), para.title, text))
            next_auto += 1
      except RecordError as e:
        problem(path, loc.line, "malformed", e.detail)
        continue
      for pid, title, text in found:
        if not text.strip():
          problem(path, loc.line, "malformed", f"passage {pid!r} has empty text")
          continue
        if pid in seen_ids:
          problem(path, loc.line, "duplicate_id", f"id {pid!r} already seen; keeping the first")
          continue
        seen_ids.add(pid)
        if paras is None:
          next_auto += 1
        report.passages += 1
        yield Passage(pid, title, text)
