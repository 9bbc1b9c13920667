"""The noisy-retrieval wrapper on a real BM25 index: each kind does what it says, every draw is
a deterministic function of (seed, query), drop_gold gets the question through the rollout
engine, and paraphrase distractors built into a real index compete with their source passage."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.retrieval.corpus_reader import Passage  # noqa: E402
from ragjax.retrieval.noisy import (NoiseConfig, NoisyRetriever, coin, paraphrase_corpus,  # noqa
                                    rule_paraphrases, rng_for, wrap_retriever)
from ragjax.rollout.engine import RolloutEngine  # noqa: E402
from ragjax.rollout.protocols import get_protocol  # noqa: E402

QUERIES = ["Tessaly River", "Amber Sea", "Mirela Dunst", "capital of Zorbland", "comets tides",
           "harbour city", "Quillport Observatory", "chronicle harbour event"]
POOL = [Passage(i, t, x) for i, t, x in h.PASSAGES]


def ids(results):
  return [[x.id for x in hits] for hits in results]


def test_config_is_checked():
  with pytest.raises(ValueError, match="retriever.noise.kind='blur'"):
    NoiseConfig(kind="blur", p=0.5)
  with pytest.raises(ValueError, match=r"retriever.noise.p must be in \[0, 1\]"):
    NoiseConfig(kind="replace", p=1.5)
  with pytest.raises(ValueError, match="p=0 adds no noise"):
    NoiseConfig(kind="shuffle")
  with pytest.raises(ValueError, match="needs a local index"):
    NoisyRetriever(h.bm25_retriever(), NoiseConfig("replace", 1.0))
  inner = h.bm25_retriever()
  assert wrap_retriever(inner, NoiseConfig()) is inner


def test_replace_is_per_query_deterministic_and_leaves_clean_queries_alone():
  inner = h.bm25_retriever()
  clean = ids(inner.search(QUERIES, 2))
  noisy = NoisyRetriever(inner, NoiseConfig("replace", 0.5, seed=7), POOL)
  got = ids(noisy.search(QUERIES, 2))
  hit = [coin(7, "replace", q.lower()) < 0.5 for q in QUERIES]
  assert 0 < sum(hit) < len(QUERIES) and noisy.noised == sum(hit)
  for q, g, c, h_ in zip(QUERIES, got, clean, hit):
    if not h_:
      assert g == c, q
    else:
      rows = rng_for(7, "replace", q.lower()).choice(len(POOL), 2, replace=False)
      assert g == [POOL[r].id for r in rows], q
  assert ids(noisy.search(QUERIES, 2)) == got                       # same draw every time
  assert ids(noisy.search(["  tessaly   RIVER "], 2))[0] == got[0]  # keyed on the query words
  other = NoisyRetriever(inner, NoiseConfig("replace", 0.5, seed=8), POOL)
  assert ids(other.search(QUERIES, 2)) != got                        # the seed matters


def test_shuffle_draws_k_from_the_top_depth():
  inner = h.bm25_retriever()
  noisy = NoisyRetriever(inner, NoiseConfig("shuffle", 1.0, seed=0, depth=6))
  got = ids(noisy.search(QUERIES, 2))
  deep = ids(inner.search(QUERIES, 6))
  top = ids(inner.search(QUERIES, 2))
  for g, d in zip(got, deep):
    assert len(g) == min(2, len(d)) and set(g) <= set(d)
  assert got != top                                   # relevance perturbed for some query
  assert ids(noisy.search(QUERIES, 2)) == got


def test_drop_gold_needs_the_record_and_backfills():
  inner = h.bm25_retriever()
  noisy = NoisyRetriever(inner, NoiseConfig("drop_gold", 1.0))
  top = ids(inner.search(["Mirela Dunst observatory"], 3))[0]
  assert top[0] == "p2"
  got = ids(noisy.search_with_context(["Mirela Dunst observatory"], 2, records=[{"supporting_ids": ["p2"]}]))[0]
  assert got == top[1:3]                               # the gold is gone, the next ones fill in
  with pytest.raises(ValueError, match="needs the question record"):
    noisy.search(["Mirela Dunst"], 2)
  with pytest.raises(ValueError, match="record of query 0 \\('q9'\\) has no supporting_ids"):
    noisy.search_with_context(["Mirela Dunst"], 2, records=[{"id": "q9"}])
  half = NoisyRetriever(inner, NoiseConfig("drop_gold", 0.5, seed=3))
  kept = [("p4" in r) for r in ids(half.search_with_context(
      [f"Tessaly River {w}" for w in QUERIES], 1, records=[{"supporting_ids": ["p4"]}] * len(QUERIES)))]
  assert 0 < sum(kept) < len(kept)


def test_drop_gold_through_the_rollout_engine():
  """The engine hands each query's prompt record to `search_with_context`."""
  proto = get_protocol("search_r1")
  tok = h.tokenizer()
  scripts = {0: ["<search> Mirela Dunst observatory </search>", "<answer> x </answer>"],
             1: ["<search> Mirela Dunst observatory </search>", "<answer> x </answer>"]}
  pol = h.ScriptedPolicy(tok, scripts, stop_strings=proto.stop_sequences)
  noisy = NoisyRetriever(h.bm25_retriever(), NoiseConfig("drop_gold", 1.0))
  prompts = [{"question": "Who founded it?", "supporting_ids": ["p2"]},
             {"question": "What does it study?", "supporting_ids": ["p3"]}]
  batch = RolloutEngine(proto, pol, noisy, tok).run(prompts)
  shown = [r.doc_ids[0] for r in batch.meta.rows]
  assert "p2" not in shown[0] and "p2" in shown[1] and "p3" not in shown[1]


