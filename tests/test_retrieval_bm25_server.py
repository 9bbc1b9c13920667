"""BM25 (against the Lucene formula), the Search-R1 HTTP server, and the client's failure modes."""

import json
import math
import os
import socket
import threading
import time

import numpy as np
import pytest
import requests

from _retrieval_helpers import free_port, server, small_corpus, start_server, stop_server, write_jsonl
from ragjax.retrieval.bm25 import BM25Index, top_k
from ragjax.retrieval.query_cache import CachedRetriever
from ragjax.retrieval.client import RetrievalError, SearchClient
from ragjax.retrieval.index import build_index, open_index
from ragjax.retrieval.types import Hit, Retriever


def test_bm25_save_load_identical(tmp_path):
  texts = [r["contents"] for r in small_corpus(80)]
  index = BM25Index.build(texts)
  queries = ["Qessa astronomy guild", "Zürich", "founded 1723 weaving Belcaro", "zzz"]
  rows, scores = index.search(queries, 6)
  index.save(str(tmp_path / "bm25"))
  for mmap in (True, False):
    rows2, scores2 = BM25Index.load(str(tmp_path / "bm25"), mmap=mmap).search(queries, 6)
    np.testing.assert_array_equal(rows2, rows)
    np.testing.assert_array_equal(scores2, scores)
  assert (rows[:3, 0] >= 0).all() and (rows[3] == -1).all()


def test_bm25_scores_match_lucene_formula():
  docs = ["the cat sat on the mat", "dog and cat friends", "a bird sang", "cat cat cat dog"]
  index = BM25Index.build(docs, k1=0.9, b=0.4)
  rows, scores = index.search(["cat dog", "unknownword", ""], 4)
  toks = [["cat", "sat", "mat"], ["dog", "cat", "friends"], ["bird", "sang"], ["cat", "cat", "cat", "dog"]]
  avg = np.mean([len(t) for t in toks])

  def lucene(doc, query):    # idf = ln(1 + (N - df + .5)/(df + .5)); tf / (tf + k1 (1 - b + b |d|/avg))
    total = 0.0
    for w in query:
      df, tf = sum(w in t for t in toks), doc.count(w)
      total += math.log(1 + (4 - df + 0.5) / (df + 0.5)) * tf / (tf + 0.9 * (0.6 + 0.4 * len(doc) / avg))
    return total
  ref = [lucene(t, ["cat", "dog"]) for t in toks]
  order = [i for i in np.argsort(ref)[::-1] if ref[i] > 0]
  assert rows[0, :3].tolist() == order and rows[0, 3] == -1          # "a bird sang" has score 0
  np.testing.assert_allclose(scores[0, :3], [ref[i] for i in order], rtol=1e-5)
  assert (rows[1] == -1).all() and (rows[2] == -1).all()


def test_top_k_by_hand_ties_to_the_lower_index_and_drops_zero_scores():
  scores = np.array([[0.5, 2.0, 2.0, 0.0, 2.0, 1.0],     # a three-way tie for first
                     [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],     # nothing matched
                     [0.0, 0.3, 0.0, 0.0, 0.0, 0.7],     # fewer positives than k
                     [1.0, 1.0, 1.0, 1.0, 3.0, 1.0]],    # a tie across the k-th place
                    np.float32)
  idx, val = top_k(scores, 3)
  assert idx.tolist() == [[1, 2, 4], [-1, -1, -1], [5, 1, -1], [4, 0, 1]]
  np.testing.assert_array_equal(val, np.array([[2, 2, 2], [-np.inf] * 3, [0.7, 0.3, -np.inf],
                                               [3, 1, 1]], np.float32))
  idx, val = top_k(scores[:1], 10)                      # k past the row's length
  assert idx.tolist() == [[1, 2, 4, 5, 0, -1]]
  assert top_k(scores[:0], 3)[0].shape == (0, 3)


