"""Tuning a ScaNN index on held-out queries: the sweep's choice meets its recall on queries it
never saw; the CLI writes it into index.json; open_index and the server search with it; the
server batches concurrent requests into shared encoder calls and caches query vectors."""

import json
import os
import threading

import numpy as np
import pytest
import requests

from _retrieval_helpers import clustered_vectors, run_module, server, small_corpus, write_jsonl
from ragjax.retrieval.exact import ExactIndex
from ragjax.retrieval.index import build_index, open_index, read_meta
from ragjax.retrieval.scann_index import ScannConfig, ScannIndex
from ragjax.retrieval.tune import leaves_grid, lower_bound, per_query_recall, read_queries, tune


def _queries(db, seed, m, noise=0.08):
  rng = np.random.default_rng(seed)
  q = db[rng.integers(0, len(db), m)] + noise * rng.normal(size=(m, db.shape[1])).astype(np.float32)
  return q / np.linalg.norm(q, axis=1, keepdims=True)


def test_lower_bound_and_grid_by_hand():
  assert per_query_recall(np.array([[1, 2, 3], [4, 5, 6]]), np.array([[1, 2, 9], [6, 5, 4]])).tolist() == [2 / 3, 1.0]
  # 0.8 and 1.0: mean 0.9, sample sd sqrt(0.02), standard error sqrt(0.02 / 2) = 0.1
  assert lower_bound(np.array([0.8, 1.0])) == pytest.approx(0.9 - 1.645 * 0.1)
  assert leaves_grid(10) == [1, 2, 3, 5, 8, 10] and leaves_grid(1) == [1]


def test_tuned_setting_meets_its_recall_on_fresh_held_out_queries():
  db, _ = clustered_vectors(4000, 32, 40, seed=1)
  index = ScannIndex.build(db, ScannConfig(num_leaves=50, training_sample_size=1000))
  exact = ExactIndex(db)
  q = _queries(db, 2, 400)
  result = tune(index, q, exact.search(q, 10)[0], k=10, target=0.95, holdout=0.5, repeats=2)
  assert result["lower_bound_tune"] >= 0.95 and result["n_tune"] == result["n_heldout"] == 200
  assert result["recall_heldout"] >= 0.95
  leaves, depth = result["leaves_to_search"], result["reorder"]
  assert leaves < index.num_leaves                     # cheaper than probing everything
  # Every cheaper depth tried at these leaves missed the target (the choice is the least one).
  tried = [r for r in result["sweep"] if r["leaves_to_search"] == leaves and r["reorder"] < depth]
  assert tried and all(r["lower_bound"] < 0.95 for r in tried)
  # 400 queries it never saw, from the same distribution: the recorded recall holds.
  fresh = _queries(db, 3, 400)
  index.set_search(leaves, depth)
  assert per_query_recall(index.search(fresh, 10)[0], exact.search(fresh, 10)[0]).mean() >= 0.95
  with pytest.raises(ValueError, match="no setting reaches recall@10 1.0"):
    tune(index, q, exact.search(q, 10)[0], target=1.0, max_reorder=10)


def _questions(rows, template):
  out = []
  for r in rows:
    title, text = r["contents"].split("\n", 1)
    out.append(template.format(name=title.strip('"'), place=text.split(" born in ")[-1].split(" ")[0]))
  return out


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
  from ragjax.models.encoder import TextEncoder
  d = tmp_path_factory.mktemp("tune")
  rows = small_corpus(240)
  corpus = write_jsonl(d / "corpus.jsonl", rows)
  index_dir = str(d / "index")
  build_index(str(corpus), index_dir, "scann", encoder=TextEncoder.from_dir(batch_size=32),
              scann_config=ScannConfig(num_leaves=8), chunk_rows=64, progress=False)
  # The user's questions, drawn at random: 100 to tune on, 50 kept for the check below.
  pool = _questions([rows[i] for i in np.random.default_rng(0).permutation(240)[:150]],
                    "Which trade did {name} master?")
  write_jsonl(d / "tune.jsonl", [{"id": i, "question": q} for i, q in enumerate(pool[:100])])
  (d / "fresh.txt").write_text("\n".join(pool[100:]) + "\n")
  r = run_module("ragjax.retrieval.tune", "--index", index_dir, "--queries", str(d / "tune.jsonl"),
                 "--repeats", "2")
  return index_dir, d, r


