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

from ragjax import registry
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

# One worked example (`SearchR1.demonstration`): not in the paper, whose 3B-7B models follow the
# instruction alone.  A small instruct model (SmolLM2-135M) asked with the instruction alone
# writes no tag at all (0 of 8 greedy rollouts, configs/smollm2.py); shown one trajectory as an
# earlier chat turn it searches.  The passage is real Wikipedia text in Search-R1's document
# format; the example question is not in the HotpotQA / 2Wiki / MuSiQue sets ragjax evaluates.
DEMO_QUESTION = "In which country is the city where Lionel Messi was born?"
DEMO_TRAJECTORY = (
    "<think> I need to find where Lionel Messi was born. </think>\n"
    "<search> Lionel Messi birthplace </search>\n\n"
    "<information>Doc 1(Title: \"Lionel Messi\") Lionel Andrés Messi (born 24 June 1987) is an "
    "Argentine professional footballer. Messi was born in Rosario, in the province of Santa Fe, "
    "Argentina.\n</information>\n\n"
    "<think> Messi was born in Rosario, a city in Argentina. </think>\n"
    "<answer> Argentina </answer>")

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


OBS_CAPS = ("documents", "observation")


@registry.register("protocol")
@dataclasses.dataclass(frozen=True)
class SearchR1(Protocol):
  """Search-R1's rollout: <think>, <search> query </search>, <information> documents, <answer>."""
  name = "search_r1"
  demo_trajectory = DEMO_TRAJECTORY
  top_k: int = 3
  max_turns: int = 4
  obs_max_tokens: int = 500
  example_answer: str = "Beijing"
  invalid_message: str = LONG_INVALID_MESSAGE
  # True: one worked trajectory (DEMO_QUESTION / DEMO_TRAJECTORY) goes before the question, as
  # an earlier user / assistant exchange in chat (in plain text, before the instruction).  Off
  # in every paper config (the papers prompt with the instruction alone).
  demonstration: bool = False
  # What `obs_max_tokens` cuts: "documents" (the retrieved text; the tags always survive) or
  # "observation" (the whole `\n\n<information>...</information>\n\n` string, as Search-R1's
  # `_process_next_obs` cuts it, so a long result loses its closing tag: generation.py:87-89)
  obs_cap: str = "documents"

  def __post_init__(self):
    super().__post_init__()
    if self.obs_cap not in OBS_CAPS:
      raise ValueError(f"protocol.obs_cap must be one of {OBS_CAPS}, got {self.obs_cap!r}")

  def user_message(self, inp: PromptInput) -> str:
    return SEARCH_R1_TEMPLATE.format(example=self.example_answer,
                                     question=search_r1_question(inp.question))

  def messages(self, inp: PromptInput) -> list:
    asked = super().messages(inp)
    if not self.demonstration:
      return asked
    demo = [{"role": "user", "content": self.user_message(PromptInput(DEMO_QUESTION))},
            {"role": "assistant", "content": self.demo_trajectory}]
    return asked[:-1] + demo + asked[-1:]

  def plain_prompt(self, inp: PromptInput) -> str:
    asked = super().plain_prompt(inp)
    if not self.demonstration:
      return asked
    return f"{self.user_message(PromptInput(DEMO_QUESTION))}\n{self.demo_trajectory}\n\n{asked}"

  @property
  def stop_sequences(self) -> tuple[str, ...]:
    return ("</search>", "</answer>")

  def parse(self, text: str, *, final: bool) -> Action:
    return parse_search_answer(text, final=final)

  def observation(self, query: str, hits: Sequence) -> list[Segment]:
    docs = self.format_documents(hits).strip()
    if self.obs_cap == "observation":
      return [Segment("\n\n<information>", Source.ENV, budget=self.obs_max_tokens),
              Segment(self.truncate_chars(docs), Source.RETRIEVED),
              Segment("</information>\n\n", Source.ENV)]
    return [Segment("\n\n<information>", Source.ENV), self.retrieved_segment(docs),
            Segment("</information>\n\n", Source.ENV)]

  def invalid_observation(self) -> list[Segment]:
    budget = self.obs_max_tokens if self.obs_cap == "observation" else None
    return [Segment(self.invalid_message, Source.ENV, budget=budget)]


@registry.register("protocol")
@dataclasses.dataclass(frozen=True)
class RexRag(SearchR1):
  """REX-RAG's rollout (seeds §1.2): Search-R1 tags, 5 turns, a short invalid message.

  The probe-policy cloning lives in `ragjax.rollout.rex_rag` as a mid-rollout hook.
  """
  name = "rex_rag"
  max_turns: int = 5
  invalid_message: str = REX_INVALID_MESSAGE


# The no-search baseline's instruction: Search-R1's answer format without the search tool.
DIRECT_TEMPLATE = (
    "Answer the given question directly, without searching. Provide the answer inside <answer> "
    "and </answer> without detailed illustrations. For example, <answer> {example} </answer>. "
    "Question: {question}")


@registry.register("protocol")
@dataclasses.dataclass(frozen=True)
class DirectAnswer(SearchR1):
  """The model answering from memory: one turn, `<answer>` only (a real model's "direct"
  baseline beside its search rollouts; with `demonstration`, the worked example answers
  directly too)."""
  name = "direct"
  demo_trajectory = "<answer> Argentina </answer>"
  max_turns: int = 0

  def user_message(self, inp: PromptInput) -> str:
    return DIRECT_TEMPLATE.format(example=self.example_answer,
                                  question=search_r1_question(inp.question))

  @property
  def stop_sequences(self) -> tuple[str, ...]:
    return ("</answer>",)


# The retrieve-once baseline's instruction: the direct answer's, with the passages retrieved for
# the question itself placed before it (Search-R1's "RAG" row: seeds §0.2).
RETRIEVE_ONCE_TEMPLATE = (
    "Answer the given question using the documents below, without searching. Provide the "
    "answer inside <answer> and </answer> without detailed illustrations. For example, "
    "<answer> {example} </answer>.\n<information>{documents}</information>\nQuestion: {question}")


@registry.register("protocol")
@dataclasses.dataclass(frozen=True)
class RetrieveOnce(DirectAnswer):
  """Retrieve-once RAG, the papers' "RAG" row: the question itself is the query, its `top_k`
  passages (`format_documents`, cut to `obs_max_tokens` tokens) are read into the record's
  `documents` field before the rollout (`ragjax.eval.systems.with_documents`) and placed in
  the prompt, and the model answers in one turn without searching.  A question with no
  documents (the worked example of `demonstration`) is asked as the direct answer's."""
  name = "retrieve_once"

  def user_message(self, inp: PromptInput) -> str:
    docs = inp.documents.strip()
    if not docs:
      return super().user_message(inp)
    return RETRIEVE_ONCE_TEMPLATE.format(example=self.example_answer, documents=docs,
                                         question=search_r1_question(inp.question))