def test_search_ranks_as_bm25s_and_jax_top_k_without_touching_jax(monkeypatch):
  import bm25s
  import jax
  texts = [r["contents"] for r in small_corpus(80)] * 2          # duplicates: exact score ties
  index = BM25Index.build(texts)                  # k1 0.9, b 0.4, English stopwords
  queries = ["Qessa astronomy guild", "Zürich", "founded 1723 weaving Belcaro", "guild", "zzz"]
  ref = bm25s.BM25(k1=0.9, b=0.4)
  ref.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
  toks = bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
  live = [q for q in ([t for t in q if t in ref.vocab_dict] for q in toks) if q]
  ref_docs, ref_scores = ref.retrieve(live, k=7, show_progress=False, n_threads=0,
                                      backend_selection="jax")   # lax.top_k: ties to the lower
  def no_jax(*a, **k):
    raise AssertionError("BM25 search called jax.lax.top_k")
  monkeypatch.setattr(jax.lax, "top_k", no_jax)
  rows, scores = index.search(queries, 7)
  assert (rows[4] == -1).all()
  for q in range(4):
    keep = ref_scores[q] > 0
    assert rows[q, :keep.sum()].tolist() == ref_docs[q][keep].tolist()
    assert (rows[q, keep.sum():] == -1).all()
    np.testing.assert_array_equal(scores[q, :keep.sum()], ref_scores[q][keep])
  ties = [(q, j) for q in range(4) for j in range(6)
          if rows[q, j + 1] >= 0 and scores[q, j] == scores[q, j + 1]]
  assert ties and all(rows[q, j] < rows[q, j + 1] for q, j in ties)    # equal: lower index first


@pytest.fixture(scope="module")
def bm25_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("bm25")
  corpus = write_jsonl(d / "corpus.jsonl", small_corpus())
  meta = build_index(str(corpus), str(d / "index"), "bm25")
  assert meta["n"] == len(small_corpus())
  return str(d / "index")


def test_in_process_retriever_protocol_and_edge_queries(bm25_dir):
  r = open_index(bm25_dir)
  assert isinstance(r, Retriever)
  long_query = " ".join(["guild"] * 4000 + ["Zürich"])
  out = r.search(["Zürich Käse Schokolade", "", "   ", long_query, "東京タワー"], 3)
  assert out[0][0].id == "u1" and out[0][0].title == "Zürich Grüße"
  assert out[1] == [] and out[2] == []
  assert len(out[3]) == 3
  assert out[4][0].id == "u2"
  with pytest.raises(TypeError, match="single str"):
    r.search("a query", 3)
  with pytest.raises(ValueError, match="k must be a positive int"):
    r.search(["x"], 0)
  cached = CachedRetriever(r, maxsize=2)
  first = cached.search(["Qessa astronomy", "Qessa astronomy", "Belcaro"], 5)
  assert first[0] == first[1] == r.search(["Qessa astronomy"], 5)[0]
  assert cached.cache.misses == 3 and cached.cache.hits == 0   # 2 unique; duplicate within batch
  cached.search(["Belcaro"], 5)
  assert cached.cache.hits == 1 and len(cached.cache) == 2


def test_a_dense_server_does_not_reserve_the_gpu_beside_a_trainer(bm25_dir, monkeypatch):
  """A dense index's server runs a query encoder on JAX, on the trainer's GPU when they share
  a host: it starts JAX with preallocation off (not 75% of the device), unless the user set
  a memory option.  Checked at the moment the server starts JAX's backend."""
  from ragjax.parallel.backend import MEMORY_ENV
  from ragjax.retrieval import server

  class Started(Exception):
    pass
  seen = []

  def start(program, *a, **kw):
    seen.append({k: os.environ.get(k) for k in MEMORY_ENV})
    raise Started
  monkeypatch.setattr(server, "start", start)
  for k in MEMORY_ENV:
    monkeypatch.delenv(k, raising=False)
  with pytest.raises(Started):
    server.main(["--index", bm25_dir, "--backend", "exact"])
  assert seen[-1]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
  monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE")
  monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.2")            # the user's own choice
  with pytest.raises(Started):
    server.main(["--index", bm25_dir, "--backend", "exact"])
  assert seen[-1]["XLA_PYTHON_CLIENT_PREALLOCATE"] is None
  assert seen[-1]["XLA_CLIENT_MEM_FRACTION"] == "0.2"


def _listening_address(port):
  with open("/proc/net/tcp") as f:
    for line in f.readlines()[1:]:
      local, state = line.split()[1], line.split()[3]
      ip, p = local.split(":")
      if int(p, 16) == port and state == "0A":
        return socket.inet_ntoa(bytes.fromhex(ip)[::-1])
  return None


