"""The one search interface every backend, the HTTP client and the rollout share, and the
one `Passage` type the corpus readers, the store and the dataset importers share.

A `Hit` carries the passage in Search-R1's `contents` form (`"Title"\ntext`) so the text the
policy sees is byte-identical whether it came from an in-process index or a remote server.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence, runtime_checkable


def split_contents(contents: str, require_quotes: bool = True) -> tuple[str, str]:
  """Splits Search-R1 `"Title"\\ntext` into (title, text); no title line gives ('', contents).

  `require_quotes=False` reads corpus files as FlashRAG and Search-R1 do: the first line is the
  title, quoted or not (the wiki-18 sample has unquoted ones).  Hits keep the strict form,
  since an untitled passage's contents is its bare text, which may hold newlines.
  """
  first, sep, rest = contents.partition("\n")
  if sep and len(first) >= 2 and first.startswith('"') and first.endswith('"'):
    return first[1:-1], rest
  if sep and not require_quotes:
    return first, rest
  return "", contents


def join_contents(title: str, text: str) -> str:
  """The inverse of `split_contents` (FlashRAG / Search-R1 corpus convention)."""
  return f'"{title}"\n{text}' if title else text


@dataclasses.dataclass(frozen=True)
class Passage:
  """One corpus passage (FlashRAG / Search-R1 layout), as read, indexed and stored."""
  id: str
  title: str
  text: str

  @property
  def contents(self) -> str:
    return join_contents(self.title, self.text)

  def to_record(self) -> dict:
    """The FlashRAG corpus record: {id, title, text, contents}."""
    return {"id": self.id, "title": self.title, "text": self.text, "contents": self.contents}


@dataclasses.dataclass(frozen=True)
class Hit:
  """One retrieved passage: its corpus id, Search-R1 `contents` and the backend's score."""
  id: str
  contents: str
  score: float

  @property
  def title(self) -> str:
    return split_contents(self.contents)[0]

  @property
  def text(self) -> str:
    return split_contents(self.contents)[1]

  def to_search_r1(self, with_score: bool = True) -> dict:
    """The `/retrieve` result element: `{"document": {...}, "score": s}` or the bare document."""
    doc = {"id": self.id, "contents": self.contents}
    return {"document": doc, "score": self.score} if with_score else doc


@runtime_checkable
class Retriever(Protocol):
  """`search(queries, k)` returns, for each query, up to k hits sorted by descending score."""

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    ...


def check_search_args(queries: Sequence[str], k: int) -> list[str]:
  """Validates the common arguments once so every backend fails the same clear way."""
  if isinstance(queries, str):
    raise TypeError("search() takes a list of query strings, got a single str; wrap it in a list")
  queries = list(queries)
  for i, q in enumerate(queries):
    if not isinstance(q, str):
      raise TypeError(f"query {i} is {type(q).__name__}, expected str")
  if not isinstance(k, int) or k < 1:
    raise ValueError(f"k must be a positive int, got {k!r}")
  return queries


class NullRetriever:
  """Retrieval disabled: every search returns no documents (the 'without retrieval' system)."""

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    return [[] for _ in check_search_args(queries, k)]
