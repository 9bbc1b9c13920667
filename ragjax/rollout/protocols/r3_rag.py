"""R3-RAG's plain-text "Step j" protocol (Li et al. 2025, "R3-RAG"; seeds §3.2).

The policy writes `Step j:\\nThe problem analysis: ...\\nThe retrieval query: ...` or
`... The final answer: ...`; the environment answers a query with
`\\nThe retrieval documents: {passages}\\n\\n`.  The paper re-prompts a fresh single-turn chat per
step with the history in the user message; here the history stays in one assistant stream so the
KV cache is extended instead of re-prefilled (same text layout as the cold-start data).  Parsing
follows the released code: the analysis runs to the next section marker, the query is also cut at
"\\nStep" and before its first "?", and whichever of query / answer comes first wins.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import Action, Kind, PromptInput, Protocol, hit_contents
from ragjax.rollout.segments import Segment

ANALYSIS = "The problem analysis:"
QUERY = "The retrieval query:"
ANSWER = "The final answer:"
DOCUMENTS = "The retrieval documents:"
_SECTION_MARKERS = (ANALYSIS, QUERY, ANSWER, DOCUMENTS, "###", "####")


def _region_end(text: str, start: int, stops: Sequence[str]) -> int:
  ends = [i for i in (text.find(s, start) for s in stops) if i >= 0]
  return min(ends) if ends else len(text)


def parse_r3_step(text: str, *, final: bool) -> Action:
  a = text.find(ANALYSIS)
  if a < 0:
    return Action(Kind.END, reason="format_no_analysis")
  a_start = a + len(ANALYSIS)
  analysis = text[a_start:_region_end(text, a_start, _SECTION_MARKERS)].strip()
  q, ans = text.find(QUERY, a_start), text.find(ANSWER, a_start)
  if q < 0 and ans < 0:
    return Action(Kind.END, reason="format_no_query_or_answer")
  stops = _SECTION_MARKERS + ("\nStep",)
  if q >= 0 and (ans < 0 or q < ans):
    start = q + len(QUERY)
    end = _region_end(text, start, stops)
    query = text[start:end].split("?")[0].strip()
    keep = len(text[:end].rstrip())
    if not analysis or not query:
      return Action(Kind.END, keep=keep, reason="format_empty_section")
    if final:
      return Action(Kind.END, query=query, keep=keep, reason="search_in_final_turn")
    return Action(Kind.SEARCH, query=query, keep=keep, all_queries=(query,))
  start = ans + len(ANSWER)
  end = _region_end(text, start, stops)
  answer = text[start:end].strip()
  keep = len(text[:end].rstrip())
  if not analysis or not answer:
    return Action(Kind.END, keep=keep, reason="format_empty_section")
  return Action(Kind.ANSWER, answer=answer, keep=keep)


@dataclasses.dataclass(frozen=True)
class R3Rag(Protocol):
  """Defaults are the RL setting of the code: top-2, documents cut to 512 characters, 5 steps,
  passages already seen in the trajectory skipped, at most 10 per trajectory."""
  name = "r3_rag"
  top_k: int = 2
  max_turns: int = 5
  final_turn: bool = False
  obs_max_tokens: Optional[int] = None
  obs_max_chars: Optional[int] = 512
  dedup_docs: bool = True
  max_docs_per_trajectory: Optional[int] = 10
  system: Optional[str] = "You are a helpful assistant."

  def system_message(self, inp: PromptInput) -> Optional[str]:
    return self.system

  def user_message(self, inp: PromptInput) -> str:
    return f"The question: {inp.question}"

  def plain_prompt(self, inp: PromptInput) -> str:
    return f"The question: {inp.question}\n"

  @property
  def stop_sequences(self) -> tuple[str, ...]:
    return ("\nStep", DOCUMENTS)

  def parse(self, text: str, *, final: bool) -> Action:
    return parse_r3_step(text, final=final)

  def format_documents(self, hits: Sequence) -> str:
    return "\n".join(hit_contents(h) for h in hits)

  def observation(self, query: str, hits: Sequence) -> list[Segment]:
    return [Segment(f"\n{DOCUMENTS} ", Source.ENV),
            self.retrieved_segment(self.format_documents(hits)),
            Segment("\n\n", Source.ENV)]

  def invalid_observation(self) -> list[Segment]:
    return []  # R3-RAG never continues after a malformed step
