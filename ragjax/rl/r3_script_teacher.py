"""A scripted R3-RAG teacher for real questions: the cold start of `configs/r3_rag.py:smollm2`.

R3-RAG's cold-start trajectories come from a large model prompted step by step (Figures 6 and
7, `r3_teacher_first` / `r3_teacher_next`).  Without one, this `ChatModel` scripts the same
trajectories the qa recipe's cold start scripts in Search-R1's grammar
(`ragjax.rl.search_traces`), in R3-RAG's step format:

    The problem analysis: I need to search for the question.
    The retrieval query: {question}
    ... the passages `generate_cold_start` retrieves for it (Figure 7 shows them back) ...
    The problem analysis: The documents say the answer is {answer}.
    The final answer: {answer}

the first gold answer.  With `require_retrieved` the second step answers only when a gold
answer occurs (cover EM, Search-R1's `is_retrieval_correct`) in the documents the prompt shows
(not in the question or a query: "Which is older, A or B?" names its answer);
otherwise it writes no answer line, so the attempt fails on format and rejection sampling drops
the question: kept traces demonstrate reading the answer from the passages.  Every reply is a
function of the prompt, so best-of-N's attempts agree and a resumed run writes the same data.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional, Sequence

from ragjax.data.world_teacher import teacher_prompt
from ragjax.metrics import cover_exact_match

# the documents of each earlier step as Figure 7 shows them (not the question or the queries)
DOCUMENTS = re.compile(r"\nThe retrieval documents: (.*?)(?=\n\nStep \d+:\n|\n#### Output:|$)",
                       re.DOTALL)
SEARCH_ANALYSIS = "I need to search for the question."
ANSWER_ANALYSIS = "The documents say the answer is {answer}."
NOT_FOUND = "The documents do not say."


class ScriptTeacher:
  """See the module docstring: answers R3-RAG teacher prompts about `records`' questions."""

  def __init__(self, records: Sequence[Mapping], *, require_retrieved: bool = True):
    self.by_question = {str(r["question"]): r for r in records}
    self.require_retrieved = require_retrieved
    self.calls = 0

  def reply(self, prompt: str) -> str:
    question, done = teacher_prompt(prompt)
    record = self.by_question.get(question)
    if record is None:
      raise ValueError("the script teacher answers R3-RAG teacher prompts about the run's "
                       f"questions only; got a prompt starting {prompt[:80]!r}")
    if done == 0:
      return f"The problem analysis: {SEARCH_ANALYSIS}\nThe retrieval query: {question}"
    golds = list(record.get("golden_answers") or [])
    shown = " ".join(DOCUMENTS.findall(prompt))
    if not golds or (self.require_retrieved and not cover_exact_match(shown, golds)):
      return f"The problem analysis: {NOT_FOUND}"
    answer = golds[0]
    return (f"The problem analysis: {ANSWER_ANALYSIS.format(answer=answer)}\n"
            f"The final answer: {answer}")

  def complete(self, messages_list, max_tokens: int = 256, temperature: float = 0.0,
               stop=None, top_p: float = 1.0, seed: Optional[int] = None) -> list[str]:
    self.calls += 1
    return [self.reply(msgs[-1]["content"]) for msgs in messages_list]
