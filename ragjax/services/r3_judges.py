"""R3-RAG's judges over any `ChatModel`, batched: answer correctness and step relevance (§3.3).

    ok, stats = answer_correct(chat, [("The question: Who?", "Dunst", ["Mirela Dunst"])])
    rel, stats = step_relevance(chat, [("The question: Who?", analysis, query, doc_texts)])

* Correctness is Acc = Acc_match OR Acc_model.  Acc_match (the code's, no SQuAD
  normalisation): the answer, its `.lower()`, `.upper()`, `.capitalize()`, or the answer with
  "." stripped, is literally one of the gold answers.  Only answers that fail the match go to
  the judge (`r3_answer`), all in one request batch; a reply that does not parse, or none at all
  after the client's retries, is False (what the code gives after its 3 retries).
* Relevance is the `r3_relevance` judge's score of a search step (the RL prompt, the step's
  analysis and query, its documents joined and cut to 512 characters), in [0, 1].  A reply
  without a score is 0 (the code raises there; the spec's default).  When the judge fails
  (`ChatServiceError` after the client's retries), the code's heuristic is used:
  0.3 (analysis > 15 words, else 0.15) + 0.4 (> 30 words, else 0.24) + 0.3 (documents).

Both return the values and counts for the logs (`requests`, `unparsed`, `failed`).  The
reward (`ragjax.rl.rewards.r3_rag`) and R3-RAG's evaluation ACC (`ragjax.eval.r3_rag`) call
these, so training and evaluation judge alike.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ragjax.services.chat_model import ChatServiceError
from ragjax.services.templates import (R3_MAX_DOC_CHARS, TEMPLATES, r3_doc_string,
                                       r3_relevance_heuristic, render_r3_answer,
                                       render_r3_relevance)


def acc_match(answer: Optional[str], golds: Sequence[str]) -> bool:
  """R3-RAG's string match (see the module docstring)."""
  if answer is None:
    return False
  gold = set(golds)
  forms = (answer, answer.lower(), answer.upper(), answer.capitalize(), answer.strip("."))
  return any(f in gold for f in forms)


def _ask(chat, convs: list, template: str) -> tuple[list, int]:
  """Replies (None where the service gave none) and how many failed."""
  if not convs:
    return [], 0
  t = TEMPLATES[template]
  try:
    replies = list(chat.complete(convs, max_tokens=t.max_tokens, temperature=t.temperature,
                                 top_p=t.top_p))
  except ChatServiceError as e:
    replies = list(e.partial) if e.partial is not None else [None] * len(convs)
  return replies, sum(r is None for r in replies)


def answer_correct(chat, items: Sequence[tuple], *, use_model: bool = True
                   ) -> tuple[list[bool], dict]:
  """Acc for each (question prompt, answer or None, golds); `use_model=False` is Acc_match
  only (the match-only ablation, or no judge)."""
  out = [acc_match(a, g) for _, a, g in items]
  todo = [i for i, (_, a, _) in enumerate(items) if not out[i] and a is not None and a.strip()]
  stats = {"requests": 0, "unparsed": 0, "failed": 0, "matched": sum(out)}
  if not use_model or chat is None or not todo:
    return out, stats
  replies, failed = _ask(chat, [render_r3_answer(items[i][0], items[i][1], list(items[i][2]))
                                for i in todo], "r3_answer")
  parse = TEMPLATES["r3_answer"].parse
  for i, reply in zip(todo, replies):
    if reply is None:
      continue
    parsed = parse(reply)
    stats["unparsed"] += not parsed.ok
    out[i] = bool(parsed.value)
  stats.update(requests=len(todo), failed=failed)
  return out, stats


def step_relevance(chat, items: Sequence[tuple], *, max_doc_chars: int = R3_MAX_DOC_CHARS
                   ) -> tuple[list[float], dict]:
  """Rel for each (problem, analysis, query, documents: a string or the passages' contents)."""
  stats = {"requests": len(items), "unparsed": 0, "failed": 0}
  if not items:
    return [], stats
  convs = [render_r3_relevance(p, a, q, d, max_doc_chars) for p, a, q, d in items]
  replies, failed = _ask(chat, convs, "r3_relevance")
  parse = TEMPLATES["r3_relevance"].parse
  out = []
  for (_, analysis, _, docs), reply in zip(items, replies):
    if reply is None:                      # the judge failed: the code's heuristic
      out.append(r3_relevance_heuristic(analysis, r3_doc_string(docs, max_doc_chars)))
      continue
    parsed = parse(reply)
    stats["unparsed"] += not parsed.ok
    out.append(float(parsed.value))
  stats["failed"] = failed
  return out, stats
