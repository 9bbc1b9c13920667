"""HotpotQA raw files with their paragraphs: questions plus a corpus of their contexts.

Three layouts are read, detected per record:
- official (`hotpot_dev_distractor_v1.json`, list or jsonl): `_id`, `context: [[title, [sents]]]`,
  `supporting_facts: [[title, sent_idx]]`;
- Hugging Face `hotpot_qa`: `id`, `context: {title: [..], sentences: [[..]]}`,
  `supporting_facts: {title: [..], sent_id: [..]}`;
- IRCoT processed: `question_id`, `question_text`, `answers_objects`, `contexts: [{title,
  paragraph_text, is_supporting}]`.
2WikiMultihopQA uses the official layout too (see `twowiki.py`).  Paragraph extraction per
layout is `ragjax.retrieval.paragraphs` (shared with the corpus reader).  Supporting titles are
kept, and `supporting_ids` point at this reader's corpus passages (content-hash ids).
"""

from __future__ import annotations

from typing import Iterator, Optional

from ragjax.data.corpus_builder import CorpusBuilder, passage_id
from ragjax.data.schema import (DataError, Example, dedupe, make_example, require_str,
                                require_str_list)
from ragjax.data.sources import iter_json_records
from ragjax.retrieval.paragraphs import hotpot_context, ircot_contexts, supporting_fact_titles
from ragjax.retrieval.types import Passage


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
  ctx = ircot_contexts(rec.get("contexts"), where)
  support = [p.title for p in ctx if p.supporting]
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
      ctx = hotpot_context(rec.get("context"), where, sentence_sep)
      titles = supporting_fact_titles(rec.get("supporting_facts"), where)
    ids = []
    present = set()
    for para in ctx:
      title, text = para.title, para.text
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

