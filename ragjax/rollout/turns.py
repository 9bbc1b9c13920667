"""What one turn does to its row: read, observed, retried, advanced.

Tokens in, tokens out: the policy's spans are the sampler's own ids (cut only on token
boundaries when the protocol drops what follows an action); only environment / injected text is
tokenised, segment by segment, so each label is attached while concatenating.

A turn's sampler tokens are read into the protocol's action (`read`; kept up to the action's
end, never past an eos in an inline stream, never past the question's own turn budget:
`Protocol.turn_budget`, UR²'s per-task budgets).  The action is then observed (`observe`): an
answer or an end finishes the row; a search's documents or the invalid-action message are
appended and wait in `Row.pending` for the sampler's next extend (or, with a restart context,
the row restarts from its next prompt: `ragjax.rollout.contexts`).  A malformed turn the
protocol retries (`Protocol.format_retries`, for the reasons in `Protocol.retry_reasons`) is
dropped and decoded again.  The protocol's final turn (`final_turn`) starts with its
forced-answer text (`final_prefix`, ENV).
"""

from __future__ import annotations

from typing import Optional

from ragjax.rollout.contexts import StreamContext
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import Action, Kind, Protocol, hit_contents, hit_id
from ragjax.rollout.renderer import Renderer
from ragjax.rollout.row_store import Row, RowStore
from ragjax.rollout.textspan import decode, tokens_covering
from ragjax.rollout.trajectory import TurnRecord
from ragjax.sampling.sampler_config import BUDGET, CACHE_FULL, NOT_RUN

_FINAL_REASONS = ("search_in_final_turn", "no_action_in_final_turn", "query_in_final_turn")


