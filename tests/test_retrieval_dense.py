"""Dense retrieval end to end with the real MiniLM encoder: build, ScaNN vs exact, edge queries."""

import json
import os

import numpy as np
import pytest

from _retrieval_helpers import small_corpus, write_jsonl
from ragjax.retrieval.index import EncoderSpec, build_index, open_index
from ragjax.retrieval import embed_store


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  from ragjax.models.encoder import TextEncoder
  d = tmp_path_factory.mktemp("dense")
  rows = small_corpus(60)
  corpus = write_jsonl(d / "corpus.jsonl", rows)
  encoder = TextEncoder.from_dir(batch_size=32)
  meta = build_index(str(corpus), str(d / "index"), "scann", encoder=encoder, chunk_rows=25,
                     progress=False)
  return str(d / "index"), rows, encoder, meta


def test_embeddings_are_the_encoder_output_in_corpus_order(built):
  index_dir, rows, encoder, meta = built
  assert meta["n"] == len(rows) and meta["dim"] == encoder.dim == 384
  emb = embed_store.load_embeddings(os.path.join(index_dir, "embeddings"))
  pick = [0, 37, len(rows) - 1]
  direct = encoder.encode([rows[i]["contents"] for i in pick], kind="passage")
  np.testing.assert_allclose(emb[pick], direct, atol=2e-5)
  np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)    # MiniLM normalises


def test_scann_agrees_with_exact_and_finds_the_passage(built):
  index_dir, rows, encoder, _ = built
  scann_r = open_index(index_dir, encoder=encoder)
  exact_r = open_index(index_dir, backend="exact", encoder=encoder)
  queries = [r["contents"].split("\n", 1)[1] for r in rows[::4]]   # each passage's own text
  a, b = scann_r.search(queries, 10), exact_r.search(queries, 10)
  recall = np.mean([len({h.id for h in x} & {h.id for h in y}) / 10 for x, y in zip(a, b)])
  assert recall >= 0.95
  assert np.mean([y[0].id == r["id"] for y, r in zip(b, rows[::4])]) >= 0.9
  # Exact scores are cosine similarities computed independently here.
  emb = embed_store.load_embeddings(os.path.join(index_dir, "embeddings"))
  q = encoder.encode(queries[:3], kind="query")
  ref = np.sort(q @ emb.T, axis=1)[:, ::-1][:, :10]
  np.testing.assert_allclose([[h.score for h in row] for row in b[:3]], ref, atol=1e-5)


def test_edge_queries(built):
  index_dir, rows, encoder, _ = built
  r = open_index(index_dir, encoder=encoder)
  very_long = "Who founded the guild of weaving? " * 400          # far past 256 tokens: truncated
  queries = ["", very_long, "Zürich Käse und Schokolade", "東京タワーはどこ", "Café Émile crêpes Montréal"]
  out = r.search(queries, 5)
  assert out[0] == []
  assert len(out[1]) == 5 and all(np.isfinite(h.score) for h in out[1])
  assert out[2][0].id == "u1" and out[3][0].id == "u2" and out[4][0].id == "u3"
  # Truncation: the long query scores like its first 256 tokens.
  head = encoder.tokenizer.decode(encoder.tokenize([very_long], "query")[0][0][1:-1])
  assert [h.id for h in r.search([head], 5)[0]] == [h.id for h in out[1]]


def test_query_prefix_is_recorded_and_applied(tmp_path, built):
  from ragjax.models.encoder import TextEncoder
  _, rows, encoder, _ = built
  corpus = write_jsonl(tmp_path / "c.jsonl", rows[:12])
  spec = EncoderSpec(query_prefix="query: ", passage_prefix="passage: ", batch_size=16)
  e5_style = TextEncoder(encoder.cfg.replace(query_prefix="query: ", passage_prefix="passage: "),
                         encoder.params, encoder.tokenizer, batch_size=16)
  build_index(str(corpus), str(tmp_path / "idx"), "exact", encoder_spec=spec, encoder=e5_style,
              progress=False)
  meta = json.load(open(tmp_path / "idx" / "index.json"))
  reloaded = EncoderSpec(**meta["encoder"]).load()           # what open_index does at serve time
  assert (reloaded.cfg.query_prefix, reloaded.cfg.passage_prefix) == ("query: ", "passage: ")
  emb = embed_store.load_embeddings(str(tmp_path / "idx" / "embeddings"))
  np.testing.assert_allclose(emb[0], encoder.encode(["passage: " + rows[0]["contents"]])[0], atol=2e-5)
  r = open_index(str(tmp_path / "idx"), encoder=e5_style)
  hit = r.search(["Alder"], 1)[0][0]
  q = encoder.encode(["query: Alder"])[0]
  assert hit.score == pytest.approx(float(np.max(emb @ q)), abs=1e-5)


def test_query_vector_and_hits_do_not_depend_on_the_batch(built):
  """A resumed run encodes a query in a different batch than the original run did; its vector
  and hits must not change (XLA's output for a row moves ~1e-7 with padded width and row
  count, enough to flip near-ties)."""
  index_dir, _, encoder, _ = built
  q = "Who founded the Qessa guild of astronomy?"
  others = (["Zürich", "x " * 300, "東京タワー"]
            + [f"question {i} about the Belcaro guild of printing" for i in range(35)])
  alone = encoder.encode([q], kind="query")[0]
  batches = [[q] + others, others + [q], [q, others[1]]]
  for batch in batches:              # first call of its bucket / second call / beside a long one
    assert np.array_equal(encoder.encode(batch, kind="query")[batch.index(q)], alone)
  # ScaNN with the query encoder open_index loads itself (QUERY_BATCH_SIZE rows a call), and
  # exact search with the 32-row encoder above.
  for r in (open_index(index_dir), open_index(index_dir, backend="exact", encoder=encoder)):
    solo = r.search([q], 10)[0]
    assert len(solo) == 10
    for batch in batches[1:]:
      assert r.search(batch, 10)[batch.index(q)] == solo, type(r.index).__name__
