"""MuSiQue raw files: `paragraphs: [{title, paragraph_text, is_supporting}]` and
`question_decomposition` (per-hop question, answer, supporting paragraph); both are read by
`ragjax.retrieval.paragraphs` (shared with the corpus reader).

Files without paragraphs (the full dev Q/A) still carry gold titles in each hop's
`document_id` ('Title_0'); those become `supporting_titles`.  Golden answers are the answer
followed by `answer_aliases`.
"""

from __future__ import annotations

from typing import Iterator, Optional

from ragjax.data.corpus_builder import CorpusBuilder, passage_id
from ragjax.data.schema import Example, dedupe, make_example, require_str, require_str_list
from ragjax.data.sources import iter_json_records
from ragjax.retrieval.paragraphs import decomposition_titles, musique_paragraphs
from ragjax.retrieval.types import Passage


def read_musique(path: str, data_source: str = "musique",
                 corpus: Optional[CorpusBuilder] = None) -> Iterator[Example]:
  for where, rec in iter_json_records(path):
    qid = require_str(rec, "id", where, coerce_number=True)
    question = require_str(rec, "question", where)
    answers = list(require_str_list(rec, "answer", where, coerce_number=True))
    if "answer_aliases" in rec:
      answers += require_str_list(rec, "answer_aliases", where, allow_empty=True, coerce_number=True)
    decomp = rec.get("question_decomposition") or []
    hop_titles = decomposition_titles(decomp, where)
    paragraphs = rec.get("paragraphs")
    titles, ids = [], []
    if paragraphs is not None:
      for p in musique_paragraphs(paragraphs, where):
        if not p.text.strip():
          continue
        pid = corpus.add(p.title, p.text) if corpus is not None else passage_id(p.title, p.text)
        if p.supporting:
          titles.append(p.title)
          ids.append(pid)
    else:
      titles = list(hop_titles)
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