def test_paraphrases_are_rewrites_with_their_own_ids():
  src = POOL[2]                                       # Mirela Dunst founded ... in 1871.
  texts = rule_paraphrases(Passage("x", "T", "One fact. Two fact. Three fact."), 3,
                           rng_for(0, "x"))
  assert texts[0] == "In brief: One fact. Two fact."
  reordered = texts[1].rstrip(".").split(". ")          # the same sentences, another order
  assert sorted(reordered) == ["One fact", "Three fact", "Two fact"]
  assert texts[1] != "One fact. Two fact. Three fact."
  assert texts[2] == ("Here is what is known about T. One fact. Two fact. Three fact. That is "
                      "the account of T.")
  out = list(paraphrase_corpus([src], NoiseConfig("paraphrase", 1.0, paraphrases=3)))
  assert [p.id for p in out] == ["p2", "p2~para0", "p2~para2"]   # one sentence: no reorder
  assert all(p.title == src.title for p in out)
  assert list(paraphrase_corpus(POOL, NoiseConfig("paraphrase", 1e-9))) == POOL


def test_paraphrase_distractors_in_a_world_index(tmp_path):
  """`retriever.noise.kind='paraphrase'` through the recipe: the corpus gets distractors before
  the (real BM25) index is built, and they outrank or follow their source passage."""
  from ml_collections import ConfigDict
  from ragjax.wiring.components import open_retriever
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs"))
  import common  # configs/common.py
  corpus = tmp_path / "corpus.jsonl"
  with open(corpus, "w") as f:
    for p in POOL[:6]:
      f.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n")
  c = common.get_config()
  c.retriever.backend, c.progress = "bm25", False
  c.retriever.noise = ConfigDict(dict(kind="paraphrase", p=1.0, seed=0, paraphrases=3, depth=10))
  ret = open_retriever(c, str(tmp_path), str(corpus))
  got = ids(ret.search(["Tessaly River Quillport Amber Sea"], 3))[0]
  assert any("~para" in i for i in got) and {i.split("~")[0] for i in got} & {"p4"}
  assert [d for d in os.listdir(tmp_path) if d.startswith("index_paraphrase_n3_p1_s0-")]
  c.retriever.url = "http://127.0.0.1:9"
  with pytest.raises(ValueError, match="puts distractors into the index"):
    open_retriever(c, str(tmp_path), str(corpus))
