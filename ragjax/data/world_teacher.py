"""A scripted R3-RAG teacher for the synthetic world: DeepSeek-V3's role in the cold start.

R3-RAG's cold-start data comes from a large model prompted step by step (Figures 6 and 7 of
the paper, `r3_teacher_first` / `r3_teacher_next`).  On the synthetic world no such model
exists, so this `ChatModel` answers those prompts from the question's hop chain: step k of
its plan is `The problem analysis: ...` with `The retrieval query: <hop k's query>`, and the
last step gives the gold answer.  It is imperfect the way a sampled teacher is, so rejection
sampling and best-of-N have work to do:

* a retry question's plan starts with its misleading first query (as `world_traces` does);
* a sample may start with a wasted query (the question itself), answer wrongly (the first
  hop's answer, or "unknown"), or write a step without its query or answer line (the
  cold-start loop regenerates such steps), each with its rate; a greedy sample errs too, as a
  large model's greedy answer sometimes does.

Every reply is a deterministic function of (question, number of earlier steps, temperature,
seed), so a cold-start run is reproducible and resumable.  Questions come from the world's
records (`Example.to_record()` dicts); a prompt about an unknown question is an error.
"""

from __future__ import annotations

import random
import re
from typing import Mapping, Optional, Sequence

_QUESTION = re.compile(r"#### Current Input:\nThe question: (.*?)(?:\. The Previous Steps:|\n#### Output:)",
                       re.DOTALL)
_STEP = re.compile(r"(?:^|\n)Step \d+:\n")


def teacher_prompt(prompt: str) -> tuple[str, int]:
  """(question, number of earlier steps) of an R3-RAG teacher prompt (Figure 6 or 7); ("", 0)
  when the prompt is not one."""
  m = _QUESTION.search(prompt)
  if m is None:
    return "", 0
  return m.group(1), len(_STEP.findall(prompt[m.end():]))


class WorldTeacher:
  """See the module docstring."""

  def __init__(self, records: Sequence[Mapping], *, wasted_query_rate: float = 0.3,
               wrong_answer_rate: float = 0.25, malformed_rate: float = 0.1):
    self.by_question = {str(r["question"]): r for r in records}
    self.wasted, self.wrong, self.malformed = wasted_query_rate, wrong_answer_rate, malformed_rate
    self.calls = 0

  def plan(self, record: Mapping, temperature: float, seed: Optional[int]) -> tuple[list, str]:
    """(queries, final answer) of one sampled trajectory."""
    meta = record.get("metadata") or {}
    hops = meta.get("hops") or []
    if not hops:
      raise ValueError(f"world question {record.get('id')!r} has no hop chain in metadata")
    queries = [h["query"] for h in hops]
    if meta.get("qtype") == "retry" and meta.get("first_query"):
      queries = [meta["first_query"]] + queries
    answer = record["golden_answers"][0]
    rng = random.Random(f"world-teacher|{record['question']}|{temperature}|{seed}")
    if rng.random() < self.wasted:
      queries = [record["question"].rstrip("?")] + queries
    if rng.random() < self.wrong:
      answer = hops[0]["answer"] if len(hops) > 1 else "unknown"
    return queries, answer

  def reply(self, prompt: str, temperature: float, seed: Optional[int]) -> str:
    question, done = teacher_prompt(prompt)
    if question not in self.by_question:
      raise ValueError("the world teacher answers R3-RAG teacher prompts about world questions "
                       f"only; got a prompt starting {prompt[:80]!r}")
    record = self.by_question[question]
    queries, answer = self.plan(record, temperature, seed)
    rng = random.Random(f"world-teacher-step|{record['question']}|{done}|{temperature}|{seed}")
    malformed = rng.random() < self.malformed
    if done < len(queries):
      analysis = f"I need to know {queries[done]}."
      return f"The problem analysis: {analysis}" + (
          "" if malformed else f"\nThe retrieval query: {queries[done]}")
    hops = (record.get("metadata") or {}).get("hops") or []
    analysis = "The documents say " + ", ".join(h["answer"] for h in hops) + "."
    return f"The problem analysis: {analysis}" + ("" if malformed else
                                                  f"\nThe final answer: {answer}")

  def complete(self, messages_list, max_tokens: int = 256, temperature: float = 0.0,
               stop=None, top_p: float = 1.0, seed: Optional[int] = None) -> list[str]:
    self.calls += 1
    return [self.reply(msgs[-1]["content"], float(temperature), seed) for msgs in messages_list]
