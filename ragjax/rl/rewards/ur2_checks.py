"""UR²'s nine format-violation checks (seeds_ur2_rezero.md §A3.2), one reason string each.

    reasons = violations(policy_text, answer, gold, task="math", retrieval=True, searches=1)

The code runs them over the decoded solution, retrieved documents included; here they read the
policy's own text only (§A3.2 [D]: a passage holding CJK text or a chat token must not cost
the policy), with the documents the environment inserted counted from the record:
  1. not exactly one answer: "the correct answer is X" matches + `\\boxed{}` (brace-balanced,
     the extraction's [D] parser) != 1;
  2. tag bookkeeping: `<|begin_of_query|>`, `<|end_of_query|>`, `<|begin_of_documents|>`,
     `<|end_of_documents|>` counts differ (the documents tags are the ones the policy wrote plus
     one pair per served search), or more than 4 queries;
  3. each query longer than 20 whitespace-separated words;
  4. each illegal string present (the model family's chat markers);
  5. any CJK character (U+4E00..U+9FFF);
  6. answer length: multiple choice must be one word; math / QA at most 10 words or no longer
     than the gold answer;
  7. query or document tags inside the answer;
  8. a sample prompted without retrieval that queries anyway (the per-sample flag: the code's
     check reads the system prompt and never fires);
  9. a sample prompted with retrieval and no served search, while `missing_retrieval` is set
     (Stage 1 and the 3B multiple-choice run: the first 15 steps).
"""

from __future__ import annotations

import re

from ragjax.rollout.protocols.ur2 import (BEGIN_DOCS, BEGIN_QUERY, END_DOCS, END_QUERY,
                                          boxed_contents)

MAX_QUERIES = 4
MAX_QUERY_WORDS = 20
MAX_ANSWER_WORDS = 10
ILLEGAL = {
    "qwen": ("\nuser", "\nassistant", "\nAssistant", "<|im_start|>", "<tool_call>"),
    "llama": ("<|start_header_id|>user<|end_header_id|>",
              "<|start_header_id|>assistant<|end_header_id|>", "<|start_header_id|>",
              "<|end_header_id|>"),
}
_LETTER_ANSWER = re.compile(r"[Tt]he correct answer is:?\s*([A-Ja-j])", re.IGNORECASE)
_QUERY = re.compile(re.escape(BEGIN_QUERY) + r"\s*(.*?)\s*" + re.escape(END_QUERY), re.DOTALL)
_CJK = re.compile("[\u4e00-\u9fff]")


def illegal_strings(family) -> tuple[str, ...]:
  if isinstance(family, str):
    if family not in ILLEGAL:
      raise ValueError(f"unknown model family {family!r} for UR²'s illegal-string check; "
                       f"known: {sorted(ILLEGAL)} (or give the strings)")
    return ILLEGAL[family]
  return tuple(family)


def queries_in(text: str) -> list[str]:
  """Every `<|begin_of_query|> q <|end_of_query|>` in `text`, as the code's regex finds them."""
  return _QUERY.findall(text)


def violations(policy_text: str, answer: str, gold: str, *, task: str, retrieval: bool,
               searches: int, missing_retrieval: bool = False, family="qwen") -> list[str]:
  """The violated checks (see the module docstring), one reason string per violation."""
  out = []
  n_answers = len(_LETTER_ANSWER.findall(policy_text)) + len(boxed_contents(policy_text))
  if n_answers != 1:
    out.append(f"1: {n_answers} answers")
  bq, eq = policy_text.count(BEGIN_QUERY), policy_text.count(END_QUERY)
  bd, ed = policy_text.count(BEGIN_DOCS) + searches, policy_text.count(END_DOCS) + searches
  if not bq == eq == bd == ed or bq > MAX_QUERIES:
    out.append(f"2: tags begin_query {bq}, end_query {eq}, begin_documents {bd}, "
               f"end_documents {ed}")
  calls = queries_in(policy_text)
  out += [f"3: query of {len(q.split())} words" for q in calls if len(q.split()) > MAX_QUERY_WORDS]
  out += [f"4: illegal string {s!r}" for s in illegal_strings(family) if s in policy_text]
  if _CJK.search(policy_text):
    out.append("5: CJK characters")
  words = len(answer.split())
  if task == "mcq":
    if words != 1:
      out.append(f"6: multiple-choice answer of {words} words")
  elif words > MAX_ANSWER_WORDS and words > len(gold.split()):
    out.append(f"6: answer of {words} words")
  if BEGIN_QUERY in answer or BEGIN_DOCS in answer:
    out.append("7: tags in the answer")
  if not retrieval and calls:
    out.append("8: query in a sample prompted without retrieval")
  if retrieval and missing_retrieval and searches == 0:
    out.append("9: no search in a sample prompted with retrieval")
  return out
