"""Noisy retrieval: the noise ReZero claims to inject, as a wrapper any recipe can turn on.

ReZero (Dao & Le 2025) says it "introduce[s] noise during training at the vector database
level", without a mechanism or a probability; its experiment-era code has none, and later code
adds LLM paraphrases of every paragraph to the index.  The spec's decision (seeds_ur2_rezero.md
§B4 [D]) is a configurable wrapper with three kinds, all here:

  paraphrase   distractors in the index: each passage gets `paraphrases` rewrites (with
               probability p per passage) that compete with it for the query; the gold chunk
               is then often displaced by a paraphrase that is not the chunk itself.  Built into
               the corpus before indexing (`paraphrase_corpus`), so it needs a local corpus.
  replace      with probability p per query, the top-k are replaced by k random corpus passages.
  shuffle      with probability p per query, the top-k are k passages drawn at random from the
               top-`depth`, in random order (relevance perturbed, not destroyed).
  drop_gold    each gold passage of the question (its record's `supporting_ids`) is dropped from
               the results with probability p; the next-ranked passages fill in.

Every draw is a deterministic function of (seed, query[, passage id]): a resumed run sees the
same noise, the G samples of a group that issue the same query see the same results, and a
retry with a *different* query gets a fresh draw, which is what ReZero's retry reward is meant
to teach.  `drop_gold` needs the question each query was issued for: the rollout engine passes
the row's prompt record as `records` to `search_with_context` of a retriever that sets
`needs_records`.

The paraphrases are rule-based (the code used Llama-3.1-8B-Instruct; no model is downloaded
here): three styles after the code's three (a brief one or two sentences, the sentences in
another order, an expanded version), each keeping the passage's sentences' words.  A callable
`paraphrase(passage, n, rng) -> [texts]` can replace them (e.g. one calling a `ChatModel`).

    python -m ragjax.retrieval.noisy --corpus corpus.jsonl --out noisy.jsonl --paraphrases 3
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
from typing import Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from ragjax.retrieval.corpus_reader import Passage, read_passages
from ragjax.retrieval.types import Hit, check_search_args

KINDS = ("", "paraphrase", "replace", "shuffle", "drop_gold")
PARA_SEP = "~para"           # paraphrase ids: "<passage id>~para<j>"


@dataclasses.dataclass(frozen=True)
class NoiseConfig:
  """`retriever.noise` in a config."""
  kind: str = ""
  p: float = 0.0
  seed: int = 0
  paraphrases: int = 3         # paraphrase: rewrites per passage
  depth: int = 10              # shuffle: draw from this many top results

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"retriever.noise.kind={self.kind!r}; known: {list(KINDS)}")
    if not 0.0 <= self.p <= 1.0:
      raise ValueError(f"retriever.noise.p must be in [0, 1], got {self.p}")
    if self.kind and self.p == 0.0:
      raise ValueError(f"retriever.noise.kind={self.kind!r} with p=0 adds no noise; set "
                       f"retriever.noise.p (or kind='')")
    if self.paraphrases < 1 or self.depth < 1:
      raise ValueError("retriever.noise.paraphrases and retriever.noise.depth must be >= 1")

  @property
  def wraps_search(self) -> bool:
    """Kinds applied at search time (paraphrase lives in the index instead)."""
    return self.kind in ("replace", "shuffle", "drop_gold")


def _digest(seed: int, *parts: str) -> bytes:
  h = hashlib.sha256(str(seed).encode())
  for p in parts:
    h.update(b"\x00" + p.encode("utf-8"))
  return h.digest()


def coin(seed: int, *parts: str) -> float:
  """A uniform draw in [0, 1) that depends only on (seed, parts)."""
  return int.from_bytes(_digest(seed, *parts)[:8], "big") / 2.0 ** 64


def rng_for(seed: int, *parts: str) -> np.random.Generator:
  return np.random.default_rng(int.from_bytes(_digest(seed, *parts)[8:16], "big"))


def _query_key(query: str) -> str:
  return " ".join(query.lower().split())


# --- paraphrase distractors -------------------------------------------------------------------
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _sentences(text: str) -> list[str]:
  return [s for s in _SENTENCE.split(text.strip()) if s]


def rule_paraphrases(passage: Passage, n: int, rng: np.random.Generator) -> list[str]:
  """`n` rewrites of the passage's text, cycling three styles (brief, reordered, expanded)."""
  sents = _sentences(passage.text) or [passage.text]
  subject = passage.title or "this topic"
  out = []
  for j in range(n):
    style = j % 3
    if style == 0:       # brief: one or two sentences, formal opener
      out.append("In brief: " + " ".join(sents[:2]))
    elif style == 1:     # the same sentences in another order
      order = rng.permutation(len(sents)) if len(sents) > 1 else [0]
      if len(sents) > 1 and list(order) == list(range(len(sents))):
        order = list(range(1, len(sents))) + [0]
      out.append(" ".join(sents[i] for i in order))
    else:                # expanded
      out.append(f"Here is what is known about {subject}. " + " ".join(sents)
                 + f" That is the account of {subject}.")
  return out