def test_server_speaks_search_r1_protocol(bm25_dir):
  in_proc = open_index(bm25_dir)
  with server(bm25_dir) as (url, _):
    port = int(url.rsplit(":", 1)[1])
    assert _listening_address(port) == "127.0.0.1"
    queries = ["Who founded the Varnholt guild of printing?", "Café Émile crêpes"]
    r = requests.post(url + "/retrieve", json={"queries": queries, "topk": 3, "return_scores": True}, timeout=30)
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["result", "timing"] and len(body["result"]) == 2   # clients read "result"
    assert body["timing"]["batch_queries"] == 2 and body["timing"]["total_s"] > 0
    ref = in_proc.search(queries, 3)
    for row, ref_row in zip(body["result"], ref):
      assert [set(x) for x in row] == [{"document", "score"}] * len(ref_row)
      assert [Hit(x["document"]["id"], x["document"]["contents"], x["score"]) for x in row] == \
          [Hit(h.id, h.contents, pytest.approx(h.score)) for h in ref_row]
    assert len(body["result"][0]) == 3
    assert body["result"][1][0]["document"]["contents"].startswith('"Café Émile"\n')
    # return_scores false: Search-R1 returns bare documents; topk omitted: server default (3).
    r = requests.post(url + "/retrieve", json={"queries": queries[:1]}, timeout=30)
    assert [set(d) for d in r.json()["result"][0]] == [{"id", "contents"}] * 3
    # The client gives exactly the in-process answer, and caches it.
    client = SearchClient(url, timeout=30)
    assert isinstance(client, Retriever)
    got = client.search(queries + [""], 3)
    assert got[:2] == [[Hit(h.id, h.contents, pytest.approx(h.score)) for h in row] for row in ref]
    assert got[2] == []
    client.search(queries, 3)
    assert client.cache.hits == 2
    # A bad request is not retried and says what was wrong.
    with pytest.raises(RetrievalError, match=r"rejected the request: HTTP 422.*topk must be in"):
      client._post(["x"], 5000)
    bad = requests.post(url + "/retrieve", json={"queries": "not a list"}, timeout=30)
    assert bad.status_code == 422


def test_client_survives_server_restart(bm25_dir):
  port = free_port()
  proc = start_server(bm25_dir, port)
  client = SearchClient(f"http://127.0.0.1:{port}", timeout=10, deadline=120, backoff=0.2,
                        max_backoff=1.0, cache_size=0)
  try:
    before = client.search(["Kelthune clockmaking"], 4)
  finally:
    stop_server(proc)
  holder = {}

  def restart():
    time.sleep(1.0)
    holder["proc"] = start_server(bm25_dir, port)
  t = threading.Thread(target=restart)
  t.start()
  try:
    after = client.search(["Kelthune clockmaking"], 4)     # issued while the server is down
  finally:
    t.join()
    if "proc" in holder:
      stop_server(holder["proc"])
  assert after == before and len(after[0]) == 4


def test_client_reports_timeout_and_refused_connection_clearly():
  with socket.socket() as s:          # accepts TCP connections but never answers
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    port = s.getsockname()[1]
    client = SearchClient(f"http://127.0.0.1:{port}", timeout=0.5, retries=1, backoff=0.05)
    t0 = time.time()
    with pytest.raises(RetrievalError) as e:
      client.search(["anything"], 3)
    assert time.time() - t0 < 5
    msg = str(e.value)
    assert f"http://127.0.0.1:{port}/retrieve" in msg and "2 attempts" in msg and "timed out after 0.5s" in msg
  dead = free_port()
  client = SearchClient(f"http://127.0.0.1:{dead}", timeout=1, retries=2, backoff=0.05)
  with pytest.raises(RetrievalError, match=rf"127.0.0.1:{dead}/retrieve failed after 3 attempts in 120s \(retriever.deadline\): connection failed"):
    client.search(["anything"], 3)


def test_client_deadline_bounds_the_wait_and_a_500_is_not_retried():
  from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
  from ragjax.errors import ServiceUnavailable
  dead = free_port()
  client = SearchClient(f"http://127.0.0.1:{dead}", timeout=1, retries=10_000, deadline=1.5,
                        backoff=0.05, max_backoff=0.2)
  t0 = time.time()
  with pytest.raises(ServiceUnavailable, match=r"in 1.5s \(retriever.deadline\)"):
    client.search(["anything"], 3)
  assert 1.0 < time.time() - t0 < 5 and client.retry_count > 3

  hits = []

  class Crash(BaseHTTPRequestHandler):
    def do_POST(self):          # an encoder crash: the same request fails the same way
      hits.append(1)
      self.send_response(500)
      self.end_headers()
      self.wfile.write(b"encoder crashed")

    def log_message(self, *a):
      pass

  server = ThreadingHTTPServer(("127.0.0.1", 0), Crash)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  try:
    client = SearchClient(f"http://127.0.0.1:{server.server_address[1]}", deadline=30)
    with pytest.raises(RetrievalError, match="rejected the request: HTTP 500") as e:
      client.search(["anything"], 3)
    assert not isinstance(e.value, ServiceUnavailable) and len(hits) == 1
  finally:
    server.shutdown()


