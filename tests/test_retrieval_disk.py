"""ScaNN with its re-scoring vectors on disk: the file format, exact re-scoring, the streaming
(sample + upsert) build against the in-memory one, bounded reads, old indexes, padding."""

import json
import os

import numpy as np
import pytest

from _retrieval_helpers import clustered_vectors
from ragjax.retrieval.exact import ExactIndex, search_chunks
from ragjax.retrieval.reorder import ReorderVectors, ReorderWriter, from_bfloat16_bits, to_bfloat16_bits
from ragjax.retrieval.scann_index import ScannConfig, ScannIndex
from ragjax.retrieval.tune import per_query_recall


@pytest.fixture(scope="module")
def data():
  db, _ = clustered_vectors(5000, 40, 40, seed=3)
  rng = np.random.default_rng(4)
  q = db[rng.integers(0, len(db), 80)] + 0.05 * rng.normal(size=(80, 40)).astype(np.float32)
  return db, q / np.linalg.norm(q, axis=1, keepdims=True)


def test_reorder_file_round_trip_and_rescore_is_exact(tmp_path, data):
  db, q = data
  path = str(tmp_path / "r.npy")
  with ReorderWriter(path, len(db), db.shape[1], "float32") as w:
    for a in range(0, len(db), 1234):
      w.append(db[a:a + 1234])
  assert np.array_equal(np.load(path, allow_pickle=False), db)      # a plain .npy file
  rv = ReorderVectors.open(path)
  rng = np.random.default_rng(0)
  cand = rng.integers(0, len(db), (len(q), 50))
  cand[:, 40:] = -1                                                   # padding is ignored
  rows, scores = rv.rescore(q, cand, 7)
  for i in range(len(q)):
    c = np.unique(cand[i, :40])
    s = db[c] @ q[i]
    order = np.lexsort((c, -s))[:7]
    assert rows[i].tolist() == c[order].tolist()
    np.testing.assert_allclose(scores[i], s[order], rtol=1e-6, atol=1e-6)
  # A query's result does not depend on the others in its batch.
  one_r, one_s = rv.rescore(q[5:6], cand[5:6], 7)
  assert np.array_equal(one_r[0], rows[5]) and np.array_equal(one_s[0], scores[5])
  # Fewer real candidates than k: -1 / -inf padding.
  r, s = rv.rescore(q[:1], np.array([[3, -1, 9]]), 4)
  assert r[0, 2:].tolist() == [-1, -1] and np.isinf(s[0, 2:]).all()


def test_bfloat16_bits_by_hand():
  # 1.0 = 0x3F800000 -> 0x3F80; 1 + 2^-8 is a tie between 0x3F80 and 0x3F81: rounds to even;
  # 1 + 3 * 2^-9 rounds up to 0x3F81; -2.5 = 0xC0200000 -> 0xC020.
  x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -9, -2.5], np.float32)
  assert to_bfloat16_bits(x).tolist() == [0x3F80, 0x3F80, 0x3F81, 0xC020]
  assert from_bfloat16_bits(np.array([0x3F81], np.uint16)).tolist() == [1 + 2 ** -7]


def test_reorder_file_refuses_short_writes_and_truncation(tmp_path):
  path = str(tmp_path / "r.npy")
  with pytest.raises(ValueError, match="3 of 5 rows written"):
    with ReorderWriter(path, 5, 4) as w:
      w.append(np.ones((3, 4)))
  assert not os.path.exists(path) and not os.path.exists(path + ".tmp")
  with ReorderWriter(path, 5, 4) as w:
    w.append(np.ones((5, 4)))
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) - 2)
  with pytest.raises(ValueError, match="truncated"):
    ReorderVectors.open(path)