def test_tune_cli_writes_the_setting_open_index_uses(tuned):
  index_dir, d, r = tuned
  assert r.returncode == 0, r.stderr
  line = json.loads(r.stdout.strip().splitlines()[-1])
  assert line["written"] and line["n_queries"] == 100 and line["n_tune"] == line["n_heldout"] == 50
  search = read_meta(index_dir)["search"]
  assert search["tuned"]["lower_bound_tune"] >= 0.95 and search["tuned"]["recall_heldout"] >= 0.95
  retriever = open_index(index_dir)
  assert (retriever.index.leaves_to_search, retriever.index.reorder_depth) == \
      (search["leaves_to_search"], search["reorder"])
  # Questions never seen by the tuner (about other passages): top-10 agreement with exact.
  fresh = read_queries(str(d / "fresh.txt"))
  assert len(fresh) == 50
  exact = open_index(index_dir, backend="exact", encoder=retriever.encoder)
  got, ref = retriever.search(fresh, 10), exact.search(fresh, 10)
  agree = np.mean([len({h.id for h in a} & {h.id for h in b}) / 10 for a, b in zip(got, ref)])
  assert agree >= 0.95


def test_tune_cli_errors_name_the_problem(tuned, tmp_path):
  index_dir, d, _ = tuned
  write_jsonl(tmp_path / "bad.jsonl", [{"question": "a"}, {"q": "no question field"}])
  r = run_module("ragjax.retrieval.tune", "--index", index_dir, "--queries", str(tmp_path / "bad.jsonl"))
  assert r.returncode == 2 and "bad.jsonl line 2" in r.stderr and "question" in r.stderr
  build_index(str(d / "corpus.jsonl"), str(tmp_path / "bm25"), "bm25", progress=False)
  r = run_module("ragjax.retrieval.tune", "--index", str(tmp_path / "bm25"), "--queries", str(d / "tune.jsonl"))
  assert r.returncode == 2 and "only ScaNN has settings to tune" in r.stderr


def test_server_uses_the_tuned_setting_and_batches_concurrent_requests(tuned):
  index_dir, d, _ = tuned
  questions = [json.loads(line)["question"] for line in open(d / "tune.jsonl")][:48]
  groups = [questions[i::6] for i in range(6)]                   # 6 requests of 8 queries
  in_proc = open_index(index_dir)
  search = read_meta(index_dir)["search"]
  with server(index_dir) as (url, _):
    health = requests.get(url + "/health", timeout=30).json()["search"]
    assert health["tuned"] and health["leaves_to_search"] == search["leaves_to_search"]
    assert health["reorder"] == search["reorder"] and health["reorder_store"] == "disk"
    replies = [None] * len(groups)

    def post(i):
      replies[i] = requests.post(url + "/retrieve", json={"queries": groups[i], "topk": 5,
                                                          "return_scores": True}, timeout=120).json()
    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(groups))]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    for reply, group in zip(replies, groups):
      ref = in_proc.search(group, 5)
      assert [[(x["document"]["id"], x["score"]) for x in row] for row in reply["result"]] == \
          [[(h.id, h.score) for h in row] for row in ref]           # bit-identical, batched or not
      t = reply["timing"]
      assert set(t) >= {"queue_s", "encode_s", "search_s", "fetch_s", "total_s", "batch_queries"}
    # While the first request was encoding, the others queued and shared one encoder call.
    assert max(r["timing"]["batch_queries"] for r in replies) > 8
    # Again: every vector comes from the cache by query text, nothing is encoded, same hits.
    again = requests.post(url + "/retrieve", json={"queries": groups[0], "topk": 5,
                                                   "return_scores": True}, timeout=60).json()
    assert again["result"] == replies[0]["result"]
    assert again["timing"]["cached"] == 8 and again["timing"]["encoded"] == 0
    assert again["timing"]["encode_s"] < replies[0]["timing"]["encode_s"]