def test_server_refuses_oversized_and_malformed_requests_with_4xx(bm25_dir):
  """Limits and bad bodies are 4xx with a message, never a 500; /health names no path."""
  limits = ("--max-queries", "8", "--max-query-chars", "60", "--max-topk", "5",
            "--max-body-bytes", "4096")
  with server(bm25_dir, None, *limits) as (url, _):
    def post(body):
      return requests.post(url + "/retrieve", data=body, timeout=30,
                           headers={"Content-Type": "application/json"})
    cases = [
        (json.dumps({"queries": ["q"] * 9}), 422, "9 queries in one request; the limit is 8"),
        (json.dumps({"queries": ["x" * 61]}), 422, "queries[0] has 61 characters; the limit is 60"),
        (json.dumps({"queries": ["q"], "topk": 6}), 422, "topk must be in [1, 5], got 6"),
        (json.dumps({"queries": ["q"], "topk": 0}), 422, "topk must be in [1, 5], got 0"),
        (json.dumps({"queries": ["q"], "topk": "3"}), 422, "got '3'"),
        (json.dumps({"queries": ["q"], "return_scores": "yes"}), 422, "'return_scores' must be"),
        (json.dumps({"queries": ["ok", 5]}), 422, "queries[1] is int, expected a string"),
        (json.dumps({"queries": "not a list"}), 422, "'queries' must be a list"),
        ("[1, 2]", 422, "must be a JSON object, got list"),
        ('{"queries": ["Qessa \\ud800 guild"]}', 422, "queries[0] holds a lone surrogate U+D800"),
        ("{not json", 400, "request body is not JSON"),
        (b'{"queries": ["caf\xe9"]}', 400, "request body is not UTF-8"),
        ("[" * 1900 + "]" * 1900, 400, "nested too deeply"),
        (json.dumps({"queries": ["q" * 50] * 80}), 413, "the limit is 4096 (--max-body-bytes)"),
    ]
    for body, status, says in cases:
      r = post(body)
      assert (r.status_code, says in r.json()["detail"]) == (status, True), (body[:60], r.text[:300])
    ok = post(json.dumps({"queries": ["Qessa astronomy"] * 8, "topk": 5}))     # at the limits
    assert ok.status_code == 200 and [len(x) for x in ok.json()["result"]] == [5] * 8
    r = requests.get(url + "/health", timeout=30)
    health = r.json()
    assert health["backend"] == "bm25" and health["passages"] == len(small_corpus())
    assert health["limits"]["max_queries"] == 8 and health["limits"]["max_topk"] == 5
    assert bm25_dir not in r.text and "/tmp" not in r.text


def test_server_on_port_0_prints_its_address_and_serves_no_docs_pages(bm25_dir):
  """`--port 0` takes any free port and prints the address (issue 46: services.chat_server and the
  proxy refused 0, this one took it and said nothing); FastAPI's /docs pages are not served."""
  import queue
  import subprocess
  import sys
  from _retrieval_helpers import REPO
  env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.Popen([sys.executable, "-m", "ragjax.retrieval.server", "--index", bm25_dir,
                           "--port", "0"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  lines: queue.Queue = queue.Queue()
  threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True).start()
  try:
    url, deadline = None, time.time() + 90
    while url is None and time.time() < deadline and proc.poll() is None:
      try:
        line = lines.get(timeout=1)
      except queue.Empty:
        continue
      if "listening on " in line:
        url = line.split("listening on ", 1)[1].strip()
    assert url and url.startswith("http://127.0.0.1:") and not url.endswith(":0"), url
    while not requests.get(url + "/health", timeout=5).ok:
      time.sleep(0.2)
    for path in ("/docs", "/redoc", "/openapi.json"):
      assert requests.get(url + path, timeout=5).status_code == 404, path
  finally:
    stop_server(proc)
