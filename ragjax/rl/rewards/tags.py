"""The Search-R1 format check over a response span (never the prompt, which holds examples).
Answers are parsed once, by the protocol (`RowMeta.answer`)."""

from __future__ import annotations

import re

_TAG = re.compile(r"</?(think|search|information|answer)>")


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
