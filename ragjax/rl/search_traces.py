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
texts are fixed but for the question, the documents and the answer.

`answer_think` picks the answer turn's `<think>`: "names" (above: it names the answer it read)
or "fixed" ("The documents give the answer.", which came back as the answer to 6 of 400 test
questions; with "names" the cold-started policy commits to an answer in its `<think>`, and its
test EM was 0.122 against 0.152: docs/real_model.md).

With `second_search`, a question whose first passages miss the answer gets a second search
when its record names the passage that holds it (HotpotQA's `supporting_facts` titles with
their `context` paragraphs, as the FlashRAG files carry them): the bridge entity's title,

    <think> The documents do not give the answer. I need to search for {title}. </think>
    <search> {title} </search>
    <information> ... </information>

before the answer turn; kept, like the others, only when the passages then hold the answer and
the trace fits `cache_length`.  So the cold start shows when one search is not enough.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ragjax.metrics.answer import cover_word_match, exact_match
from ragjax.rl.rewards.builtin import answer_retrieved, gold_titles, passage_title
from ragjax.rl.teacher_traces import teacher_traces

SEARCH_THINK = "<think> I need to search for the answer. </think>\n"
ANSWER_THINKS = {"names": "<think> The documents say the answer is {answer}. </think>\n",
                 "fixed": "<think> The documents give the answer. </think>\n"}
ANSWER_THINK = ANSWER_THINKS["names"]
BRIDGE_THINK = ("<think> The documents do not give the answer. I need to search for {title}. "
                "</think>\n")


def search_script(record: Mapping, answer_think: str = "names", bridge: str = "") -> list[str]:
  """The turns of one question's trace: its question as the query, with `bridge` a second
  search for that title, then its first gold answer."""
  golds = record.get("golden_answers") or []
  if not golds or not str(golds[0]).strip():
    raise ValueError(f"question {record.get('id', record.get('question'))!r} has no gold answer "
                     "to script a trace with")
  if answer_think not in ANSWER_THINKS:
    raise ValueError(f"traces.answer_think {answer_think!r}: use one of {sorted(ANSWER_THINKS)}")
  query = " ".join(str(record["question"]).split())
  answer = str(golds[0]).strip()
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


def search_traces(engine, records: Sequence[Mapping], *, max_new_tokens: int, cache_length: int,
                  require_retrieved: bool = True, chunk: int = 50, seed: int = 0,
                  answer_think: str = "names", second_search: bool = False
                  ) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
  """(tokens, labels) of the kept traces, unpadded, and counts: {"questions", "too_long"
  (a turn longer than `max_new_tokens`, which an RL rollout could not write: not scripted),
  "retrieved" (traces whose passages contain a gold answer), "kept"}; with `second_search`
  also "second_search" (questions given a second search) and "two_searches" (of the kept
  traces, those that search twice)."""
  def length(text):
    return len(engine.tokenizer(text, add_special_tokens=False)["input_ids"])

  def fits(turns):
    return all(length(t) <= max_new_tokens for t in turns)

  def force(recs, scripts):
    """Each script forced: (tokens, labels, answer found in the passages, script completed)."""
    found, done = [], []

    def check(batch, offset):
      for row in batch.rows:
        rec = recs[offset + row.prompt_index]
        found.append(answer_retrieved(row.response_text, rec["golden_answers"]))
        done.append(row.answer is not None and exact_match(row.answer, rec["golden_answers"]) > 0)
        titles.append({passage_title(t) for docs in row.doc_texts for t in docs})

    titles: list[set] = []
    rows_t, rows_l = teacher_traces(engine, recs, scripts, max_new_tokens=max_new_tokens,
                                    cache_length=cache_length, chunk=chunk, seed=seed,
                                    on_batch=check)
    return rows_t, rows_l, found, done, titles

  scripts = [search_script(r, answer_think) for r in records]
  ok = [i for i, turns in enumerate(scripts) if fits(turns)]
  too_long = len(records) - len(ok)
  records, scripts = [records[i] for i in ok], [scripts[i] for i in ok]
  rows_t, rows_l, found, done, titles = force(records, scripts)
  searches = [1] * len(records)
  stats = {"questions": len(records) + too_long, "too_long": too_long}
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
  stats.update(retrieved=int(sum(found)), kept=len(keep))
  if second_search:
    stats["two_searches"] = sum(searches[i] == 2 for i in keep)
  return [rows_t[i] for i in keep], [rows_l[i] for i in keep], stats
