"""Parsing the Search-R1 tag grammar out of a response span (never the prompt, which holds examples)."""

from __future__ import annotations

import re
from typing import Optional

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_TAG = re.compile(r"</?(think|search|information|answer)>")


def extract_answers(response: str) -> list[str]:
  return [m.strip() for m in _ANSWER.findall(response)]


def last_answer(response: str, max_answer_tags: Optional[int] = None) -> Optional[str]:
  """The last <answer> content; None when there is none or when answer tags repeat too often.

  Capping repeated tags stops a policy from spraying many guesses and being scored on the last.
  """
  answers = extract_answers(response)
  if not answers:
    return None
  if max_answer_tags is not None and len(answers) > max_answer_tags:
    return None
  return answers[-1]


def is_valid_search_r1_format(response: str) -> bool:
  """Search-R1 state machine: (think (search information)? )* ... answer, tags balanced, ends in answer.

  Blocks in order: <think>…</think>, optional <search>…</search> followed by an
  <information>…</information> block, repeated; the response must end with exactly one
  <answer>…</answer> and contain no stray text between blocks other than whitespace.
  """
  pos, state = 0, "start"
  text = response.strip()
  allowed = {"start": {"think", "search", "answer"},
             "think": {"search", "answer", "think"},
             "search": {"information"},
             "information": {"think", "search", "answer"}}
  while pos < len(text):
    m = _TAG.search(text, pos)
    if m is None or text[pos:m.start()].strip():
      return False
    tag = m.group(1)
    if m.group(0).startswith("</") or tag not in allowed.get(state, ()):
      return False
    close = text.find(f"</{tag}>", m.end())
    if close < 0 or _TAG.search(text[m.end():close]):
      return False
    pos, state = close + len(f"</{tag}>"), tag
    if tag == "answer":
      return not text[pos:].strip()
  return False
