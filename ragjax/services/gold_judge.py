"""A rule judge that answers R3-RAG's judge prompts from the gold passages: no model needed.

R3-RAG scores each search step with an LLM (Qwen2.5-14B-Instruct) and checks answers with
one.  Where no such model runs (the synthetic world on a CPU, tests), this `ChatModel` reads
the same prompts and replies in the judges' formats, from data instead of a model:

* `r3_relevance`: the share of the question's gold passages (`supporting_ids`) present in the
  step's `[Retrieved Documents]` block: "Relevance: 0.50".  A passage counts as present when
  its first `prefix_chars` characters appear there (the block is cut to 512 characters, so a
  passage may be present only in part).
* `r3_answer`: "Final answer: True" when the given answer equals a gold answer after SQuAD
  normalisation, else False.

It goes through the same rendering, request and parsing path as a real judge, so swapping it
for a served model changes nothing else.  Questions are looked up by their text (the prompt's
"The question: ..." line); the passages by id (`{id: contents}`).
"""

from __future__ import annotations

import re
from typing import Mapping, Optional, Sequence

from ragjax.metrics import exact_match

_PROBLEM = re.compile(r"\[Problem\]\nThe question: (.*?)\n\n\[Current Analysis\]", re.DOTALL)
_DOCS = re.compile(r"\[Retrieved Documents\]\n(.*?)\n\nEvaluation Criteria:", re.DOTALL)
_ANSWER = re.compile(r"Now, given the following input.*?Question: The question: (.*?)\n"
                     r"Given Answer: (.*?)\nStandard Answer List:\n(.*?)Model Output:", re.DOTALL)


class GoldJudge:
  """See the module docstring.  `records`: dataset records with `question` and
  `supporting_ids`; `passages`: passage id -> contents."""

  def __init__(self, records: Sequence[Mapping], passages: Mapping[str, str],
               prefix_chars: int = 60):
    self.gold = {}
    for r in records:
      ids = list(r.get("supporting_ids") or ())
      missing = [i for i in ids if i not in passages]
      if missing:
        raise ValueError(f"record {r.get('id')!r}: supporting passages {missing} are not in the "
                         f"corpus")
      self.gold[str(r["question"])] = [passages[i] for i in ids]
    self.prefix_chars = prefix_chars
    self.calls = 0

  def relevance(self, question: str, docs: str) -> tuple[float, str]:
    gold = self.gold.get(question)
    if not gold:
      return 0.0, "no gold passages known for this question"
    found = sum(g[:self.prefix_chars] in docs for g in gold)
    return found / len(gold), f"{found} of {len(gold)} gold passages retrieved"

  def reply(self, prompt: str) -> str:
    m = _PROBLEM.search(prompt)
    if m is not None:
      d = _DOCS.search(prompt)
      score, why = self.relevance(m.group(1), d.group(1) if d else "")
      return f"Relevance: {score:.2f}\nEvaluation:\n- Relevance: {why}"
    m = _ANSWER.search(prompt)
    if m is not None:
      golds = [g[2:].strip() for g in m.group(3).split("\n") if g.startswith("- ")]
      ok = bool(golds) and exact_match(m.group(2).strip(), golds) > 0
      return ("Correctness analysis: the given answer is compared with the standard answers "
              f"after normalisation.\nFinal answer: {ok}")
    raise ValueError(f"the gold judge answers R3-RAG's r3_relevance and r3_answer prompts only; "
                     f"got one starting {prompt[:80]!r}")

  def complete(self, messages_list, max_tokens: int = 256, temperature: float = 0.0,
               stop=None, top_p: float = 1.0, seed: Optional[int] = None) -> list[str]:
    self.calls += 1
    return [self.reply(msgs[-1]["content"]) for msgs in messages_list]
