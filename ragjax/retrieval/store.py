"""Passages on disk for random access by row and by id (Arrow IPC, memory-mapped).

Row i of the store is row i of the embedding matrix and of every vector index, so backends
return row numbers and the store turns them into `Hit`s.  Arrow keeps the strings in one
mapped buffer, so opening a 21M-passage store costs no parse and little resident memory.
"""

from __future__ import annotations

import os
from typing import Iterable, Optional, Sequence

import numpy as np
import pyarrow as pa

from ragjax.retrieval.types import Hit, Passage, join_contents

FILENAME = "passages.arrow"
_SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])


def write_store(passages: Iterable[Passage], out_dir: str, batch: int = 50_000) -> int:
  """Streams passages into `out_dir/passages.arrow`; returns the number written."""
  os.makedirs(out_dir, exist_ok=True)
  path = os.path.join(out_dir, FILENAME)
  tmp = path + ".tmp"
  n = 0
  with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as writer:
    cols: tuple[list, list, list] = ([], [], [])
    for p in passages:
      cols[0].append(p.id), cols[1].append(p.title), cols[2].append(p.text)
      if len(cols[0]) >= batch:
        writer.write_batch(pa.record_batch(list(map(pa.array, cols)), schema=_SCHEMA))
        n += len(cols[0])
        cols = ([], [], [])
    if cols[0]:
      writer.write_batch(pa.record_batch(list(map(pa.array, cols)), schema=_SCHEMA))
      n += len(cols[0])
  os.replace(tmp, path)
  return n


class PassageStore:
  """Read side: `len`, `contents(rows)`, `row_of(id)`, `hits(rows, scores)`."""

  def __init__(self, directory: str):
    path = os.path.join(directory, FILENAME)
    if not os.path.exists(path):
      raise FileNotFoundError(f"no passage store at {path}; build the index first")
    self.path = path
    self._table = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
    self._ids = self._table.column("id")
    self._titles = self._table.column("title")
    self._texts = self._table.column("text")
    self._row_of: Optional[dict[str, int]] = None

  def __len__(self) -> int:
    return self._table.num_rows

  def ids(self, rows: Optional[Sequence[int]] = None) -> list[str]:
    col = self._ids if rows is None else self._ids.take(pa.array(rows, pa.int64()))
    return col.to_pylist()

  def titles(self, rows: Optional[Sequence[int]] = None) -> list[str]:
    col = self._titles if rows is None else self._titles.take(pa.array(rows, pa.int64()))
    return col.to_pylist()

  def texts(self, rows: Optional[Sequence[int]] = None) -> list[str]:
    col = self._texts if rows is None else self._texts.take(pa.array(rows, pa.int64()))
    return col.to_pylist()

  def contents(self, rows: Optional[Sequence[int]] = None) -> list[str]:
    return [join_contents(t, x) for t, x in zip(self.titles(rows), self.texts(rows))]

  def row_of(self, pid: str) -> int:
    if self._row_of is None:
      self._row_of = {p: i for i, p in enumerate(self._ids.to_pylist())}
    if pid not in self._row_of:
      raise KeyError(f"passage id {pid!r} is not in {self.path}")
    return self._row_of[pid]

  def get(self, pid: str) -> Passage:
    r = self.row_of(pid)
    return Passage(pid, self.titles([r])[0], self.texts([r])[0])

  def hits(self, rows: np.ndarray, scores: np.ndarray) -> list[list[Hit]]:
    """[Q, k] rows (-1 = no result) and scores -> per-query hit lists, in one batched take."""
    rows = np.asarray(rows)
    flat = rows.reshape(-1)
    valid = flat >= 0
    take = flat[valid].tolist()
    ids, contents = self.ids(take), self.contents(take)
    out, it = [], 0
    for qi in range(rows.shape[0]):
      hits = []
      for j in range(rows.shape[1]):
        if rows[qi, j] >= 0:
          hits.append(Hit(ids[it], contents[it], float(scores[qi, j])))
          it += 1
      out.append(hits)
    return out