def paraphrase_corpus(passages: Iterable[Passage], config: NoiseConfig,
                      paraphrase: Callable = rule_paraphrases) -> Iterable[Passage]:
  """The passages followed, for each one picked with probability p, by its paraphrases
  (ids `<id>~para<j>`, same title)."""
  for passage in passages:
    yield passage
    if coin(config.seed, "paraphrase", passage.id) >= config.p:
      continue
    texts = paraphrase(passage, config.paraphrases, rng_for(config.seed, "paraphrase", passage.id))
    for j, text in enumerate(texts):
      if text.strip() and text != passage.text:
        yield Passage(f"{passage.id}{PARA_SEP}{j}", passage.title, text)


def write_paraphrased_corpus(src: str, dst: str, config: NoiseConfig,
                             paraphrase: Callable = rule_paraphrases) -> int:
  """Reads a corpus file, writes it with paraphrase distractors as FlashRAG jsonl."""
  n = 0
  with open(dst, "w") as f:
    for p in paraphrase_corpus(read_passages(src, on_error="fail"), config, paraphrase):
      f.write(json.dumps({"id": p.id, "title": p.title, "text": p.text,
                          "contents": p.contents}) + "\n")
      n += 1
  return n


# --- search-time noise ------------------------------------------------------------------------
class NoisyRetriever:
  """Wraps any retriever (`search(queries, k)`) with `replace`, `shuffle` or `drop_gold`.

  `pool` (a `PassageStore` or a sequence of `Passage`) is what `replace` draws from.
  """

  def __init__(self, inner, config: NoiseConfig, pool=None):
    if not config.wraps_search:
      raise ValueError(f"NoisyRetriever applies replace / shuffle / drop_gold, not "
                       f"{config.kind!r}")
    if config.kind == "replace" and pool is None:
      raise ValueError("retriever.noise.kind='replace' draws random passages from the corpus; "
                       "it needs a local index (retriever.index or the world's), not a URL")
    self.inner, self.config, self.pool = inner, config, pool
    self.noised = self.queries = 0         # counts for logs and tests
    self._contexts: dict = {}

  @property
  def needs_records(self) -> bool:
    return self.config.kind == "drop_gold"

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    return self.search_with_context(queries, k)

  def search_with_context(self, queries: Sequence[str], k: int,
                          records: Optional[Sequence[Optional[Mapping]]] = None,
                          **contexts) -> list[list[Hit]]:
    """`records[i]`: the dataset record query i was issued for (needed by drop_gold); other
    per-query `contexts` go on to the wrapped retriever when it takes them."""
    queries = check_search_args(queries, k)
    kind = self.config.kind
    self.queries += len(queries)
    self._contexts = contexts
    if kind == "drop_gold":
      return self._drop_gold(queries, k, records)
    noisy = [i for i, q in enumerate(queries)
             if coin(self.config.seed, kind, _query_key(q)) < self.config.p]
    self.noised += len(noisy)
    clean = sorted(set(range(len(queries))) - set(noisy))
    out: list[list[Hit]] = [[] for _ in queries]
    if clean:
      for i, hits in zip(clean, self._inner_search(queries, clean, k)):
        out[i] = list(hits)
    if not noisy:
      return out
    if kind == "replace":
      for i in noisy:
        out[i] = self._random_passages(queries[i], k)
    else:   # shuffle
      deep = self._inner_search(queries, noisy, max(k, self.config.depth))
      for i, hits in zip(noisy, deep):
        hits = list(hits)
        rng = rng_for(self.config.seed, kind, _query_key(queries[i]))
        pick = rng.permutation(len(hits))[:k]
        out[i] = [hits[j] for j in pick]
    return out

  def _inner_search(self, queries, idx, k: int) -> list[list[Hit]]:
    """The wrapped retriever's hits for queries[idx], with their slice of the contexts."""
    idx = list(idx)
    sub = [queries[i] for i in idx]
    ctx = {name: [v[i] for i in idx] for name, v in self._contexts.items() if v is not None}
    if ctx and hasattr(self.inner, "search_with_context"):
      return self.inner.search_with_context(sub, k, **ctx)
    return self.inner.search(sub, k)

  def _random_passages(self, query: str, k: int) -> list[Hit]:
    rng = rng_for(self.config.seed, "replace", _query_key(query))
    n = len(self.pool)
    rows = rng.choice(n, size=min(k, n), replace=False).tolist()
    if hasattr(self.pool, "contents"):        # a PassageStore
      ids, contents = self.pool.ids(rows), self.pool.contents(rows)
    else:
      ids = [self.pool[r].id for r in rows]
      contents = [self.pool[r].contents for r in rows]
    return [Hit(i, c, 0.0) for i, c in zip(ids, contents)]

  def _drop_gold(self, queries, k, records):
    if records is None or len(records) != len(queries):
      raise ValueError("retriever.noise.kind='drop_gold' needs the question record of every "
                       "query (the rollout engine passes them to search_with_context); plain "
                       "search() cannot know the gold passages")
    golds = []
    for i, rec in enumerate(records):
      ids = (rec or {}).get("supporting_ids")
      if not ids:
        raise ValueError(f"drop_gold: the record of query {i} ({(rec or {}).get('id', '?')!r}) "
                         f"has no supporting_ids naming its gold passages")
      golds.append(set(map(str, ids)))
    extra = max(len(g) for g in golds)
    results = self._inner_search(queries, range(len(queries)), k + extra)
    out = []
    for q, gold, hits in zip(queries, golds, results):
      keep = []
      for h in hits:
        if h.id in gold and coin(self.config.seed, "drop_gold", _query_key(q), h.id) < self.config.p:
          self.noised += 1
          continue
        keep.append(h)
      out.append(keep[:k])
    return out


def wrap_retriever(retriever, config: NoiseConfig, pool=None):
  """The retriever with search-time noise applied (unchanged for none / paraphrase)."""
  return NoisyRetriever(retriever, config, pool) if config.wraps_search else retriever


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description="write a corpus with paraphrase distractors")
  ap.add_argument("--corpus", required=True)
  ap.add_argument("--out", required=True)
  ap.add_argument("--paraphrases", type=int, default=3)
  ap.add_argument("--p", type=float, default=1.0)
  ap.add_argument("--seed", type=int, default=0)
  a = ap.parse_args(argv)
  n = write_paraphrased_corpus(a.corpus, a.out, NoiseConfig("paraphrase", a.p, a.seed,
                                                            a.paraphrases))
  print(f"wrote {n} passages to {a.out}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
