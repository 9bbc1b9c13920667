"""The rollout benchmark's environment: questions, a tokenizer, a corpus of ~N-token documents and
a real BM25 retriever over it, all built in the run (nothing downloads).

Corpus: the 31k-passage Wikipedia corpus of ../shared/data when present (`source="shared"`),
else the synthetic world's passages (`source="world"`, generated here).  The passages' text is
read as one stream and cut into documents of `doc_tokens` tokens of this tokenizer, at word
boundaries (how DPR-style 100-word corpora are made), each titled after the passage it starts
in; so every retrieved document is ~doc_tokens tokens whatever the source's passage lengths.
Questions: HotpotQA dev (shared) or the world's dev questions.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DATA = os.path.abspath(os.path.join(REPO, "..", "shared", "data"))
SHARED_CORPUS = os.path.join(SHARED_DATA, "corpus", "derived_multihop_wiki_passages_31144.jsonl")
SHARED_QUESTIONS = os.path.join(SHARED_DATA, "flashrag_format",
                                "derived_hotpotqa_dev_qa_7405.jsonl")


@dataclasses.dataclass
class Env:
  source: str
  tokenizer: object
  retriever: object
  questions: list          # dataset records ({"id", "question", "golden_answers", ...})
  num_documents: int
  doc_tokens: int


def shared_available() -> bool:
  return os.path.exists(SHARED_CORPUS) and os.path.exists(SHARED_QUESTIONS)


def _passages(source: str, num_questions: int):
  """([(title, text)], [question records]) of the source."""
  if source == "shared":
    if not shared_available():
      raise FileNotFoundError(f"--corpus shared needs {SHARED_CORPUS} and {SHARED_QUESTIONS}")
    from ragjax.data.readers import as_record, read_examples
    passages = []
    with open(SHARED_CORPUS) as f:
      for line in f:
        rec = json.loads(line)
        title, _, text = rec["contents"].partition("\n")
        passages.append((title.strip().strip('"'), text))
    questions = [as_record(e) for e in read_examples(SHARED_QUESTIONS)[:num_questions]]
    return passages, questions
  if source == "world":
    from ragjax.data.readers import as_record
    from ragjax.data.world import WorldConfig, generate_world
    world = generate_world(WorldConfig(seed=0, train_worlds=4, num_train=16,
                                       num_dev=max(num_questions, 16), num_test=16))
    passages = []
    for p in world.corpus():
      title, _, text = p["contents"].partition("\n")
      passages.append((title.strip().strip('"'), text))
    return passages, [as_record(e) for e in world.questions["dev"][:num_questions]]
  raise ValueError(f"unknown corpus source {source!r}; use 'shared' or 'world'")


def train_bench_tokenizer(texts, vocab_size: int):
  """Byte-level BPE with the protocol tags as single added tokens (ragjax.data.tokenizer)."""
  from ragjax.data.tokenizer import train_tokenizer
  from ragjax.rollout.protocols.search_r1 import SEARCH_R1_TEMPLATE
  return train_tokenizer(list(texts) + [SEARCH_R1_TEMPLATE] * 20, vocab_size=vocab_size)


def chunk_documents(passages, tokenizer, doc_tokens: int) -> list[tuple[str, str]]:
  """The passages' text as one stream cut into (title, text) documents of <= doc_tokens tokens,
  each cut at a word start (a token whose text begins with a space); the short tail is dropped."""
  texts = [" " + " ".join(text.split()) for _, text in passages]
  ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
  word_start = np.zeros(len(tokenizer), bool)
  for piece, idx in tokenizer.get_vocab().items():
    word_start[idx] = piece.startswith("\u0120")           # byte-level BPE's space marker
  stream = np.fromiter((t for seq in ids for t in seq), np.int64)
  owner = np.repeat(np.arange(len(ids)), [len(s) for s in ids])
  starts = np.flatnonzero(word_start[stream])
  docs, a = [], 0
  while a + doc_tokens <= len(stream):
    # the last word start at or before a + doc_tokens (the next document begins there)
    j = np.searchsorted(starts, a + doc_tokens, side="right") - 1
    b = int(starts[j]) if starts[j] > a else a + doc_tokens
    text = tokenizer.decode(stream[a:b].tolist()).strip()
    docs.append((passages[owner[a]][0], text))
    a = b
  return docs


def build_env(source: Optional[str], num_questions: int, doc_tokens: int, vocab_size: int,
              workdir: str, tokenizer_passages: int = 8000) -> Env:
  """Questions, tokenizer, the chunked corpus and its BM25 index (built under `workdir`)."""
  from ragjax.retrieval.index import build_index, open_index
  source = source or ("shared" if shared_available() else "world")
  passages, questions = _passages(source, num_questions)
  if len(questions) < num_questions:
    raise ValueError(f"{source} has {len(questions)} questions; {num_questions} asked for")
  tok = train_bench_tokenizer([t for _, t in passages[:tokenizer_passages]]
                              + [q["question"] for q in questions], vocab_size)
  docs = chunk_documents(passages, tok, doc_tokens)
  if len(docs) < 10:
    raise ValueError(f"the {source} corpus gives only {len(docs)} documents of {doc_tokens} "
                     f"tokens; lower --doc-tokens")
  os.makedirs(workdir, exist_ok=True)
  corpus = os.path.join(workdir, f"corpus_{source}_{doc_tokens}.jsonl")
  with open(corpus, "w") as f:
    for i, (title, text) in enumerate(docs):
      f.write(json.dumps({"id": str(i), "contents": f'"{title}"\n{text}'}) + "\n")
  index_dir = os.path.join(workdir, f"bm25_{source}_{doc_tokens}")
  build_index(corpus, index_dir, backend="bm25", progress=False)
  retriever = open_index(index_dir, cache_size=0)        # no cache: every run pays retrieval
  return Env(source, tok, retriever, questions, len(docs), doc_tokens)
