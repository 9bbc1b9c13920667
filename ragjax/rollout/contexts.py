"""How a row's context goes on from turn to turn (`Protocol.context`): a stream, or restarts.

"stream" (`StreamContext`, every protocol but R3-RAG): one growing sequence per row; a turn's
observation is appended and extended into the sampler row, and the trajectory row is the
whole stream.

"restart" (`RestartContext`, R3-RAG): every turn is prompted afresh.  After a turn that
continues (a search or an invalid step) the row becomes the protocol's next prompt
(`Renderer.context_ids` with `Protocol.restart_history` of the earlier steps), the sampler row
is truncated to the prefix it shares with that prompt and extended with the rest.  Each
(prompt, turn) is recorded as a step sample (`RolloutBatch.samples`; turn spans index their own
sample), the trajectory row is the last one, and the row's response text is the transcript of
its steps.  A search in the last turn is served (its documents recorded) and the row then ends.

Every difference between the two is a method here; the engine calls the protocol's context.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import Kind, Protocol, RestartStep
from ragjax.rollout.renderer import Renderer
from ragjax.rollout.row_store import Row
from ragjax.rollout.textspan import decode


class StreamContext:
  restarts = False

  def __init__(self, protocol: Protocol, renderer: Renderer):
    self.protocol, self.renderer = protocol, renderer

  def prompt_ids(self, inp) -> list[int]:
    """The ids a row starts from."""
    return self.renderer.prompt_ids(inp)

  def record_turn(self, row: Row, kind: Optional[Kind], obs: Sequence, hits) -> None:
    """Notes the observed turn (`kind` None: a resumed row)."""

  def restarts_after(self, kind: Optional[Kind]) -> bool:
    """Whether the row goes on from a new prompt (`restart`) instead of its observation."""
    return False

  def samples(self, row: Row) -> list[dict]:
    """The row's step samples (none: the trajectory row is its one sample)."""
    return []

  def response(self, row: Row) -> str:
    """The row's text after its prompt, as recorded in `RowMeta.response_text`."""
    return decode(self.renderer.tokenizer, row.tokens[row.prompt_len:])


class RestartContext(StreamContext):
  restarts = True

  def prompt_ids(self, inp) -> list[int]:
    # every prompt of a row is rendered one way, so consecutive ones share the longest prefix
    return self.renderer.context_ids(inp)

  def record_turn(self, row: Row, kind: Optional[Kind], obs: Sequence, hits) -> None:
    row.transcript.append(row.turn_text + "".join(seg.text for seg in obs))
    if kind in (Kind.SEARCH, Kind.INVALID):
      row.steps.append(RestartStep(row.turn_text, row.action.query if kind == Kind.SEARCH
                                   else None, tuple(hits)))

  def restarts_after(self, kind: Optional[Kind]) -> bool:
    return kind in (Kind.SEARCH, Kind.INVALID)

  def restart(self, row: Row, inp, capacity: Optional[int]) -> bool:
    """Records the row's (prompt, turn) sample and makes its next prompt the row's content;
    the sampler keeps the shared prefix and is extended with the rest (`pending`).  False when
    the new prompt leaves no room for a generated token (the row ends: "budget")."""
    row.samples.append(row.sample())
    row.recorded = True
    ids = self.renderer.context_ids(inp, self.protocol.restart_history(row.steps))
    if capacity is not None and len(ids) + 1 > capacity:
      row.end("budget")
      return False
    common = 0
    for a, b in zip(row.tokens, ids):
      if a != b:
        break
      common += 1
    if common == 0:
      raise ValueError(f"{self.protocol.name}: consecutive restart prompts share no first token; "
                       f"the sampler needs at least one to keep")
    row.tokens, row.labels = list(ids), [int(Source.PROMPT)] * len(ids)
    row.logprobs, row.turns = [0.0] * len(ids), [-1] * len(ids)
    row.prompt_len = len(ids)
    row.pending = list(ids[common:])
    return True

  def samples(self, row: Row) -> list[dict]:
    return row.samples + ([] if row.recorded else [row.sample()])

  def response(self, row: Row) -> str:
    return "".join(row.transcript)


def context_for(protocol: Protocol, renderer: Renderer) -> StreamContext:
  return (RestartContext if protocol.context == "restart" else StreamContext)(protocol, renderer)
