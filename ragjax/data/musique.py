"""MuSiQue raw files: `paragraphs: [{title, paragraph_text, is_supporting}]` and
`question_decomposition` (per-hop question, answer, supporting paragraph).

Files without paragraphs (the full dev Q/A) still carry gold titles in each hop's
`document_id` ('Title_0'); those become `supporting_titles`.  Golden answers are the answer
followed by `answer_aliases`.
"""

from __future__ import annotations

import re
from typing import Iterator, Optional

from ragjax.data.corpus import CorpusBuilder, Passage, passage_id
from ragjax.data.schema import DataError, Example, dedupe, make_example, require_str, require_str_list
from ragjax.data.sources import iter_json_records

_DOC_SUFFIX = re.compile(r"_\d+$")


def read_musique(path: str, data_source: str = "musique",
                 corpus: Optional[CorpusBuilder] = None) -> Iterator[Example]:
  for where, rec in iter_json_records(path):
    qid = require_str(rec, "id", where, coerce_number=True)
    question = require_str(rec, "question", where)
    answers = list(require_str_list(rec, "answer", where, coerce_number=True))
    if "answer_aliases" in rec:
      answers += require_str_list(rec, "answer_aliases", where, allow_empty=True, coerce_number=True)
    decomp = rec.get("question_decomposition") or []
    if not isinstance(decomp, list):
      raise DataError(where, "question_decomposition", "expected a list of hops")
    paragraphs = rec.get("paragraphs")
    titles, ids = [], []
    if paragraphs is not None:
      if not isinstance(paragraphs, list):
        raise DataError(where, "paragraphs", "expected a list")
      for i, p in enumerate(paragraphs):
        pw = f"{where} paragraphs[{i}]"
        title = require_str(p, "title", pw, allow_empty=True)
        text = require_str(p, "paragraph_text", pw)
        pid = corpus.add(title, text) if corpus is not None else passage_id(title, text)
        if p.get("is_supporting"):
          titles.append(title)
          ids.append(pid)
    else:
      for i, hop in enumerate(decomp):
        doc = hop.get("document_id") if isinstance(hop, dict) else None
        if isinstance(doc, str) and doc:
          titles.append(_DOC_SUFFIX.sub("", doc))
    meta = {"question_decomposition": decomp}
    if "answerable" in rec:
      meta["answerable"] = rec["answerable"]
    yield make_example(where, id=qid, question=question, golden_answers=answers,
                       data_source=data_source, supporting_ids=dedupe(ids),
                       supporting_titles=dedupe(titles), metadata=meta)


def musique_corpus(path: str) -> list[Passage]:
  corpus = CorpusBuilder()
  for _ in read_musique(path, corpus=corpus):
    pass
  return corpus.passages()
