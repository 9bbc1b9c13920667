"""Mid-rollout hooks: methods that change a row while it runs (REX-RAG's probe clones).

After every turn is parsed and before retrieval, each hook gets a `TurnView` per live row and a
`RowEditor` that can clone a row (sampler state and KV cache included) into a spare row of the
same group, delete a span that ends the row's last turn, insert labelled tokens, and make the
row continue without retrieval.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from ragjax.rollout.protocols.base import Action
from ragjax.rollout.segments import Segment


@dataclasses.dataclass(frozen=True)
class TurnView:
  row: int
  turn: int
  final: bool
  action: Action
  text: str                     # the row's kept policy text of this turn
  group_id: int
  clone_of: Optional[int]
  prompt: Any = None            # the row's prompt as given to run() (a dataset record)


class RowEditor:
  """The engine's row edits, valid during one hook call."""

  def __init__(self, engine, turn: int):
    self._engine, self._turn = engine, turn
    self.created: list[int] = []

  def clone(self, row: int) -> int:
    """A copy of `row` (history, cache, this turn's action) in a spare row of its group."""
    dst = self._engine._clone(row, self._turn)
    self.created.append(dst)
    return dst

  def delete_span(self, row: int, start: int, end: Optional[int] = None) -> None:
    """Deletes characters [start, end) of the row's last turn (end = the turn's end)."""
    self._engine._delete_span(row, start, end)

  def insert(self, row: int, segments: Sequence[Segment]) -> None:
    """Appends labelled text after the row's last turn; it is fed to the sampler next."""
    self._engine._insert(row, segments, self._turn)

  def resume(self, row: int) -> None:
    """The row continues decoding next turn, without retrieval or an observation."""
    self._engine._resume(row)

  def text(self, row: int) -> str:
    return self._engine._rows[row].turn_text
