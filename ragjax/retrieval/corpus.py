"""Corpus ingestion from the field's formats, with problems reported by file and line.

Accepted inputs (one file, format detected per record):
- FlashRAG / Search-R1 jsonl: `{"id", "contents": "\\"Title\\"\\ntext"}` or `{"id", "title", "text"}`;
  a JSON list of such records (e.g. HippoRAG corpora, which have no id: the row number is used).
- QA records whose paragraphs become passages: HotpotQA / 2Wiki `context` (list of
  `[title, sentences]` or HF's `{"title": [...], "sentences": [...]}`), MuSiQue `paragraphs`
  (`{"title", "paragraph_text"}`), and FlashRAG question files carrying `metadata.context`.
  Paragraphs shared by several questions are stored once (dedup on title + whitespace-normalised
  text) and given sequential ids.

Malformed records and duplicate ids are `Issue`s naming file, line and field; `on_error="skip"`
drops them and keeps going, `"fail"` raises `CorpusError` at the first one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Iterable, Iterator, Optional

from ragjax.retrieval.types import join_contents, split_contents


class CorpusError(ValueError):
  """A corpus problem, with file and line in the message."""


@dataclasses.dataclass(frozen=True)
class Passage:
  id: str
  title: str
  text: str

  @property
  def contents(self) -> str:
    return join_contents(self.title, self.text)


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


def join_sentences(sentences: list[str]) -> str:
  """HotpotQA keeps each sentence's leading space; 2Wiki does not.  Join both to plain text."""
  if any(s[:1].isspace() for s in sentences[1:]):
    return normalize_ws("".join(sentences))
  return normalize_ws(" ".join(s.strip() for s in sentences))


def _str_field(rec: dict, key: str, where: str) -> str:
  value = rec.get(key)
  if not isinstance(value, str):
    raise CorpusError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
  return value


def _paragraphs_of(rec: dict, where: str) -> Optional[list[tuple[str, str]]]:
  """(title, text) paragraphs of a QA record, or None when the record is not a QA record."""
  ctx = rec.get("context")
  if ctx is None and isinstance(rec.get("metadata"), dict):
    ctx = rec["metadata"].get("context")
  if ctx is not None:
    if isinstance(ctx, dict) and "title" in ctx and "sentences" in ctx:      # HF hotpot_qa schema
      ctx = list(zip(ctx["title"], ctx["sentences"]))
    out = []
    if not isinstance(ctx, (list, tuple)):
      raise CorpusError(f"{where}: field 'context' must be a list of [title, sentences]")
    for j, item in enumerate(ctx):
      if (not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[0], str)
          or not isinstance(item[1], (list, tuple)) or not all(isinstance(s, str) for s in item[1])):
        raise CorpusError(f"{where}: context[{j}] is not [title, [sentence, ...]]")
      out.append((item[0], join_sentences(list(item[1]))))
    return out
  if "paragraphs" in rec:                                                    # MuSiQue
    out = []
    for j, p in enumerate(rec["paragraphs"] or []):
      if not isinstance(p, dict) or not isinstance(p.get("paragraph_text"), str):
        raise CorpusError(f"{where}: paragraphs[{j}] has no string 'paragraph_text'")
      out.append((str(p.get("title", "")), normalize_ws(p["paragraph_text"])))
    return out
  return None


def _records(path: str) -> Iterator[tuple[int, Any]]:
  """(line, record-or-exception) over a .jsonl file or a JSON list; lines are 1-based.

  Lines are decoded one at a time so a single bad byte costs one record, not the file.
  """
  with open(path, "rb") as f:
    head = f.read(4096).lstrip()
    f.seek(0)
    if head.startswith(b"["):
      try:
        data = json.loads(f.read().decode("utf-8"))
      except UnicodeDecodeError as e:
        yield 1, CorpusError(f"{path}:1: not UTF-8 ({e.reason} at byte {e.start})")
        return
      except json.JSONDecodeError as e:
        yield e.lineno, CorpusError(f"{path}:{e.lineno}: invalid JSON: {e.msg}")
        return
      # Line numbers of list elements are not kept by json; report the element index + 1.
      for i, rec in enumerate(data):
        yield i + 1, rec
      return
    for lineno, raw in enumerate(f, 1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        yield lineno, CorpusError(f"{path}:{lineno}: not UTF-8 ({e.reason} at column {e.start + 1})")
        continue
      if not line.strip():
        continue
      try:
        yield lineno, json.loads(line)
      except json.JSONDecodeError as e:
        yield lineno, CorpusError(f"{path}:{lineno}: invalid JSON: {e.msg} (column {e.colno})")


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
    for lineno, rec in _records(path):
      where = f"{path}:{lineno}"
      if isinstance(rec, Exception):
        problem(path, lineno, "malformed", str(rec).split(": ", 1)[-1])
        continue
      report.records += 1
      if not isinstance(rec, dict):
        problem(path, lineno, "malformed", f"record is {type(rec).__name__}, expected an object")
        continue
      try:
        paras = _paragraphs_of(rec, where)
        if paras is None:
          if "contents" in rec:
            title, text = split_contents(_str_field(rec, "contents", where))
            if isinstance(rec.get("title"), str) and not title:
              title = rec["title"]
          elif "text" in rec:
            text = _str_field(rec, "text", where)
            title = rec.get("title") or ""
            if not isinstance(title, str):
              raise CorpusError(f"{where}: field 'title' must be a string")
          else:
            raise CorpusError(f"{where}: record has none of 'contents', 'text', 'context', "
                              f"'paragraphs' (keys: {sorted(rec)[:8]})")
          pid = rec.get("id", rec.get("_id"))
          if pid is None:
            pid = str(next_auto)
          elif not isinstance(pid, (str, int)) or isinstance(pid, bool):
            raise CorpusError(f"{where}: field 'id' must be a string or int, got {type(pid).__name__}")
          paras_out = [(str(pid), title, text)]
        else:
          paras_out = []
          for title, text in paras:
            key = (title, normalize_ws(text))
            if key in seen_paras:
              report.merged_paragraphs += 1
              continue
            seen_paras.add(key)
            paras_out.append((str(next_auto), title, text))
            next_auto += 1
      except CorpusError as e:
        problem(path, lineno, "malformed", str(e).split(": ", 1)[-1])
        continue
      for pid, title, text in paras_out:
        if not text.strip():
          problem(path, lineno, "malformed", f"passage {pid!r} has empty text")
          continue
        if pid in seen_ids:
          problem(path, lineno, "duplicate_id", f"id {pid!r} already seen; keeping the first")
          continue
        seen_ids.add(pid)
        if paras is None:
          next_auto += 1
        report.passages += 1
        yield Passage(pid, title, text)
