"""2WikiMultihopQA raw files: the HotpotQA layout plus `evidences` (triples) and a question type.

Only the reader's data_source and kept metadata differ from HotpotQA; paragraphs become a
corpus the same way.
"""

from __future__ import annotations

from typing import Iterator, Optional

from ragjax.data.corpus_builder import CorpusBuilder
from ragjax.data.hotpotqa import read_multihop_official
from ragjax.data.schema import Example
from ragjax.retrieval.types import Passage


def read_twowiki(path: str, data_source: str = "2wikimultihopqa",
                 corpus: Optional[CorpusBuilder] = None) -> Iterator[Example]:
  return read_multihop_official(path, data_source, corpus, meta_keys=("type", "evidences"),
                                sentence_sep=" ")


def twowiki_corpus(path: str) -> list[Passage]:
  corpus = CorpusBuilder()
  for _ in read_twowiki(path, corpus=corpus):
    pass
  return corpus.passages()
