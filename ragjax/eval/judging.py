"""LLM-judged accuracy (`acc`): R3-RAG's ACC, the judge reading question, answer and golds.

    judge = AnswerJudge(chat, "r3_answer")         # chat: any ragjax.services ChatModel
    verdicts = judge([(question, answer, golds), ...])   # True / False; None answer -> False

The prompt, sampling settings and reply parser are the template's (`ragjax.services.templates`,
seeds_rex_autorefine_r3.md §3.3).  A reply the parser cannot read scores False, as in the
paper's code after its retries, and is counted in `unparsed` so the table can say how many.
"""

from __future__ import annotations

from typing import Optional, Sequence

# Templates a judge can run here, with how a (question, answer, golds) triple fills them.
SUPPORTED = ("r3_answer",)


class AnswerJudge:
  def __init__(self, chat, template: str, name: str = ""):
    from ragjax.services.templates import get_template
    if template not in SUPPORTED:
      raise ValueError(f"judge template {template!r} is not wired for evaluation; "
                       f"supported: {list(SUPPORTED)}")
    self.chat, self.template, self.name = chat, get_template(template), name or template
    self.calls = self.unparsed = 0

  def _messages(self, question: str, answer: str, golds: Sequence[str]) -> list:
    from ragjax.services.templates import render_r3_answer
    # R3-RAG's judge reads the RL prompt ("The question: ..."), seeds §3.3.
    return render_r3_answer(f"The question: {question}", answer, list(golds))

  def __call__(self, items: Sequence[tuple[str, Optional[str], Sequence[str]]]) -> list[bool]:
    out: list[bool] = [False] * len(items)
    todo = [i for i, (_, a, _) in enumerate(items) if a is not None and a.strip()]
    if not todo:
      return out
    t = self.template
    replies = self.chat.complete([self._messages(*items[i]) for i in todo],
                                 max_tokens=t.max_tokens, temperature=t.temperature,
                                 top_p=t.top_p)
    for i, reply in zip(todo, replies):
      parsed = t.parse(reply)
      self.calls += 1
      self.unparsed += not parsed.ok
      out[i] = bool(parsed.value)
    return out
