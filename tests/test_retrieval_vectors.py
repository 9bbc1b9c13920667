"""Vector backends: exact (JAX, sharded and not) vs numpy, ScaNN vs exact, save/load, embed resume."""

import numpy as np
import pytest

from _retrieval_helpers import clustered_vectors
from ragjax.parallel.mesh import make_mesh
from ragjax.retrieval import embed_store
from ragjax.retrieval.exact import ExactIndex
from ragjax.retrieval.scann_index import ScannConfig, ScannIndex


def _numpy_topk(db, q, k):
  s = q @ db.T
  rows = np.argsort(-s, axis=1, kind="stable")[:, :k]
  return rows, np.take_along_axis(s, rows, axis=1)


def _recall(a, b):
  return float(np.mean([len(set(x) & set(y)) / len(y) for x, y in zip(a, b)]))


@pytest.fixture(scope="module")
def data():
  db, centres = clustered_vectors(6000, 48, 40, seed=1)
  rng = np.random.default_rng(2)
  q = db[rng.integers(0, len(db), 64)] + 0.05 * rng.normal(size=(64, 48)).astype(np.float32)
  return db, q / np.linalg.norm(q, axis=1, keepdims=True)


def test_exact_matches_numpy(data):
  db, q = data
  rows, scores = ExactIndex(db, block=1000).search(q, 10, batch=24)   # 3 batches, padded last
  ref_rows, ref_scores = _numpy_topk(db, q, 10)
  np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-5)
  assert _recall(rows, ref_rows) == 1.0


def test_exact_sharded_over_8_devices_matches_unsharded(data):
  db, q = data
  mesh = make_mesh(data=2, fsdp=4, tensor=1)
  sharded = ExactIndex(db[:5001], block=512, mesh=mesh)     # 5001 rows: uneven, padded shards
  assert sharded.shards == 8
  rows, scores = sharded.search(q, 7)
  ref_rows, ref_scores = ExactIndex(db[:5001]).search(q, 7)
  np.testing.assert_array_equal(rows, ref_rows)
  np.testing.assert_allclose(scores, ref_scores, rtol=1e-6, atol=1e-6)


def test_exact_k_larger_than_corpus_pads_with_minus_one():
  db, _ = clustered_vectors(5, 8, 2)
  rows, scores = ExactIndex(db).search(db[:2], 8)
  assert (rows[:, :5] >= 0).all() and (rows[:, 5:] == -1).all() and np.isinf(scores[:, 5:]).all()
  assert rows[0, 0] == 0 and rows[1, 0] == 1


@pytest.mark.parametrize("config", [
    ScannConfig(num_leaves=60, leaves_to_search_frac=0.1),     # tree + AH + int8 reorder
    ScannConfig(),                                              # small N: AH + reorder, no tree
])
def test_scann_top10_agrees_with_exact(data, config, tmp_path):
  db, q = data
  index = ScannIndex.build(db, config)
  rows, scores = index.search(q, 10)
  ref_rows, _ = ExactIndex(db).search(q, 10)
  assert _recall(rows, ref_rows) >= 0.95
  assert (np.diff(scores, axis=1) <= 1e-6).all()                # sorted by descending score
  index.save(str(tmp_path / "scann"))
  loaded = ScannIndex.load(str(tmp_path / "scann"))
  rows2, scores2 = loaded.search(q, 10)
  np.testing.assert_array_equal(rows2, rows)
  np.testing.assert_array_equal(scores2, scores)
  assert loaded.config == config and loaded.num_leaves == index.num_leaves


def test_scann_rejects_wrong_dim(data):
  db, _ = data
  index = ScannIndex.build(db[:500], ScannConfig())
  with pytest.raises(ValueError, match=r"queries must be \[Q, 48\]"):
    index.search(np.zeros((2, 5), np.float32), 3)


def _encode_rows(texts):
  # A deterministic "encoder" over row texts, so resume can be checked bit-for-bit.
  return np.stack([np.full(6, float(t), np.float32) * np.arange(1, 7) for t in texts])


def test_embedding_store_resumes_after_interruption(tmp_path):
  n, fp = 50, {"encoder": "row-ramp"}
  texts = lambda a, b: [str(i) for i in range(a, b)]
  calls = []

  def encode(t):
    calls.append(len(t))
    return _encode_rows(t)
  d = str(tmp_path / "emb")
  embed_store.build_embeddings(d, n, 6, texts, encode, fp, chunk_rows=8, progress=False,
                               stop_after_chunks=3)                # "killed" after 3 chunks
  assert embed_store.read_progress(d)["done_rows"] == 24
  with pytest.raises(ValueError, match="incomplete"):
    embed_store.load_embeddings(d)
  embed_store.build_embeddings(d, n, 6, texts, encode, fp, chunk_rows=8, progress=False)
  assert calls == [8, 8, 8, 8, 8, 8, 2]          # resumed at row 24: nothing encoded twice
  np.testing.assert_array_equal(embed_store.load_embeddings(d), _encode_rows(texts(0, n)))
  with pytest.raises(ValueError, match="different encoder or corpus"):
    embed_store.build_embeddings(d, n, 6, texts, encode, {"encoder": "other"}, progress=False)
