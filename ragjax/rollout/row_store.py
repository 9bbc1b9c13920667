"""A wave's rows and the sampler rows they decode in.

`Row` is one trajectory being built on the host: its tokens, labels, log-probs and turn index
per token, its turn records, and this turn's parse.  `RowStore` holds a wave's rows (batch row
-> `Row`), the sampler state and the free sampler rows, and is the one place that calls the
sampler on rows: decode, extend (in `max_extend` chunks), truncate a row back to its kept tokens,
set rows done, refill, reseed, and the edits hooks make through `ragjax.rollout.hooks.RowEditor`
(clone a row into a spare sampler row, delete a span that ends its last turn, insert labelled
text, let it continue without retrieval).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from typing import Optional, Sequence

from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import Action
from ragjax.rollout.renderer import Renderer
from ragjax.rollout.segments import Segment
from ragjax.rollout.textspan import decode, tokens_within


@dataclasses.dataclass
class Row:
  tokens: list
  labels: list
  logprobs: list
  turns: list
  prompt_len: int
  group_id: int
  prompt_index: int
  sample_index: int
  sampler_len: int                       # the sampler's length for this row
  sampler_row: int                       # the sampler row it decodes in
  turn: int = 0                          # the row's own turn (rows refilled later lag behind)
  released: bool = False                 # its finished sampler row went back to the free list
  clone_of: Optional[int] = None
  cloned_at_turn: Optional[int] = None
  done: bool = False
  answer: Optional[str] = None
  stop_reason: str = ""
  records: list = dataclasses.field(default_factory=list)
  seen_docs: list = dataclasses.field(default_factory=list)
  # restart contexts: earlier turns (RestartStep), finished step samples, the text so far
  steps: list = dataclasses.field(default_factory=list)
  samples: list = dataclasses.field(default_factory=list)
  transcript: list = dataclasses.field(default_factory=list)
  recorded: bool = True                  # the row's content is already a recorded sample
  # this turn
  action: Optional[Action] = None
  turn_start: int = 0
  turn_ids: list = dataclasses.field(default_factory=list)
  turn_text: str = ""
  end_token_text: Optional[str] = None
  resume: bool = False                   # a hook asked the row to continue without retrieval
  injected_text: str = ""                # text a hook inserted since the policy's last turn:
                                         # the start of its next turn, parsed with it
  format_retries: int = 0                # this turn's regenerations (Protocol.format_retries)
  regenerate: bool = False               # the turn is decoded again (the turn does not advance)
  pending: list = dataclasses.field(default_factory=list)   # ids to extend with this turn

  @classmethod
  def for_prompt(cls, ids: Sequence[int], sampler_row: int, **fields) -> "Row":
    """A row that holds only its prompt `ids`, decoding in that sampler row."""
    return cls(tokens=list(ids), labels=[int(Source.PROMPT)] * len(ids),
               logprobs=[0.0] * len(ids), turns=[-1] * len(ids), prompt_len=len(ids),
               sampler_len=len(ids), sampler_row=int(sampler_row), **fields)

  def append(self, ids, label, turn, logprobs=None):
    self.tokens.extend(int(i) for i in ids)
    self.labels.extend([int(label)] * len(ids))
    self.logprobs.extend([0.0] * len(ids) if logprobs is None else [float(x) for x in logprobs])
    self.turns.extend([turn] * len(ids))

  def append_labelled(self, ids, labels, label, turn):
    """Appends environment / injected ids whose per-token labels the renderer gave."""
    self.append(ids, label, turn)
    if ids:
      self.labels[-len(ids):] = labels

  def cut(self, n: int):
    for lst in (self.tokens, self.labels, self.logprobs, self.turns):
      del lst[n:]

  def sample(self) -> dict:
    return dict(tokens=list(self.tokens), labels=list(self.labels), logprobs=list(self.logprobs),
                turns=list(self.turns), prompt_len=self.prompt_len, group_id=self.group_id)

  def end(self, reason: str) -> None:
    self.done, self.stop_reason = True, reason


class RowStore:
  """A wave's rows (batch row -> `Row`), the sampler's state and its free rows.

  `capacity` is the most tokens a sampler row holds (the state's `cache_length`);
  `response_budget` the most tokens after the prompt (None: no cap); `max_extend` the most
  tokens one `extend` call takes (None: no limit); `stats` the run's counters
  (`RolloutBatch.stats`)."""

  def __init__(self, sampler, state, free: list, renderer: Renderer,
               response_budget: Optional[int], max_extend: Optional[int],
               stats: collections.Counter):
    self.sampler, self.state, self.free = sampler, state, list(free)
    self.renderer, self.response_budget, self.stats = renderer, response_budget, stats
    self.max_extend = max_extend
    self.capacity = getattr(state, "cache_length", None)
    self.rows: dict[int, Row] = {}

  def __getitem__(self, r: int) -> Row:
    return self.rows[r]

  def add(self, r: int, row: Row) -> None:
    self.rows[r] = row

  def ids(self) -> list[int]:
    return sorted(self.rows)

  def batch_order(self) -> list[int]:
    """The rows in batch order: originals, then clones (by creation)."""
    return (sorted(r for r in self.rows if self.rows[r].clone_of is None)
            + sorted(r for r in self.rows if self.rows[r].clone_of is not None))

  def live(self) -> list[int]:
    return [r for r in sorted(self.rows) if not self.rows[r].done]

  def any_live(self) -> bool:
    return any(not row.done for row in self.rows.values())

  def sampler_rows(self, rows) -> list[int]:
    return [self.rows[r].sampler_row for r in rows]

  def over_budget(self, row: Row, n_obs: int) -> bool:
    """True when appending n_obs tokens leaves no room for one more generated token."""
    after = len(row.tokens) + n_obs
    if self.capacity is not None and after + 1 > self.capacity:
      return True
    if self.response_budget is not None and after - row.prompt_len >= self.response_budget:
      return True
    return False

  # ---- the policy on rows -------------------------------------------------------------------
  def decode(self, steps: Optional[int] = None):
    """One decode call (a whole turn, or at most `steps` tokens); the policy's output."""
    if steps:
      self.state, out = self.sampler.decode(self.state, steps=steps)
    else:
      self.state, out = self.sampler.decode(self.state)
    return out

  def set_done(self, rows) -> None:
    self.state = self.sampler.set_done(self.state, self.sampler_rows(rows))

  def truncate(self, rows, lengths) -> None:
    self.state = self.sampler.truncate(self.state, self.sampler_rows(rows), lengths)

  def reseed(self, row: Row, salt: int) -> None:
    """A new sampling stream for the row (`Policy.reseed`, when the policy has it), so a
    regenerated turn differs."""
    if hasattr(self.sampler, "reseed"):
      self.state = self.sampler.reseed(self.state, [row.sampler_row], [salt])

  def refill(self, sampler_rows, prompts, **kw) -> None:
    self.state = self.sampler.refill(self.state, sampler_rows, prompts, **kw)

  def sync_lengths(self, rows) -> None:
    """Truncates sampler rows whose history runs past the kept tokens (cut actions, eos)."""
    cut = [r for r in rows
           if self.rows[r].sampler_len != len(self.rows[r].tokens) - len(self.rows[r].pending)]
    if cut:
      lengths = [len(self.rows[r].tokens) - len(self.rows[r].pending) for r in cut]
      self.truncate(cut, lengths)
      for r, n in zip(cut, lengths):
        self.rows[r].sampler_len = n

  def extend(self, rows, id_lists) -> None:
    """Feeds each row its ids (`max_extend` at a time); the rows' pending ids are cleared."""
    rows = [r for r, ids in zip(rows, id_lists) if ids]
    id_lists = [ids for ids in id_lists if ids]
    step = self.max_extend or max((len(x) for x in id_lists), default=1)
    offset = 0
    while rows:
      chunk = [ids[offset:offset + step] for ids in id_lists]
      sel = [i for i, c in enumerate(chunk) if c]
      if not sel:
        break
      self.state = self.sampler.extend(self.state, [self.rows[rows[i]].sampler_row for i in sel],
                                      [chunk[i] for i in sel])
      for i in sel:
        self.rows[rows[i]].sampler_len += len(chunk[i])
      offset += step
    for r in rows:
      self.rows[r].pending = []

  def extend_pending(self, rows) -> None:
    """Truncates the rows to their kept tokens and feeds each its pending ids."""
    self.sync_lengths(rows)
    self.extend(rows, [self.rows[r].pending for r in rows])

  def release_done(self) -> None:
    """Finished rows give their sampler rows back to the free list."""
    for row in self.rows.values():
      if row.done and not row.released:
        row.released = True
        self.free.append(row.sampler_row)

  # ---- edits (see ragjax.rollout.hooks.RowEditor) -------------------------------------------
  def clone(self, src: int, turn: int) -> int:
    """A copy of row `src` (history, cache, this turn's action) in a free sampler row; its
    batch row is the next after every row so far (originals, then clones by creation)."""
    if not self.free:
      raise RuntimeError("no spare sampler rows left to clone into; raise EngineConfig.spare_rows")
    dst = self.free.pop(0)
    self.state = self.sampler.clone_rows(self.state, [self.rows[src].sampler_row], [dst])
    row = copy.deepcopy(self.rows[src])
    row.clone_of, row.cloned_at_turn, row.sampler_row = src, turn, dst
    new = max(self.rows) + 1
    self.rows[new] = row
    return new

  def delete_span(self, r: int, start: int, end: Optional[int]) -> None:
    """Deletes characters [start, end) of row r's last turn; the span must end the turn."""
    row = self.rows[r]
    text = row.turn_text
    end = len(text) if end is None else end
    if not 0 <= start <= end <= len(text):
      raise ValueError(f"row {r}: span [{start}, {end}) is outside its last turn of "
                       f"{len(text)} characters")
    if end != len(text):
      raise ValueError(f"row {r}: only a span that ends the last turn can be deleted without "
                       f"recomputing the cache (span ends at {end} of {len(text)})")
    tokenizer = self.renderer.tokenizer
    keep = tokens_within(tokenizer, row.turn_ids, text, start)
    row.cut(row.turn_start + keep)
    row.turn_ids = row.turn_ids[:keep]
    row.turn_text = decode(tokenizer, row.turn_ids)
    row.records[-1].text = row.turn_text
    row.records[-1].end = row.turn_start + keep
    row.end_token_text = None
    row.answer = None

  def insert(self, r: int, segments: Sequence[Segment], turn: int) -> None:
    """Appends labelled text to row r (fed to the sampler with its next extend), cut to what
    leaves a generated token's room in the cache."""
    row = self.rows[r]
    ids, labels, _ = self.renderer.tokenize(segments)
    if self.capacity is not None:
      room = max(self.capacity - 1 - len(row.tokens), 0)
      if len(ids) > room:
        ids, labels = list(ids)[:room], list(labels)[:room]
        self.stats["inserts_cut"] += 1
    row.append_labelled(ids, labels, Source.INJECTED, turn)
    row.pending = row.pending + ids
    row.injected_text += decode(self.renderer.tokenizer, list(ids))

  def resume(self, r: int) -> None:
    """Row r continues decoding next turn, without retrieval or an observation (it ends,
    "budget", when an insert filled its cache)."""
    row = self.rows[r]
    if self.over_budget(row, 0):
      row.end("budget")
      return
    row.resume, row.done, row.stop_reason = True, False, ""
    row.records[-1].action = "continue"
