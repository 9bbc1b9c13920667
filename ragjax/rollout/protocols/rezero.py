"""ReZero's protocol (Dao & Le 2025, "ReZero: Enhancing LLM search ability by trying one-more-
time"; prompts from its code, seeds §B2.2).

Search-R1 tags, but each observation is a new *user* message `<information>...</information>`,
the query is the last `<search>` of the assistant message, a message without a search ends the
chat, and there are many turns (20) under a total budget of new tokens.  The paper's sampler had
no `</search>` stop; `stop_on_search=True` adds one (seeds §B2.3 [D]).

`today` is the date in the system prompt; the code writes the current date, so a run resumed
after midnight would change its prompt: configs pin it.  The row record gets `messages`, the
chat after the prompt as ReZero's reward functions read it (assistant contents without the
end-of-turn token, and each `<information>` user message the policy was shown).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from typing import Optional, Sequence

from ragjax import registry
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import Action, Kind, PromptInput, Protocol, hit_contents
from ragjax.rollout.segments import Segment

SYSTEM_TEMPLATE = ("Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
                   "You are a helpful assistant with search capabilities.")

USER_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. You ONLY HAVE TWO CHOICES after thinking: to search or "
    "to answer but not both.\n"
    "If you find you lack some knowledge, you MUST call a search engine by <search> query "
    "</search>. \n"
    "Based on the user's core intent, formulate the most effective search query using specific, "
    "descriptive keywords that differentiate the topic clearly. Aim for queries that resemble how "
    "an expert searcher might phrase it, like using \"compare lithium-ion vs solid-state battery "
    "efficiency\" rather than just \"batteries\". You can search as many turns as you want, but "
    "only one search query per thinking. The information will be provided when you end your "
    "response. If you find no further external knowledge needed, you MUST directly provide the "
    "answer inside <answer> and </answer>, without detailed illustrations. You can only answer one "
    "time, so make sure to answer when you have 100% confidence in the search results, else "
    "continue searching. You MUST END YOUR RESPONSE WITH either <answer> and </answer> tags or "
    "<search> and </search> tags. Question: {question}\n")


def rezero_results(hits: Sequence) -> str:
  return "".join(f"Result {i + 1}:\n{hit_contents(h)}\n------\n" for i, h in enumerate(hits))


@registry.register("protocol")
@dataclasses.dataclass(frozen=True)
class ReZero(Protocol):
  """ReZero's chat rollout: tool-call searches answered as user turns, retries encouraged."""
  name = "rezero"
  observation_role = "user"
  top_k: int = 2
  max_turns: int = 20
  final_turn: bool = False
  obs_max_tokens: Optional[int] = None
  max_response_tokens: Optional[int] = 4096
  stop_on_search: bool = False
  stop_on_answer: bool = False         # also stop after `</answer>` (a policy that never learnt
                                       # to end its message there, e.g. the world's cold start)
  today: Optional[str] = None          # "DD Mon YYYY"; None = the current date, as the code does
  # "code": the code's system + user messages; else a user template with {question} and no
  # system message (a from-scratch policy at the synthetic world's scale cannot read English)
  prompt: str = "code"

  def __post_init__(self):
    super().__post_init__()
    if self.prompt != "code" and "{question}" not in self.prompt:
      raise ValueError(f"protocol.prompt={self.prompt!r}: use 'code' or a template with "
                       f"{{question}}")

  def system_message(self, inp: PromptInput) -> Optional[str]:
    if self.prompt != "code":
      return None
    date = self.today or datetime.date.today().strftime("%d %b %Y")
    return SYSTEM_TEMPLATE.format(date=date)

  def user_message(self, inp: PromptInput) -> str:
    return (USER_TEMPLATE if self.prompt == "code" else self.prompt).format(question=inp.question)

  @property
  def stop_sequences(self) -> tuple[str, ...]:
    return (("</search>",) if self.stop_on_search else ()) + (
        ("</answer>",) if self.stop_on_answer else ())

  def parse(self, text: str, *, final: bool) -> Action:
    queries = tuple(q.strip() for q in re.findall(r"<search>(.*?)</search>", text, re.DOTALL))
    if queries:
      if final:
        return Action(Kind.END, query=queries[-1], reason="search_in_final_turn",
                      all_queries=queries)
      if not queries[-1]:
        return Action(Kind.END, reason="empty_query", all_queries=queries)
      return Action(Kind.SEARCH, query=queries[-1], all_queries=queries)
    answers = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
    if answers:
      return Action(Kind.ANSWER, answer=answers[-1].strip())
    return Action(Kind.END, reason="no_action")

  def format_documents(self, hits: Sequence) -> str:
    return rezero_results(hits)

  def observation(self, query: str, hits: Sequence) -> list[Segment]:
    return [Segment("<information>", Source.ENV), self.retrieved_segment(self.format_documents(hits)),
            Segment("</information>", Source.ENV)]

  def invalid_observation(self) -> list[Segment]:
    return []

  def annotate(self, row) -> dict:
    return {"messages": chat_messages(row, self)}


def chat_messages(row, protocol: ReZero) -> list[dict]:
  """[{"role": "assistant" | "user", "content"}] after the prompt.  A search turn is followed by
  its information message unless the row ran out of budget there (then it was never shown)."""
  out = []
  for i, t in enumerate(row.turns):
    out.append({"role": "assistant", "content": t.text})
    last = i == len(row.turns) - 1
    if t.action == "search" and not (last and row.stop_reason == "budget"):
      docs = protocol.truncate_chars(protocol.format_documents(t.doc_texts))
      out.append({"role": "user", "content": f"<information>{docs}</information>"})
  return out
