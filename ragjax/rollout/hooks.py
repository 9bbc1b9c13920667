"""Mid-rollout hooks: methods that change a row while it runs (REX-RAG's probe clones).

After every turn is parsed and before retrieval, each hook gets a `TurnView` per live row and a
`RowEditor` that can clone a row (sampler state and KV cache included) into a spare row of the
same group, delete a span that ends the row's last turn, insert labelled tokens, and make the
row continue without retrieval (the edits are `ragjax.rollout.row_store.RowStore`'s).  Hooks are
registered plug-ins (`ragjax.registry`, category "rollout_hook"), built from the config's
`rollout.hooks`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

from ragjax.rollout.protocols.base import Action
from ragjax.rollout.row_store import RowStore
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
  """The row edits a hook may make, valid during one hook call.

  `seed` is the run's seed, `turn` the turn being edited and `first_row` the index in the whole
  batch of this wave's (or process's) row 0: a hook that draws random numbers seeds each row's
  draws from these and the row's batch index (`first_row + view.row` for an original row), so a
  row's edits depend neither on the runs before it (exact resume) nor on how the batch was
  split into waves or processes."""

  def __init__(self, rows: RowStore, turn: int, seed: int, first_row: int):
    self._rows, self._turn, self._seed, self._first_row = rows, turn, seed, first_row
    self.created: list[int] = []

  @property
  def seed(self) -> int:
    return self._seed

  @property
  def turn(self) -> int:
    return self._turn

  @property
  def first_row(self) -> int:
    return self._first_row

  @property
  def free_rows(self) -> int:
    """Spare rows left to clone into this run (a clone with none left is an error)."""
    return len(self._rows.free)

  def note(self, key: str, n: float = 1) -> None:
    """Adds n to the run's counter `key` (returned as `RolloutBatch.stats`)."""
    self._rows.stats[key] += n

  def clone(self, row: int) -> int:
    """A copy of `row` (history, cache, this turn's action) in a spare row of its group."""
    dst = self._rows.clone(row, self._turn)
    self.created.append(dst)
    return dst

  def delete_span(self, row: int, start: int, end: Optional[int] = None) -> None:
    """Deletes characters [start, end) of the row's last turn (end = the turn's end)."""
    self._rows.delete_span(row, start, end)

  def insert(self, row: int, segments: Sequence[Segment]) -> None:
    """Appends labelled text after the row's last turn; it is fed to the sampler next."""
    self._rows.insert(row, segments, self._turn)

  def resume(self, row: int) -> None:
    """The row continues decoding next turn, without retrieval or an observation."""
    self._rows.resume(row)

  def text(self, row: int) -> str:
    return self._rows[row].turn_text


Hook = Callable[[list, RowEditor], None]


def run_hooks(hooks: Sequence[Hook], rows: RowStore, live: list[int], final_turn: int,
              records: Sequence, seed: int, first_row: int) -> list[int]:
  """Calls every hook on the views of the rows in `live` that read a turn, one call per turn
  index among them (rows refilled later lag behind); returns `live` and the clones made."""
  for t in sorted({rows[r].turn for r in live}) if hooks else ():
    views = [TurnView(row=r, turn=t, final=t == final_turn, action=rows[r].action,
                      text=rows[r].turn_text, group_id=rows[r].group_id,
                      clone_of=rows[r].clone_of, prompt=records[rows[r].prompt_index])
             for r in live if rows[r].turn == t]
    editor = RowEditor(rows, t, seed, first_row)
    for hook in hooks:
      hook(views, editor)
    live = live + [r for r in editor.created if r not in live]
  return live

