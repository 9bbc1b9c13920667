"""R3-RAG's plain-text "Step j" protocol (Li et al. 2025, "R3-RAG"; seeds §3.2).

The policy writes `Step j:\\nThe problem analysis: ...\\nThe retrieval query: ...` or
`... The final answer: ...`.  Two layouts (`context`):

* "restart" (the paper's): every step is a fresh single-turn chat whose user message is
  `The question: {q}` followed, per earlier step, by `\\n{step}\\nThe retrieval documents:
  {passages}` (the step as kept, the documents cut to `obs_max_chars`: each document,
  `doc_cut="each"`, as the paper's App. E writes it, or the step's joined string, "joined",
  as the released code does); the assistant writes step j and ends its turn.  The engine reuses the cache of the common prefix of consecutive
  prompts, so re-prompting costs only the new text.  Each step is its own training sample.
* "stream": the history stays in one assistant stream; a query is answered with
  `\\nThe retrieval documents: {passages}\\n\\n` and the next step follows.

Parsing follows the released code: the analysis runs to the next section marker, the query is
also cut at "\\nStep" and before its first "?", and whichever of query / answer comes first
wins.  With `step_header` a step must also hold exactly one `Step <n>:` line (the code's format
check; the number itself is not checked); a step failing it is generated again up to
`format_retries` times (the code: `try_format_wrong=3` generations in all) before it counts as
a format failure.  A query in the last step is still retrieved (its
documents are scored by the relevance reward) and the trajectory then ends without an answer.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence

from ragjax import registry
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import (Action, Kind, PromptInput, Protocol, RestartStep,
                                           hit_contents)
from ragjax.rollout.segments import Segment

ANALYSIS = "The problem analysis:"
QUERY = "The retrieval query:"
ANSWER = "The final answer:"
DOCUMENTS = "The retrieval documents:"
_SECTION_MARKERS = (ANALYSIS, QUERY, ANSWER, DOCUMENTS, "###", "####")
STEP_HEADER = re.compile(r"Step \d+:\n")
DOC_CUTS = ("each", "joined")


def _region_end(text: str, start: int, stops: Sequence[str]) -> int:
  ends = [i for i in (text.find(s, start) for s in stops) if i >= 0]
  return min(ends) if ends else len(text)


def r3_step_fields(text: str) -> dict:
  """The analysis, query and answer of a step's text (each "" when absent), cut as the parser
  cuts them; what the relevance judge and the cold-start data read."""
  out = {"analysis": "", "query": "", "answer": ""}
  a = text.find(ANALYSIS)
  if a < 0:
    return out
  a_start = a + len(ANALYSIS)
  out["analysis"] = text[a_start:_region_end(text, a_start, _SECTION_MARKERS)].strip()
  q, ans = text.find(QUERY, a_start), text.find(ANSWER, a_start)
  stops = _SECTION_MARKERS + ("\nStep",)
  if q >= 0 and (ans < 0 or q < ans):
    start = q + len(QUERY)
    out["query"] = text[start:_region_end(text, start, stops)].split("?")[0].strip()
  elif ans >= 0:
    start = ans + len(ANSWER)
    out["answer"] = text[start:_region_end(text, start, stops)].strip()
  return out


def parse_r3_step(text: str, *, final: bool, step_header: bool = False) -> Action:
  """One step: SEARCH (a query, also in the last step), ANSWER, or END with a `format_*`
  reason.  `final` is accepted for the protocol interface; R3-RAG retrieves a last-step query
  too, and the engine ends the trajectory after serving it."""
  del final
  if step_header and len(STEP_HEADER.findall(text)) != 1:
    return Action(Kind.END, reason="format_step_header")
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
    return Action(Kind.SEARCH, query=query, keep=keep, all_queries=(query,))
  start = ans + len(ANSWER)
  end = _region_end(text, start, stops)
  answer = text[start:end].strip()
  keep = len(text[:end].rstrip())
  if not analysis or not answer:
    return Action(Kind.END, keep=keep, reason="format_empty_section")
  return Action(Kind.ANSWER, answer=answer, keep=keep)


@registry.register("protocol")
@dataclasses.dataclass(frozen=True)
class R3Rag(Protocol):
  """R3-RAG's plain-text "Step j:" rollout, each step prompted afresh (a restart context).

  Defaults are the RL setting of the code: a fresh chat per step, top-2, documents cut to 512
  characters, 5 steps, passages already seen in the trajectory skipped, at most 10 per
  trajectory.  The paper's evaluation: top_k=5, obs_max_chars=None."""
  name = "r3_rag"
  top_k: int = 2
  max_turns: int = 5
  final_turn: bool = False
  obs_max_tokens: Optional[int] = None
  obs_max_chars: Optional[int] = 512
  dedup_docs: bool = True
  max_docs_per_trajectory: Optional[int] = 10
  system: Optional[str] = "You are a helpful assistant."
  context: str = "restart"
  step_header: bool = False
  doc_cut: str = "joined"          # obs_max_chars per step ("joined") or per document ("each")
  format_retries: int = 0          # regenerations of a step that fails the header check
  retry_reasons = ("format_step_header",)

  def __post_init__(self):
    super().__post_init__()
    if self.doc_cut not in DOC_CUTS:
      raise ValueError(f"protocol.doc_cut must be one of {DOC_CUTS}, got {self.doc_cut!r}")
    if self.format_retries < 0:
      raise ValueError(f"protocol.format_retries must be >= 0, got {self.format_retries}")

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
    return parse_r3_step(text, final=final, step_header=self.step_header)

  def format_documents(self, hits: Sequence) -> str:
    cut = self.obs_max_chars if self.doc_cut == "each" else None
    return "\n".join(hit_contents(h)[:cut] for h in hits)

  def truncate_chars(self, docs: str) -> str:
    return docs if self.doc_cut == "each" else super().truncate_chars(docs)

  def observation(self, query: str, hits: Sequence) -> list[Segment]:
    return [Segment(f"\n{DOCUMENTS} ", Source.ENV),
            self.retrieved_segment(self.format_documents(hits)),
            Segment("\n\n", Source.ENV)]

  def invalid_observation(self) -> list[Segment]:
    return []  # R3-RAG never continues after a malformed step

  def restart_history(self, steps: Sequence[RestartStep]) -> list[Segment]:
    """`\\n{step}\\nThe retrieval documents: {passages}` per earlier step, after the question."""
    out = []
    for st in steps:
      out += [Segment("\n", Source.ENV), Segment(st.text, Source.PROMPT, plain=True),
              Segment(f"\n{DOCUMENTS} ", Source.ENV),
              self.retrieved_segment(self.format_documents(st.hits))]
    return out