def test_streaming_build_reads_bounded_chunks_and_matches_the_in_memory_build(tmp_path, data):
  db, q = data
  cfg = ScannConfig(num_leaves=25, training_sample_size=1600, leaves_to_search_frac=0.6)
  reads = []

  def read(a, b):
    reads.append((a, b))
    return db[a:b]
  streamed = ScannIndex.build_streaming(read, len(db), db.shape[1], cfg, directory=str(tmp_path / "s"),
                                        chunk_rows=700)
  assert max(b - a for a, b in reads) <= 700                   # never more than a chunk at a time
  assert sum(b - a for a, b in reads) <= 2 * len(db)           # sample pass + add pass
  in_memory = ScannIndex.build(db, cfg)
  rows, scores = streamed.search(q, 10)
  rows2, scores2 = in_memory.search(q, 10)
  np.testing.assert_array_equal(rows, rows2)                   # seeded: same index either way
  np.testing.assert_array_equal(scores, scores2)
  ref, ref_scores = ExactIndex(db).search(q, 10)
  assert per_query_recall(rows, ref).mean() >= 0.95
  np.testing.assert_allclose(scores[:, 0], ref_scores[:, 0], atol=2e-3)   # bfloat16 re-scoring
  # Row i of the corpus is datapoint i (the sample was trained on, then re-added in order).
  own, _ = streamed.search(db[[0, 777, 4999]], 1, leaves_to_search=25)
  assert own[:, 0].tolist() == [0, 777, 4999]
  # Saved: codes + partitioner for ScaNN, the bfloat16 rows beside them; loads identically.
  files = sorted(os.listdir(tmp_path / "s"))
  assert "reorder.npy" in files and not any(f.endswith(".pkl") for f in files)
  stored = np.load(tmp_path / "s" / "reorder.npy", allow_pickle=False)
  assert stored.dtype == np.uint16 and np.array_equal(stored, to_bfloat16_bits(db))
  np.testing.assert_allclose(from_bfloat16_bits(stored), db, rtol=2 ** -8, atol=0)
  loaded = ScannIndex.load(str(tmp_path / "s"))
  np.testing.assert_array_equal(loaded.search(q, 10)[0], rows)
  assert loaded.reorder_vectors.path.endswith("reorder.npy")


def test_set_search_changes_the_defaults_and_checks_them(data):
  db, q = data
  index = ScannIndex.build(db, ScannConfig(num_leaves=25, training_sample_size=1600))
  few, _ = index.search(q, 10, leaves_to_search=1, reorder=10)
  index.set_search(leaves_to_search=1, reorder=10)
  np.testing.assert_array_equal(index.search(q, 10)[0], few)
  with pytest.raises(ValueError, match="leaves_to_search must be in 1..25"):
    index.set_search(leaves_to_search=26)
  with pytest.raises(ValueError, match="reorder_dtype must be one of bfloat16, float32, none"):
    ScannConfig(reorder_dtype="int8")
  ScannConfig(reorder_store="ram", reorder_dtype="int8")


def test_index_saved_before_disk_reorder_loads_as_ram(tmp_path, data):
  db, q = data
  ram = ScannIndex.build(db[:800], ScannConfig(reorder_store="ram", reorder_dtype="int8"))
  ram.save(str(tmp_path / "old"))
  meta_path = tmp_path / "old" / "ragjax_scann.json"
  meta = json.load(open(meta_path))
  for key in ("reorder_store", "seed"):              # what an index from before looked like
    meta["config"].pop(key)
  json.dump(meta, open(meta_path, "w"))
  old = ScannIndex.load(str(tmp_path / "old"))
  assert old.config.reorder_store == "ram" and old.reorder_vectors is None
  np.testing.assert_array_equal(old.search(q, 5)[0], ram.search(q, 5)[0])


@pytest.mark.parametrize("store", ["disk", "ram"])
def test_k_beyond_the_corpus_pads_with_minus_one(store):
  db, _ = clustered_vectors(5, 8, 2)
  cfg = ScannConfig(reorder_store=store, reorder_dtype="float32" if store == "disk" else "int8")
  rows, scores = ScannIndex.build(db, cfg).search(db[:2], 8)
  assert sorted(rows[0, :5].tolist()) == [0, 1, 2, 3, 4] and (rows[:, 5:] == -1).all()
  assert np.isinf(scores[:, 5:]).all() and rows[0, 0] == 0 and rows[1, 0] == 1


def test_exact_search_over_streamed_chunks_equals_one_index(data):
  db, q = data
  rows, scores = ExactIndex(db).search(q, 10)
  rows2, scores2 = search_chunks(((a, db[a:a + 700]) for a in range(0, len(db), 700)), q, 10)
  np.testing.assert_array_equal(rows2, rows)
  np.testing.assert_allclose(scores2, scores, atol=1e-6)
