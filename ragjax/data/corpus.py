"""Passages in the FlashRAG / Search-R1 corpus layout: {id, title, text, contents='"Title"\\ntext'}.

Importers of multi-hop files expose their paragraphs through `Passage` so the retrieval
package can index them; ids are content hashes, so the same paragraph read from two files
gets the same id and supporting ids stay valid across merged corpora.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Iterable, Iterator, Sequence

from ragjax.data.schema import require_str
from ragjax.data.sources import iter_json_records


@dataclasses.dataclass(frozen=True)
class Passage:
  id: str
  title: str
  text: str

  @property
  def contents(self) -> str:
    return make_contents(self.title, self.text)

  def to_record(self) -> dict:
    return {"id": self.id, "title": self.title, "text": self.text, "contents": self.contents}


def make_contents(title: str, text: str) -> str:
  """The Search-R1 retriever's passage string: quoted title, newline, text."""
  return f'"{title}"\n{text}'


def join_sentences(sentences: Sequence[str], sep: str = " ") -> str:
  """HotpotQA/2Wiki keep sentences as a list.  Hotpot's carry their own leading space and are
  concatenated as-is (sep=''), as its official tools do; 2Wiki's don't (sep=' ')."""
  if sep:
    return sep.join(s.strip() for s in sentences if s.strip())
  return "".join(sentences).strip()


def passage_id(title: str, text: str, prefix: str = "p") -> str:
  """Stable id from the content: sha1 of 'title\\ntext', 12 hex digits."""
  digest = hashlib.sha1(f"{title}\n{text}".encode("utf-8", errors="surrogateescape")).hexdigest()
  return f"{prefix}{digest[:12]}"


class CorpusBuilder:
  """Collects passages in first-seen order, de-duplicated on (title, text)."""

  def __init__(self, prefix: str = "p"):
    self._prefix = prefix
    self._by_id: dict[str, Passage] = {}

  def add(self, title: str, text: str) -> str:
    pid = passage_id(title, text, self._prefix)
    if pid not in self._by_id:
      self._by_id[pid] = Passage(pid, title, text)
    return pid

  def passages(self) -> list[Passage]:
    return list(self._by_id.values())


def write_jsonl(path: str, records: Iterable[dict]) -> int:
  """Writes one JSON object per line (UTF-8, key order kept, so output is byte-stable)."""
  n = 0
  with open(path, "w", encoding="utf-8", newline="\n") as f:
    for rec in records:
      f.write(json.dumps(rec, ensure_ascii=False) + "\n")
      n += 1
  return n


def write_corpus(path: str, passages: Iterable[Passage]) -> int:
  return write_jsonl(path, (p.to_record() for p in passages))


def read_corpus(path: str) -> Iterator[Passage]:
  """Reads a FlashRAG corpus: {id, contents} (title parsed from the quoted first line) or
  {id, title, text}; a {title, text} list without ids (HippoRAG) gets content-hash ids."""
  for where, rec in iter_json_records(path):
    if "contents" in rec:
      contents = require_str(rec, "contents", where)
      title, sep, text = contents.partition("\n")
      if sep and title.startswith('"') and title.endswith('"') and len(title) >= 2:
        title = title[1:-1]
      elif not sep:
        title, text = rec.get("title") or "", contents
      title = rec.get("title") or title
      pid = str(rec["id"]) if "id" in rec else passage_id(title, text)
    else:
      title = require_str(rec, "title", where, allow_empty=True)
      text = require_str(rec, "text", where)
      pid = str(rec["id"]) if "id" in rec else passage_id(title, text)
    yield Passage(pid, title, text)
