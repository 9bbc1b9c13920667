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

The grammar is the engine's protocol's (`trace_turns`): Search-R1's above for `search_r1` and
`rezero` (the same tags; ReZero's chat puts the passages in a user turn), and for `autorefine`
(with `refine`) AutoRefine's, whose answer turn opens with a `<refine>` block holding the
sentence of the `<documents>` the policy was shown that contains the gold answer (at most
`REFINE_WORDS` words around it; "not found" when no sentence does):

    <think> I need to search for the answer. </think>
    <search> {question} </search>
    <documents> ... </documents>
    <refine> {the sentence that holds the answer} </refine>
    <answer> {first gold answer} </answer>

That turn reads the passages, so it is written when the engine reaches it (a callable turn of
the `TeacherPolicy`), and its length is checked afterwards: a trace whose answer turn ran past
`max_new_tokens` (its answer cut) is counted `too_long` and dropped.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence, Union

import numpy as np

from ragjax.metrics import cover_exact_match, normalize_answer
from ragjax.rl.teacher_traces import teacher_traces

SEARCH_THINK = "<think> I need to search for the answer. </think>\n"
ANSWER_THINK = "<think> The documents say the answer is {answer}. </think>\n"
REFINE_WORDS = 24         # a refine block quotes at most this many words of its sentence
NOT_FOUND = "not found"   # the refine block when no sentence of the documents holds the answer
# The protocols whose cold start is scripted here, and the grammar of each
SCRIPTED = {"search_r1": "search", "rezero": "search", "autorefine": "refine"}
_BLOCKS = re.compile(r"<(information|documents)>(.*?)</\1>", re.DOTALL)
_DOC_HEAD = re.compile(r'^Doc \d+\(Title: (?:"[^"\n]*"|[^)\n]*)\)\s*')   # a "quoted (title)" too

Turn = Union[str, Callable[[str], str]]


def grammar(protocol) -> str:
  """"search" or "refine": the trace grammar of a protocol (an engine's), or an error naming it."""
  name = getattr(protocol, "name", protocol)
  if name not in SCRIPTED:
    raise ValueError(f"no scripted cold start for protocol {name!r} (one of {sorted(SCRIPTED)}; "
                     f"sft.steps=0: no cold start)")
  if SCRIPTED[name] == "refine" and not getattr(protocol, "refine", True):
    return "search"       # AutoRefine without refinement is Search-R1's protocol
  return SCRIPTED[name]


def query_and_answer(record: Mapping) -> tuple[str, str]:
  golds = record.get("golden_answers") or []
  if not golds or not str(golds[0]).strip():
    raise ValueError(f"question {record.get('id', record.get('question'))!r} has no gold answer "
                     "to script a trace with")
  return " ".join(str(record["question"]).split()), str(golds[0]).strip()


def search_script(record: Mapping) -> list[str]:
  """The two turns of one question's trace (its question as the query, its first gold answer)."""
  query, answer = query_and_answer(record)
  return [f"{SEARCH_THINK}<search> {query} </search>",
          f"{ANSWER_THINK.format(answer=answer)}<answer> {answer} </answer>"]


def retrieved_blocks(text: str) -> list[str]:
  """The text of each `<information>` / `<documents>` block of a rollout, in order."""
  return [m.group(2) for m in _BLOCKS.finditer(text)]


def answer_sentence(documents: str, answer: str, max_words: int = REFINE_WORDS) -> str:
  """The first sentence of `documents` (Search-R1's `Doc i(Title: ...) text` lines) that holds
  `answer` as whole normalised words, cut to the `max_words` words around its first mention;
  NOT_FOUND when none does."""
  want = normalize_answer(answer)
  for line in documents.splitlines():
    for sentence in re.split(r"(?<=[.!?])\s+", _DOC_HEAD.sub("", line.strip())):
      words = sentence.split()
      if not want or f" {want} " not in f" {normalize_answer(sentence)} ":
        continue
      if len(words) <= max_words:
        return " ".join(words)
      first = next(i for i in range(len(words))
                   if f" {want} " in f" {normalize_answer(' '.join(words[:i + 1]))} ")
      start = max(0, min(first - max_words // 2, len(words) - max_words))
      return " ".join(words[start:start + max_words])
  return NOT_FOUND


def refine_script(record: Mapping) -> list[Turn]:
  """AutoRefine's two turns: the search, then (written once the documents are in) a `<refine>`
  block with the sentence that holds the gold answer, and the answer."""
  query, answer = query_and_answer(record)

  def read(text: str) -> str:
    blocks = retrieved_blocks(text)
    found = answer_sentence(blocks[-1], answer) if blocks else NOT_FOUND
    return f"<refine> {found} </refine>\n<answer> {answer} </answer>"
  return [f"{SEARCH_THINK}<search> {query} </search>", read]


def trace_turns(record: Mapping, protocol) -> list[Turn]:
  """One question's scripted turns in the grammar of `protocol` (`grammar`)."""
  return refine_script(record) if grammar(protocol) == "refine" else search_script(record)


def search_traces(engine, records: Sequence[Mapping], *, max_new_tokens: int, cache_length: int,
                  require_retrieved: bool = True, chunk: int = 50, seed: int = 0
                  ) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
  """(tokens, labels) of the kept traces, in the grammar of `engine.protocol` (`trace_turns`),
  unpadded, and counts: {"questions", "too_long" (a turn longer than `max_new_tokens`, which
  an RL rollout could not write: not scripted, or for a refine turn, dropped),
  "retrieved" (traces whose passages contain a gold answer), "kept"}."""
  questions = len(records)
  scripts = [trace_turns(r, engine.protocol) for r in records]
  def length(text):
    return len(engine.tokenizer(text, add_special_tokens=False)["input_ids"])

  fits = [i for i, turns in enumerate(scripts)
          if all(callable(t) or length(t) <= max_new_tokens for t in turns)]
  too_long = len(records) - len(fits)
  records, scripts = [records[i] for i in fits], [scripts[i] for i in fits]
  found: list[bool] = []
  answered: list[bool] = []

  def check(batch, offset):
    for row in batch.rows:
      rec = records[offset + row.prompt_index]
      found.append(any(cover_exact_match(b, rec["golden_answers"])
                       for b in retrieved_blocks(row.response_text)))
      # a turn written when reached is checked here: its answer was written whole
      written = not callable(scripts[offset + row.prompt_index][-1])
      answered.append(written or row.answer == query_and_answer(rec)[1])

  rows_t, rows_l = teacher_traces(engine, records, scripts,
                                  max_new_tokens=max_new_tokens, cache_length=cache_length,
                                  chunk=chunk, seed=seed, on_batch=check)
  keep = [i for i in range(len(rows_t)) if answered[i] and (found[i] or not require_retrieved)]
  too_long += len(answered) - sum(answered)
  stats = {"questions": questions, "too_long": too_long, "retrieved": int(sum(found)),
           "kept": len(keep)}
  return [rows_t[i] for i in keep], [rows_l[i] for i in keep], stats
