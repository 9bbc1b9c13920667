"""The corpus the multi-hop importers fill: passages with content-hash ids, de-duplicated.

Importers of multi-hop files expose their paragraphs as `Passage`s (the retrieval package's
type, so it can index them as they are); ids are content hashes, so the same paragraph read
from two files gets the same id and supporting ids stay valid across merged corpora.  Reading
a corpus file is `ragjax.retrieval.corpus_reader.read_passages`; writing one is `write_corpus`.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

from ragjax.retrieval.records import write_jsonl
from ragjax.retrieval.types import Passage


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


def write_corpus(path: str, passages: Iterable[Passage]) -> int:
  """FlashRAG corpus jsonl ({id, title, text, contents} per line); returns the count."""
  return write_jsonl(path, (p.to_record() for p in passages))
