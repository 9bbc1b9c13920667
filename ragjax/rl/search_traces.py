"""Search-R1 traces of real questions for a cold start: search the question, answer with gold.

    rows_t, rows_l, stats = search_traces(engine, records, max_new_tokens=64, cache_length=1280)

Each training question becomes one scripted trajectory in Search-R1's grammar:

    <think> I need to search for the answer. </think>
    <search> {question} </search>
    <information> ... the passages the engine's retriever returns ... </information>
    <think> The documents say the answer is {first gold answer}. </think>
    <answer> {first gold answer} </answer>

forced through the real rollout engine (`teacher_traces`), so the prompt, the retrieved
passages, their formatting and the labels are exactly those of an RL rollout (and the
`<information>` block is masked out of the loss as it is there).  With `require_retrieved`
(the default) only traces whose passages contain a gold answer (Search-R1's
`is_retrieval_correct`, cover EM of the `<information>` block) are kept: the trace then
demonstrates reading the answer from the documents rather than recalling it.  The query is
the question itself (what a model that has not learnt query writing can always do); the turn
texts are fixed but for the question, the documents and the answer.  The answer turn's
`<think>` names the answer it read: a fixed sentence there ("The documents give the answer.")
came back as the answer to 6 of 400 test questions.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np

from ragjax.data.world_tasks import ur2_search
from ragjax.rl.rewards.builtin import answer_retrieved
from ragjax.rl.teacher_traces import teacher_traces

SEARCH_THINK = "<think> I need to search for the answer. </think>\n"
ANSWER_THINK = "<think> The documents say the answer is {answer}. </think>\n"
ANSWER_THINK_UR2 = "The documents say the answer is {answer}."


def search_script(record: Mapping) -> list[str]:
  """The two turns of one question's trace (its question as the query, its first gold answer)."""
  golds = record.get("golden_answers") or []
  if not golds or not str(golds[0]).strip():
    raise ValueError(f"question {record.get('id', record.get('question'))!r} has no gold answer "
                     "to script a trace with")
  query = " ".join(str(record["question"]).split())
  answer = str(golds[0]).strip()
  return [f"{SEARCH_THINK}<search> {query} </search>",
          f"{ANSWER_THINK.format(answer=answer)}<answer> {answer} </answer>"]


def ur2_script(record: Mapping) -> list[str]:
  """The turns of one real question's trace in UR²'s grammar (`configs/ur2.py:smollm2`'s cold
  start): prompted with retrieval (`record["retrieval"]`), the question as the query, then the
  answer read from the documents; without, the answer alone; a math answer after the worked
  solution a GSM8K record carries (`metadata.solution`, its calculator marks and `####` line
  dropped), boxed as UR²'s answers are."""
  golds = record.get("golden_answers") or []
  if not golds or not str(golds[0]).strip():
    raise ValueError(f"question {record.get('id', record.get('question'))!r} has no gold answer "
                     "to script a trace with")
  answer = str(golds[0]).strip()
  if record.get("task", "qa") == "math":
    solution = str((record.get("metadata") or {}).get("solution", "")).split("####")[0]
    solution = " ".join(re.sub(r"<<[^>]*>>", "", solution).split())
    final = f"{solution} \\boxed{{{answer}}}".strip()
  else:
    final = f"{ANSWER_THINK_UR2.format(answer=answer)} \\boxed{{{answer}}}"
  if not record.get("retrieval", True):
    return [final]
  return [ur2_search(" ".join(str(record["question"]).split())), final]


def search_traces(engine, records: Sequence[Mapping], *, max_new_tokens: int, cache_length: int,
                  require_retrieved: bool = True, chunk: int = 50, seed: int = 0
                  ) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
  """(tokens, labels) of the kept traces, unpadded, and counts: {"questions", "too_long"
  (a turn longer than `max_new_tokens`, which an RL rollout could not write: not scripted),
  "retrieved" (traces whose passages contain a gold answer), "kept"}."""
  scripts = [search_script(r) for r in records]
  def length(text):
    return len(engine.tokenizer(text, add_special_tokens=False)["input_ids"])

  fits = [i for i, turns in enumerate(scripts) if all(length(t) <= max_new_tokens for t in turns)]
  too_long = len(records) - len(fits)
  records, scripts = [records[i] for i in fits], [scripts[i] for i in fits]
  found: list[bool] = []

  def check(batch, offset):
    for row in batch.rows:
      rec = records[offset + row.prompt_index]
      found.append(answer_retrieved(row.response_text, rec["golden_answers"]))

  rows_t, rows_l = teacher_traces(engine, records, scripts,
                                  max_new_tokens=max_new_tokens, cache_length=cache_length,
                                  chunk=chunk, seed=seed, on_batch=check)
  keep = [i for i in range(len(rows_t)) if found[i] or not require_retrieved]
  stats = {"questions": len(records) + too_long, "too_long": too_long,
           "retrieved": int(sum(found)), "kept": len(keep)}
  return [rows_t[i] for i in keep], [rows_l[i] for i in keep], stats
