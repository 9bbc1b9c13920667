"""AutoRefine: Search-R1 plus `<documents>` observations and model-written `<refine>` blocks.

Prompt (`template`): "code" is the string of AutoRefine's released data (Shi et al. 2025,
"Search and Refine During Think", seeds §2.2 [C]), "paper" the paper's Fig. 3 wording; any other
value is used as the template itself (with `{question}`).  Refinement is not enforced by the
environment: the `<refine>` block is ordinary policy text (trained on).  As in the code: each
call stops at the first `</search>` or `</answer>`, up to 5 searches then one more call with
search disabled, documents cut to 512 tokens, top-3, and the invalid-action message (masked).

`refine=False` is the paper's "w/o refinement" ablation (Table 2): the protocol falls back to
Search-R1's (its prompt and `<information>` observations), and the row records no refine text,
so the retrieval reward cannot fire.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from ragjax import registry
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import Action, PromptInput, search_r1_question
from ragjax.rollout.protocols.search_r1 import (DEMO_TRAJECTORY, LONG_INVALID_MESSAGE,
                                               SEARCH_R1_TEMPLATE, SearchR1,
                                               parse_search_answer)
from ragjax.rollout.segments import Segment

CODE_TEMPLATE = (
    "You are a helpful assistant excel at answering questions with multi-turn search engine "
    "calling. To answer questions, you must first reason through the available information using "
    "<think> and </think>. If you identify missing knowledge, you may issue a search request using "
    "<search> query </search> at any time. The retrieval system will provide you with the three "
    "most relevant documents enclosed in <documents> and </documents>. After each search, you need "
    "to summarize and refine the existing documents in <refine> and </refine>. You may send "
    "multiple search requests if needed. Once you have sufficient information, provide a concise "
    "final answer using <answer> and </answer>. For example, <answer> Donald Trump </answer>. "
    "Question: {question}\n")

# AutoRefine paper Fig. 3 (verbatim).
PAPER_TEMPLATE = (
    "You are a helpful assistant who is good at answering questions with multi-turn search engine "
    "calling. To answer questions, you must first reason through the available information using "
    "<think> and </think>. If you identify missing knowledge, you may issue a search request using "
    "<search> query </search> at any time. The retrieval system will provide you with the three "
    "most relevant documents enclosed in <documents> and </documents>. After each search, you need "
    "to summarize and refine the existing documents in <refine> and </refine>. You may send "
    "multiple search requests if needed. Once you have sufficient information, provide a concise "
    "final answer using <answer> and </answer>. <user> Question: {question} </user>")

TEMPLATES = {"code": CODE_TEMPLATE, "paper": PAPER_TEMPLATE}

# Search-R1's worked example (`protocol.demonstration`, for a small model: configs/smollm2.py) in
# AutoRefine's grammar: the passage in `<documents>`, then a `<refine>` block quoting the sentence
# that answers, then the answer.
REFINE_DEMO_TRAJECTORY = (
    DEMO_TRAJECTORY.split("<information>")[0] + "<documents>"
    + DEMO_TRAJECTORY.split("<information>")[1].split("</information>")[0].rstrip("\n")
    + "</documents>\n\n<refine> Messi was born in Rosario, in the province of Santa Fe, "
    "Argentina. </refine>\n<answer> Argentina </answer>")


def refine_blocks(text: str) -> list[str]:
  """Contents of every `<refine>` block, for the retrieval reward and the viewer."""
  return [m.strip() for m in re.findall(r"<refine>(.*?)</refine>", text, re.DOTALL)]


@registry.register("protocol")
@dataclasses.dataclass(frozen=True)
class AutoRefine(SearchR1):
  """AutoRefine's rollout: Search-R1's tags with <documents> and a <refine> block after each search."""
  name = "autorefine"
  max_turns: int = 5
  obs_max_tokens: int = 512
  template: str = "code"               # "code" | "paper" | a template with {question}
  refine: bool = True                  # False: Search-R1's protocol (the ablation)
  invalid_message: str = LONG_INVALID_MESSAGE

  def __post_init__(self):
    super().__post_init__()
    if self.template not in TEMPLATES and "{question}" not in self.template:
      raise ValueError(f"protocol.template={self.template!r}: use 'code', 'paper' or a "
                       f"template containing {{question}}")

  @property
  def demo_trajectory(self) -> str:
    return REFINE_DEMO_TRAJECTORY if self.refine else DEMO_TRAJECTORY

  def user_message(self, inp: PromptInput) -> str:
    if not self.refine:
      return SEARCH_R1_TEMPLATE.format(example=self.example_answer,
                                       question=search_r1_question(inp.question))
    template = TEMPLATES.get(self.template, self.template)
    return template.format(question=search_r1_question(inp.question))

  def parse(self, text: str, *, final: bool) -> Action:
    return parse_search_answer(text, final=final)

  def observation(self, query: str, hits: Sequence) -> list[Segment]:
    if not self.refine:
      return super().observation(query, hits)
    docs = self.format_documents(hits).strip()
    return [Segment("\n\n<documents>", Source.ENV), self.retrieved_segment(docs),
            Segment("</documents>\n\n", Source.ENV)]

  def annotate(self, row) -> dict:
    """`refine_texts`: the contents of every `<refine>` block the policy wrote (what the
    retrieval reward of Eq. 3 and the refine-success metric read); none when `refine=False`."""
    return {"refine_texts": refine_blocks(row.policy_text) if self.refine else []}
