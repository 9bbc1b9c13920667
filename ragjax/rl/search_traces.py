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

`answer_think` picks the Search-R1 answer turn's `<think>`: "names" (above: it names the
answer it read) or "fixed" ("The documents give the answer.", the afternoon's; with "names"
the cold-started policy commits to an answer in its `<think>`, and its test EM was 0.122
against 0.152: docs/real_model.md).

With `second_search` (Search-R1's grammar), a question whose first passages miss the answer
gets a second search when its record names the passage that holds it (HotpotQA's
`supporting_facts` titles with their `context` paragraphs, as the FlashRAG files carry them):
the bridge entity's title,

    <think> The documents do not give the answer. I need to search for {title}. </think>
    <search> {title} </search>
    <information> ... </information>

before the answer turn; kept, like every trace, only when the passages then hold the answer
and the answer was written whole (within `cache_length`).  So the cold start shows when one
search is not enough.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence, Union

import numpy as np

from ragjax.data.world_tasks import ur2_search
from ragjax.metrics import cover_exact_match, normalize_answer
from ragjax.metrics.answer import cover_word_match, exact_match
from ragjax.rl.rewards.builtin import gold_titles, passage_title
from ragjax.rl.teacher_traces import teacher_traces

SEARCH_THINK = "<think> I need to search for the answer. </think>\n"
ANSWER_THINKS = {"names": "<think> The documents say the answer is {answer}. </think>\n",
                 "fixed": "<think> The documents give the answer. </think>\n"}
ANSWER_THINK = ANSWER_THINKS["names"]
ANSWER_THINK_UR2 = "The documents say the answer is {answer}."
BRIDGE_THINK = ("<think> The documents do not give the answer. I need to search for {title}. "
                "</think>\n")
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


def search_script(record: Mapping, answer_think: str = "names", bridge: str = "") -> list[str]:
  """The turns of one question's Search-R1 trace: its question as the query, with `bridge` a
  second search for that title, then its first gold answer."""
  query, answer = query_and_answer(record)
  if answer_think not in ANSWER_THINKS:
    raise ValueError(f"traces.answer_think {answer_think!r}: use one of {sorted(ANSWER_THINKS)}")
  turns = [f"{SEARCH_THINK}<search> {query} </search>"]
  if bridge:
    turns.append(f"{BRIDGE_THINK.format(title=bridge)}<search> {bridge} </search>")
  return turns + [f"{ANSWER_THINKS[answer_think].format(answer=answer)}<answer> {answer} </answer>"]


def bridge_title(record: Mapping, retrieved_titles) -> str:
  """The title of the record's supporting passage that holds a gold answer (whole words) and
  that the first search did not return; "" when the record names none (no `supporting_facts`
  with `context`) or the answer's passage was already retrieved."""
  titles = gold_titles(record)
  context = (record.get("metadata") or {}).get("context") or []
  for entry in context:
    if not (isinstance(entry, (list, tuple)) and len(entry) == 2):
      continue
    title, sentences = str(entry[0]), entry[1]
    text = " ".join(map(str, sentences)) if isinstance(sentences, (list, tuple)) else str(sentences)
    if title in titles and title not in retrieved_titles and cover_word_match(
        text, record["golden_answers"]):
      return " ".join(title.split())
  return ""


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


def trace_turns(record: Mapping, protocol, answer_think: str = "names") -> list[Turn]:
  """One question's scripted turns in the grammar of `protocol` (`grammar`)."""
  if grammar(protocol) == "refine":
    return refine_script(record)
  return search_script(record, answer_think)


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
                  require_retrieved: bool = True, chunk: int = 50, seed: int = 0,
                  answer_think: str = "names", second_search: bool = False
                  ) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
  """(tokens, labels) of the kept traces, in the grammar of `engine.protocol` (`trace_turns`),
  unpadded, and counts: {"questions", "too_long" (a turn longer than `max_new_tokens`, which
  an RL rollout could not write: not scripted; or a trace whose answer was not written whole:
  a refine turn past `max_new_tokens`, a trace past `cache_length`), "retrieved" (traces whose
  passages contain a gold answer), "kept"}; with `second_search` also "second_search"
  (questions given a second search) and "two_searches" (of the kept traces, those that search
  twice)."""
  if second_search and grammar(engine.protocol) != "search":
    raise ValueError("traces.second_search is scripted in Search-R1's grammar only")
  questions = len(records)

  def length(text):
    return len(engine.tokenizer(text, add_special_tokens=False)["input_ids"])

  def fits(turns):
    return all(callable(t) or length(t) <= max_new_tokens for t in turns)

  def force(recs, scripts):
    """Each script forced: (tokens, labels, a gold answer in the passages, the answer written
    whole, the titles the searches returned)."""
    found, done, titles = [], [], []

    def check(batch, offset):
      for row in batch.rows:
        rec = recs[offset + row.prompt_index]
        found.append(any(cover_exact_match(b, rec["golden_answers"])
                         for b in retrieved_blocks(row.response_text)))
        done.append(row.answer is not None
                    and exact_match(row.answer, query_and_answer(rec)[1]) > 0)
        titles.append({passage_title(t) for docs in row.doc_texts for t in docs})

    rows_t, rows_l = teacher_traces(engine, recs, scripts, max_new_tokens=max_new_tokens,
                                    cache_length=cache_length, chunk=chunk, seed=seed,
                                    on_batch=check)
    return rows_t, rows_l, found, done, titles

  scripts = [trace_turns(r, engine.protocol, answer_think) for r in records]
  ok = [i for i, turns in enumerate(scripts) if fits(turns)]
  too_long = len(records) - len(ok)
  records, scripts = [records[i] for i in ok], [scripts[i] for i in ok]
  rows_t, rows_l, found, done, titles = force(records, scripts)
  searches = [1] * len(records)
  stats = {"questions": questions}
  if second_search:
    bridged = []
    for i, rec in enumerate(records):
      title = "" if found[i] else bridge_title(rec, titles[i])
      if title and fits(search_script(rec, answer_think, title)):
        bridged.append((i, search_script(rec, answer_think, title)))
    if bridged:
      t2, l2, f2, d2, _ = force([records[i] for i, _ in bridged], [sc for _, sc in bridged])
      for (i, _), t, lab, f, d in zip(bridged, t2, l2, f2, d2):
        rows_t[i], rows_l[i], found[i], done[i], searches[i] = t, lab, f, d, 2
    stats["second_search"] = len(bridged)
  keep = [i for i in range(len(rows_t)) if done[i] and (found[i] or not require_retrieved)]
  stats.update(too_long=too_long + len(done) - sum(done), retrieved=int(sum(found)),
               kept=len(keep))
  if second_search:
    stats["two_searches"] = sum(searches[i] == 2 for i in keep)
  return [rows_t[i] for i in keep], [rows_l[i] for i in keep], stats
