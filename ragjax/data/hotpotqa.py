"""HotpotQA raw files with their paragraphs: questions plus a corpus of their contexts.

Three layouts are read, detected per record:
- official (`hotpot_dev_distractor_v1.json`, list or jsonl): `_id`, `context: [[title, [sents]]]`,
  `supporting_facts: [[title, sent_idx]]`;
- Hugging Face `hotpot_qa`: `id`, `context: {title: [..], sentences: [[..]]}`,
  `supporting_facts: {title: [..], sent_id: [..]}`;
- IRCoT processed: `question_id`, `question_text`, `answers_objects`, `contexts: [{title,
  paragraph_text, is_supporting}]`.
2WikiMultihopQA uses the official layout too (see `twowiki.py`).  Supporting titles are kept,
and `supporting_ids` point at this reader's corpus passages (content-hash ids).
"""

from __future__ import annotations

import re
from typing import Iterator, Optional

from ragjax.data.corpus import CorpusBuilder, Passage, passage_id, join_sentences
from ragjax.data.schema import (DataError, Example, dedupe, make_example, require_str,
                                require_str_list)
from ragjax.data.sources import iter_json_records

_DOUBLE_SPACE = re.compile(r"(?<=\S)  (?=\S)")


def _official_context(rec: dict, where: str, sep: str) -> list[tuple[str, str]]:
  ctx = rec.get("context")
  if ctx is None:
    return []
  if not isinstance(ctx, list):
    raise DataError(where, "context", f"expected a list of [title, sentences], got {type(ctx).__name__}")
  out = []
  for i, item in enumerate(ctx):
    if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
            and isinstance(item[1], list) and all(isinstance(s, str) for s in item[1])):
      raise DataError(where, f"context[{i}]", "expected [title, [sentence, ...]]")
    out.append((item[0], join_sentences(item[1], sep)))
  return out


def _hf_context(rec: dict, where: str, sep: str) -> list[tuple[str, str]]:
  ctx = rec["context"]
  titles, sents = ctx.get("title"), ctx.get("sentences")
  if not isinstance(titles, list) or not isinstance(sents, list) or len(titles) != len(sents):
    raise DataError(where, "context", "expected {title: [..], sentences: [[..]]} of equal length")
  for i, (t, s) in enumerate(zip(titles, sents)):
    if not isinstance(t, str) or not isinstance(s, list) or not all(isinstance(x, str) for x in s):
      raise DataError(where, f"context.sentences[{i}]", "expected a title and a list of sentences")
  return [(t, join_sentences(s, sep)) for t, s in zip(titles, sents)]


def _supporting_titles(rec: dict, where: str) -> tuple[str, ...]:
  sf = rec.get("supporting_facts")
  if sf is None:
    return ()
  if isinstance(sf, dict):
    titles = sf.get("title")
    if not isinstance(titles, list):
      raise DataError(where, "supporting_facts.title", "expected a list of titles")
  elif isinstance(sf, list):
    titles = []
    for i, item in enumerate(sf):
      if not (isinstance(item, (list, tuple)) and item and isinstance(item[0], str)):
        raise DataError(where, f"supporting_facts[{i}]", "expected [title, sentence_index]")
      titles.append(item[0])
  else:
    raise DataError(where, "supporting_facts", f"unexpected type {type(sf).__name__}")
  return dedupe(titles)


def _ircot(rec: dict, where: str) -> tuple[str, str, tuple[str, ...], list, tuple[str, ...]]:
  qid = require_str(rec, "question_id", where, coerce_number=True)
  question = require_str(rec, "question_text", where)
  objs = rec.get("answers_objects")
  if not isinstance(objs, list) or not objs:
    raise DataError(where, "answers_objects", "missing or empty")
  answers = []
  for i, obj in enumerate(objs):
    answers.extend(require_str_list(obj, "spans", f"{where} answers_objects[{i}]", allow_empty=True))
  if not answers:
    raise DataError(where, "answers_objects", "no answer span")
  ctx, support = [], []
  for i, c in enumerate(rec.get("contexts") or []):
    title = require_str(c, "title", f"{where} contexts[{i}]", allow_empty=True)
    # IRCoT joined Hotpot's sentences (which keep their leading space) with another space.
    text = _DOUBLE_SPACE.sub(" ", require_str(c, "paragraph_text", f"{where} contexts[{i}]")).strip()
    ctx.append((title, text))
    if c.get("is_supporting"):
      support.append(title)
  return qid, question, tuple(answers), ctx, dedupe(support)


def read_multihop_official(path: str, data_source: str,
                           corpus: Optional[CorpusBuilder] = None,
                           meta_keys: tuple[str, ...] = ("type", "level"),
                           sentence_sep: str = "") -> Iterator[Example]:
  """Shared by HotpotQA and 2Wiki: question + context + supporting facts, layout per record."""
  for where, rec in iter_json_records(path):
    if "question_text" in rec:
      qid, question, answers, ctx, titles = _ircot(rec, where)
    else:
      qid = require_str(rec, "_id" if "_id" in rec else "id", where, coerce_number=True)
      question = require_str(rec, "question", where)
      answers = require_str_list(rec, "answer", where, coerce_number=True)
      ctx = (_hf_context(rec, where, sentence_sep) if isinstance(rec.get("context"), dict)
             else _official_context(rec, where, sentence_sep))
      titles = _supporting_titles(rec, where)
    ids = []
    present = set()
    for title, text in ctx:
      if not text:
        continue
      pid = corpus.add(title, text) if corpus is not None else passage_id(title, text)
      present.add(title)
      if title in titles:
        ids.append(pid)
    missing = [t for t in titles if ctx and t not in present]
    meta = {k: rec[k] for k in meta_keys if k in rec}
    if missing:
      meta["supporting_titles_missing"] = missing
    yield make_example(where, id=qid, question=question, golden_answers=answers,
                       data_source=data_source, supporting_ids=dedupe(ids),
                       supporting_titles=titles, metadata=meta)


def read_hotpotqa(path: str, data_source: str = "hotpotqa",
                  corpus: Optional[CorpusBuilder] = None) -> Iterator[Example]:
  return read_multihop_official(path, data_source, corpus)


def hotpotqa_corpus(path: str) -> list[Passage]:
  """Every context paragraph of the file, de-duplicated, as passages."""
  corpus = CorpusBuilder()
  for _ in read_hotpotqa(path, corpus=corpus):
    pass
  return corpus.passages()

