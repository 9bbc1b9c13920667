"""Search-R1 (`<think>/<search>/<information>/<answer>`) and its REX-RAG variant.

Prompt: Search-R1's instruction as printed in REX-RAG (Jiang et al. 2025, Fig. 4), with the
example answer of the Search-R1 data files ("Beijing"); Jin et al. 2025, "Search-R1".  Loop
behaviour follows Search-R1's `generation.py` as summarised in seeds §0.2/§1.2: the turn is cut
after the first complete `<search>` or `<answer>` block, a search is answered with
`\\n\\n<information>{docs}</information>\\n\\n`, anything else gets the invalid-action message,
and after `max_turns` one last generation runs with search disabled.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import (Action, Kind, PromptInput, Protocol, first_tag_action,
                                           search_r1_question)
from ragjax.rollout.segments import Segment

# Jin et al. 2025 (Search-R1) prompt, verbatim from REX-RAG Fig. 4 (seeds §1.2).
SEARCH_R1_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search>, and it will return the top "
    "searched results between <information> and </information>. You can search as many times "
    "as you want. If you find no further external knowledge needed, you can directly provide "
    "the answer inside <answer> and </answer> without detailed illustrations. For example, "
    "<answer> {example} </answer>. Question: {question}")

# Search-R1 `execute_predictions` (also AutoRefine's), seeds §2.2.
LONG_INVALID_MESSAGE = (
    "\nMy previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again.\n")

# REX-RAG code (seeds §1.2).
REX_INVALID_MESSAGE = "\nMy action is invalid. "


def parse_search_answer(text: str, *, final: bool) -> Action:
  """First complete `<search>` or `<answer>` block wins; what follows it is cut."""
  all_queries = tuple(q.strip() for q in re.findall(r"<search>(.*?)</search>", text, re.DOTALL))
  m = first_tag_action(text, ("search", "answer"))
  if m is None:
    if final:
      return Action(Kind.END, reason="no_action_in_final_turn", all_queries=all_queries)
    return Action(Kind.INVALID, reason="no_action", all_queries=all_queries)
  tag, content = m.group(1), m.group(2).strip()
  if tag == "answer":
    return Action(Kind.ANSWER, answer=content, keep=m.end(), all_queries=all_queries)
  if final:  # Search-R1: a search in the final turn gets empty text and the trajectory ends
    return Action(Kind.END, query=content, keep=m.end(), reason="search_in_final_turn",
                  all_queries=all_queries)
  if not content:
    return Action(Kind.INVALID, keep=m.end(), reason="empty_query", all_queries=all_queries)
  return Action(Kind.SEARCH, query=content, keep=m.end(), all_queries=all_queries)


@dataclasses.dataclass(frozen=True)
class SearchR1(Protocol):
  """Search-R1's rollout: <think>, <search> query </search>, <information> documents, <answer>."""
  name = "search_r1"
  top_k: int = 3
  max_turns: int = 4
  obs_max_tokens: int = 500
  example_answer: str = "Beijing"
  invalid_message: str = LONG_INVALID_MESSAGE

  def user_message(self, inp: PromptInput) -> str:
    return SEARCH_R1_TEMPLATE.format(example=self.example_answer,
                                     question=search_r1_question(inp.question))

  @property
  def stop_sequences(self) -> tuple[str, ...]:
    return ("</search>", "</answer>")

  def parse(self, text: str, *, final: bool) -> Action:
    return parse_search_answer(text, final=final)

  def observation(self, query: str, hits: Sequence) -> list[Segment]:
    docs = self.format_documents(hits).strip()
    return [Segment("\n\n<information>", Source.ENV), self.retrieved_segment(docs),
            Segment("</information>\n\n", Source.ENV)]

  def invalid_observation(self) -> list[Segment]:
    return [Segment(self.invalid_message, Source.ENV)]


@dataclasses.dataclass(frozen=True)
class RexRag(SearchR1):
  """REX-RAG's rollout (seeds §1.2): Search-R1 tags, 5 turns, a short invalid message.

  The probe-policy cloning lives in `ragjax.rollout.rex_rag` as a mid-rollout hook.
  """
  name = "rex_rag"
  max_turns: int = 5
  invalid_message: str = REX_INVALID_MESSAGE