class Turns:
  """The turn rules of one protocol; `total` turns a row may take (`max_turns` + the final
  turn), the last of them the final one."""

  def __init__(self, protocol: Protocol, renderer: Renderer, context: StreamContext, eos_ids):
    self.protocol, self.renderer, self.context = protocol, renderer, context
    self.tokenizer = renderer.tokenizer
    self.eos_ids = frozenset(int(e) for e in eos_ids or ())
    self.format_retries = int(getattr(protocol, "format_retries", 0) or 0)
    self.total = protocol.max_turns + (1 if protocol.final_turn else 0)
    segs = protocol.final_turn_segments() if protocol.final_turn else []
    self.final_prefix = self.renderer.tokenize(segs)[:2] if segs else None   # (ids, labels)

  def is_final(self, row: Row) -> bool:
    return row.turn == self.total - 1

  def cap(self, inp) -> Optional[int]:
    """The question's own turn budget (`Protocol.turn_budget`), or None."""
    return self.protocol.turn_budget(inp)

  def read(self, row: Row, ids: list, logprobs, reason: int, cap: Optional[int]) -> None:
    """The row's turn of sampler tokens `ids`: parsed into its action, kept up to the action's
    end (and never past an eos in an inline stream), appended and recorded."""
    t, final = row.turn, self.is_final(row)
    row.sampler_len += len(ids)            # what the sampler holds, also past a cut below
    if cap is not None and len(ids) > cap:   # as a sampler with this turn budget would stop
      ids, logprobs, reason = ids[:cap], logprobs[:cap], BUDGET
    eos_tail = bool(ids) and ids[-1] in self.eos_ids
    body = ids[:-1] if eos_tail else ids
    text = decode(self.tokenizer, body)
    # A hook's inserted text opens this turn (REX-RAG's probe `<search>`: the policy writes
    # only the query and `</search>`), so the action is parsed from both; `keep` counts
    # characters of the policy's own text.
    prefix, row.injected_text = row.injected_text, ""
    action = self.protocol.parse(prefix + text, final=final)
    keep = len(ids)
    if action.keep is not None and action.keep - len(prefix) < len(text):
      keep = tokens_covering(self.tokenizer, body, text, max(action.keep - len(prefix), 0))
    continuing = action.kind in (Kind.SEARCH, Kind.INVALID)
    if (continuing and eos_tail and self.protocol.observation_role == "inline"
        and not self.context.restarts):
      keep = min(keep, len(body))      # never continue an inline stream after an eos token
    if keep < len(ids):                # the text of exactly the kept tokens
      text = decode(self.tokenizer, ids[:keep])
    row.end_token_text = (decode(self.tokenizer, ids[-1:])
                          if eos_tail and keep == len(ids) else None)
    row.turn_start = len(row.tokens)
    row.turn_ids = ids[:keep]
    row.turn_text = text
    row.action = action
    row.resume = False
    row.pending = []
    row.append(ids[:keep], Source.POLICY, t, logprobs[:keep])
    row.recorded = row.recorded and keep == 0
    if reason == CACHE_FULL:
      row.action = Action(Kind.END, reason="budget")
    elif reason == NOT_RUN:
      row.action = Action(Kind.END, reason="sampler_finished")
    row.records.append(TurnRecord(turn=t, action=row.action.kind.value, text=text,
                                  start=row.turn_start, end=len(row.tokens),
                                  query=action.query if action.kind == Kind.SEARCH else None,
                                  all_queries=action.all_queries, reason=row.action.reason))

  def searches(self, row: Row) -> bool:
    """Whether the row's turn asks for documents."""
    return not row.resume and row.action is not None and row.action.kind == Kind.SEARCH

  def search_observation(self, row: Row, hits) -> list:
    """The segments a searching row's documents come back in (the protocol's, framed)."""
    return self.renderer.wrap_observation(self.protocol.observation(row.action.query, hits),
                                          row.end_token_text)

  def prefetch(self, rows_hits) -> None:
    """Tokenise the observations that these (row, hits) pairs are about to get in one batch
    (`Renderer.prefetch`); `observe` then reads their ids."""
    self.renderer.prefetch([self.search_observation(row, hits)
                            for row, hits in rows_hits if self.searches(row)])

  def observe(self, row: Row, hits, rows: RowStore, inp) -> bool:
    """After the row's turn (and its search's `hits`): the row ends (False) or its observation
    is appended and waits in `pending` for the sampler (True).  `inp` is its prompt."""
    if self._retries(row):
      return self._regenerate(row, rows)
    t, final = row.turn, self.is_final(row)
    kind = row.action.kind
    obs = []
    if row.resume:
      kind = None
    elif kind == Kind.SEARCH:
      obs = self.search_observation(row, hits)
      row.records[-1].doc_ids = tuple(hit_id(h) for h in hits)
      row.records[-1].doc_texts = tuple(hit_contents(h) for h in hits)
    elif kind == Kind.INVALID:
      obs = self.renderer.wrap_observation(self.protocol.invalid_observation(),
                                           row.end_token_text)
      if not obs:
        kind = Kind.END
    if kind == Kind.ANSWER:
      row.done, row.answer, row.stop_reason = True, row.action.answer, "answer"
    elif kind == Kind.END:
      reason = row.action.reason or "end"
      row.end("max_turns" if reason in _FINAL_REASONS else reason)
    elif kind == Kind.SEARCH and final:    # served and recorded; nothing is decoded after it
      row.end("max_turns")
    self.context.record_turn(row, kind, obs, hits)
    if row.done:
      return False
    if self.context.restarts_after(kind):
      return self.context.restart(row, inp, rows.capacity)
    ids, labels, truncated = self.renderer.tokenize(obs)
    row.records[-1].obs_truncated = truncated
    if rows.over_budget(row, len(ids)):
      row.end("budget")
      return False
    row.append_labelled(ids, labels, Source.ENV, t)
    row.pending = row.pending + ids
    return True

  def _retries(self, row: Row) -> bool:
    """Whether the row's malformed turn is decoded again (`Protocol.format_retries` times at
    most, for the parse failures in `Protocol.retry_reasons`)."""
    a = row.action
    return (row.format_retries < self.format_retries and not row.resume and a is not None
            and a.kind == Kind.END and a.reason in getattr(self.protocol, "retry_reasons", ()))

  def _regenerate(self, row: Row, rows: RowStore) -> bool:
    """Drops the row's turn (tokens, record) and decodes it again from the same history: the
    sampler row is truncated back (`RowStore.sync_lengths`) and, with a policy that has
    `reseed`, given a new stream, so the retry samples anew (R3-RAG's code regenerates a step
    whose `Step j:` header check fails, at most 3 generations in all)."""
    row.format_retries += 1
    rows.stats["format_retries"] += 1
    row.records.pop()
    row.cut(row.turn_start)
    row.recorded = True                   # back to the turn's prompt: nothing new to record
    row.action, row.pending, row.regenerate = None, [], True
    rows.reseed(row, 1000 * (row.turn + 1) + row.format_retries)
    return True

  def add_final_prefix(self, row: Row, rows: RowStore) -> bool:
    """Appends the forced-answer text (ENV) before the row's final turn (False, and the row
    ends: "budget", when it leaves no room for a generated token)."""
    ids, labels = self.final_prefix
    if rows.over_budget(row, len(ids)):
      row.end("budget")
      return False
    row.append_labelled(ids, labels, Source.ENV, row.turn)
    return True

  def advance(self, row: Row) -> bool:
    """The row's turn is over: the next one (a regenerated turn stays).  True when the row ran
    out of turns (it ends: "max_turns")."""
    if row.regenerate:
      row.regenerate = False
      return False
    row.turn += 1
    row.format_retries = 0
    if row.turn >= self.total:
      row.end("max_turns")
      return True
    return False

