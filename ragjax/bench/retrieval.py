"""Retrieval benchmark: ScaNN vs exact on >= 1M clustered vectors, recall on real multi-hop
questions, and the memory a 21M x 768 index would need.

    python -m ragjax.bench.retrieval [--n 1000000] [--queries 500] [--skip-text] [--encode]

1. Synthetic: N clustered unit vectors (Gaussian blobs around random centres, 384-d).  Exact
   top-10 with the JAX blocked matmul (`ExactIndex`) is the ground truth; ScaNN is built once
   with the default build settings and swept over search-time settings (leaves probed, reorder
   depth); recall@10 and queries/s are measured in the same run on the same machine.
2. Text (when ../shared/data is present): recall@1/3/10 of supporting paragraphs on the 31k
   passage corpus for HotpotQA (1668) and 2Wiki (164) questions, for BM25, MiniLM-exact and
   MiniLM-ScaNN.  MiniLM embeddings are cached (tensorstore, resumable) under --cache-dir;
   without a finished cache the MiniLM rows are skipped unless --encode is given.
3. Projected memory of a 21M x 768 index with the chosen ScaNN settings, next to exact float32.

Prints tables and one JSON line (last line of stdout).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DATA = os.path.abspath(os.path.join(REPO, "..", "shared", "data"))
CORPUS = "corpus/derived_multihop_wiki_passages_31144.jsonl"
QUESTION_SETS = {"hotpotqa_1668": "flashrag_format/derived_hotpotqa_dev_with_context_1668.jsonl",
                 "2wiki_164": "2wikimultihopqa/derived_2wiki_dev_with_context_164.json"}


def clustered(n: int, dim: int, clusters: int, seed: int, spread: float = 0.6):
  """Unit vectors: random unit centre + isotropic noise of norm ~spread, renormalised."""
  rng = np.random.default_rng(seed)
  centres = rng.standard_normal((clusters, dim), dtype=np.float32)
  centres /= np.linalg.norm(centres, axis=1, keepdims=True)
  out = np.empty((n, dim), np.float32)
  step = 200_000
  for s in range(0, n, step):
    m = min(step, n - s)
    x = centres[rng.integers(0, clusters, m)]
    x += rng.standard_normal((m, dim), dtype=np.float32) * (spread / np.sqrt(dim))
    out[s:s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
  return out, centres


_RSS_PROBE = """
import sys
def rss():
  for line in open("/proc/self/status"):
    if line.startswith("VmRSS:"):
      return int(line.split()[1]) * 1024
from ragjax.retrieval.scann_index import ScannIndex
import scann, numpy as np
before = rss()
index = ScannIndex.load(sys.argv[1])
index.search(np.zeros((1, index.dim), np.float32), 10)
print(rss() - before)
"""


def _loaded_rss(directory: str) -> int:
  """Resident bytes a fresh process gains by loading (and querying) the serialized searcher."""
  import subprocess
  import sys
  env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
  out = subprocess.run([sys.executable, "-c", _RSS_PROBE, directory], capture_output=True, text=True,
                       env=env, check=True)
  return int(out.stdout.strip().splitlines()[-1])


def recall_at(rows, ref_rows) -> float:
  k = ref_rows.shape[1]
  return float(np.mean([len(set(a[:k]) & set(b)) / k for a, b in zip(rows, ref_rows)]))


def timed(fn, *a, repeat: int = 1, **kw):
  fn(*a, **kw)                               # warm-up (compile / caches)
  t0 = time.perf_counter()
  for _ in range(repeat):
    out = fn(*a, **kw)
  return out, (time.perf_counter() - t0) / repeat


def synthetic(n: int, dim: int, nq: int, k: int, out_dir: str) -> dict:
  from ragjax.retrieval.exact import ExactIndex
  from ragjax.retrieval.scann_index import ScannConfig, ScannIndex
  t0 = time.time()
  db, centres = clustered(n, dim, clusters=max(100, n // 500), seed=0)
  queries, _ = clustered(nq, dim, clusters=max(100, n // 500), seed=0)   # same centres (seed), new points
  rng = np.random.default_rng(1)
  queries = db[rng.integers(0, n, nq)] + 0.6 / np.sqrt(dim) * rng.standard_normal((nq, dim), dtype=np.float32)
  queries /= np.linalg.norm(queries, axis=1, keepdims=True)
  gen_s = time.time() - t0

  exact = ExactIndex(db, block=32768)
  (ref_rows, _), exact_s = timed(exact.search, queries, k, batch=nq)
  exact_qps = nq / exact_s
  del exact

  cfg = ScannConfig()
  t0 = time.time()
  index = ScannIndex.build(db, cfg, k=k)
  build_s = time.time() - t0
  sdir = os.path.join(out_dir, "scann_synthetic")
  index.save(sdir)
  artifact = {os.path.basename(p): os.path.getsize(p) for p in glob.glob(os.path.join(sdir, "*"))}
  loaded_rss = _loaded_rss(sdir)
  leaves = index.num_leaves
  default_leaves = cfg.leaves_to_search(leaves)
  sweep = []
  for frac in (0.01, 0.02, 0.05, 0.1, 0.2):
    for reorder in (10, 50, 100, 200, 400):   # 10 = k: no rescoring, i.e. AH codes only
      lts = max(1, round(leaves * frac))
      (rows, _), s = timed(index.search, queries, k, leaves_to_search=lts, reorder=reorder, repeat=2)
      sweep.append({"leaves_to_search": lts, "frac": frac, "reorder": reorder,
                    "recall@10": round(recall_at(rows, ref_rows), 4), "qps": round(nq / s, 1),
                    "qps_ratio": round((nq / s) / exact_qps, 1)})
  (rows, _), s = timed(index.search, queries, k, repeat=2)
  default = {"leaves_to_search": default_leaves, "reorder": cfg.reorder,
             "recall@10": round(recall_at(rows, ref_rows), 4), "qps": round(nq / s, 1),
             "qps_ratio": round((nq / s) / exact_qps, 1)}
  return {"n": n, "dim": dim, "queries": nq, "clusters": max(100, n // 500), "gen_s": round(gen_s, 1),
          "exact_qps": round(exact_qps, 1), "scann_build_s": round(build_s, 1), "num_leaves": leaves,
          "scann_config": cfg.to_json(), "default": default, "sweep": sweep, "artifact_bytes": artifact,
          "loaded_rss_bytes": loaded_rss}


def memory_projection(syn: dict, n: int = 21_000_000, dim: int = 768) -> dict:
  """Scales the measured resident bytes/vector of the loaded synthetic index to n x dim.

  Nearly all of a ScaNN index's size is per-vector and linear in the dimension (AH codes, int8
  reorder copy), so bytes/vector scale with dim; the tree adds num_leaves x dim x 4 bytes.
  """
  from ragjax.retrieval.scann_index import ScannConfig, ScannIndex
  cfg = ScannConfig(**syn["scann_config"])
  n0, d0 = syn["n"], syn["dim"]
  resident_bpv = syn["loaded_rss_bytes"] / n0
  disk = syn["artifact_bytes"]
  disk_bpv = sum(disk.values()) / n0
  leaves = cfg.leaves_for(n)
  tree = leaves * dim * 4
  exact = n * dim * 4
  proj_bpv = resident_bpv * dim / d0
  total = proj_bpv * n + tree
  # Without the int8 reorder copy (recall: the sweep's reorder=10 rows) the index keeps AH codes only.
  ah_bpv = (syn["loaded_rss_bytes"] - disk.get("int8_dataset.npy", 0)) / n0 * dim / d0
  ah_only = ah_bpv * n + tree
  return {"n": n, "dim": dim, "exact_float32_gb": round(exact / 1e9, 1),
          "measured_resident_bytes_per_vector_at_%d" % d0: round(resident_bpv, 1),
          "measured_disk_bytes_per_vector_at_%d" % d0: round(disk_bpv, 1),
          "projected_bytes_per_vector": round(proj_bpv, 1),
          "formula_bytes_per_vector": ScannIndex.bytes_per_vector(dim, cfg),
          "scann_total_gb": round(total / 1e9, 2),
          "scann_without_reorder_copy_gb": round(ah_only / 1e9, 2),
          "ratio_vs_exact": round(exact / total, 1), "num_leaves": leaves}


def text_recall(cache_dir: str, encode: bool, k: int = 10, corpus: str = "",
                question_sets: dict | None = None, tag: str = "multihop31k") -> dict:
  from ragjax.retrieval import embed_store
  from ragjax.retrieval.bm25 import BM25Index
  from ragjax.retrieval.exact import ExactIndex
  from ragjax.retrieval.index import build_index
  from ragjax.retrieval.recall import read_questions, recall_table
  from ragjax.retrieval.scann_index import ScannConfig, ScannIndex
  from ragjax.retrieval.store import PassageStore
  corpus = corpus or os.path.join(SHARED_DATA, CORPUS)
  question_sets = question_sets or {n: os.path.join(SHARED_DATA, p) for n, p in QUESTION_SETS.items()}
  out: dict = {"corpus": corpus}
  bm25_dir = os.path.join(cache_dir, f"{tag}_bm25")
  dense_dir = os.path.join(cache_dir, f"{tag}_minilm")
  if not os.path.exists(os.path.join(bm25_dir, "index.json")):
    t0 = time.time()
    build_index(corpus, bm25_dir, "bm25", progress=False)
    out["bm25_build_s"] = round(time.time() - t0, 1)
  store = PassageStore(bm25_dir)
  bm25 = BM25Index.load(os.path.join(bm25_dir, "bm25"))
  questions = {name: read_questions(path) for name, path in question_sets.items()}
  backends: dict = {}

  def run(name, rows_fn):
    res = {}
    for qname, qs in questions.items():
      t0 = time.time()
      rows, scores = rows_fn(qs)
      hits = store.hits(rows, scores)
      res[qname] = {"seconds": round(time.time() - t0, 2),
                    **{str(kk): v for kk, v in recall_table(qs, hits, (1, 3, k)).items()}}
    backends[name] = res

  run("bm25", lambda qs: bm25.search([q.question for q in qs], k))
  progress = embed_store.read_progress(os.path.join(dense_dir, "embeddings"))
  complete = progress is not None and progress["done_rows"] == progress["n"]
  if not complete and encode:
    build_index(corpus, dense_dir, "exact", progress=True, chunk_rows=1024)
    complete = True
  if complete:
    from ragjax.retrieval.index import EncoderSpec
    emb = embed_store.load_embeddings(os.path.join(dense_dir, "embeddings"))
    dense_store = PassageStore(dense_dir)
    assert dense_store.ids() == store.ids(), "dense and BM25 stores disagree on row order"
    encoder = EncoderSpec(batch_size=64).load()
    qvecs = {qn: encoder.encode([q.question for q in qs], kind="query") for qn, qs in questions.items()}
    exact = ExactIndex(emb)
    t0 = time.time()
    scann = ScannIndex.build(emb, ScannConfig())
    out["minilm_scann_build_s"] = round(time.time() - t0, 1)
    out["minilm_scann_leaves"] = scann.num_leaves
    lookup = {id(qs): qn for qn, qs in questions.items()}
    run("minilm_exact", lambda qs: exact.search(qvecs[lookup[id(qs)]], k))
    run("minilm_scann", lambda qs: scann.search(qvecs[lookup[id(qs)]], k))
    out["minilm_scann_vs_exact_recall@10"] = {
        qn: round(recall_at(scann.search(v, k)[0], exact.search(v, k)[0]), 4) for qn, v in qvecs.items()}
  else:
    done = 0 if progress is None else progress["done_rows"]
    out["minilm_skipped"] = (f"MiniLM embeddings of the corpus not cached ({done}/{len(store)} rows in "
                             f"{dense_dir}); rerun with --encode to build/resume them")
  out["backends"] = backends
  return out


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--n", type=int, default=1_000_000)
  ap.add_argument("--dim", type=int, default=384)
  ap.add_argument("--queries", type=int, default=500)
  ap.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/ragjax"))
  ap.add_argument("--skip-synthetic", action="store_true")
  ap.add_argument("--skip-text", action="store_true")
  ap.add_argument("--encode", action="store_true", help="encode (or resume) the 31k corpus if not cached")
  args = ap.parse_args(argv)
  os.makedirs(args.cache_dir, exist_ok=True)
  result: dict = {"bench": "retrieval"}
  if not args.skip_synthetic:
    syn = synthetic(args.n, args.dim, args.queries, 10, args.cache_dir)
    result["synthetic"] = syn
    result["memory_21m_768"] = memory_projection(syn)
    print(f"\n1. ScaNN vs exact, {syn['n']:,} clustered {syn['dim']}-d vectors, {syn['queries']} queries, "
          f"exact {syn['exact_qps']} q/s, ScaNN build {syn['scann_build_s']} s, {syn['num_leaves']} leaves")
    print(f"{'leaves':>7} {'reorder':>8} {'recall@10':>10} {'q/s':>9} {'x exact':>8}")
    for row in syn["sweep"]:
      print(f"{row['leaves_to_search']:>7} {row['reorder']:>8} {row['recall@10']:>10.4f} {row['qps']:>9.1f} "
            f"{row['qps_ratio']:>8.1f}")
    d = syn["default"]
    print(f"default: leaves {d['leaves_to_search']} reorder {d['reorder']}: recall@10 {d['recall@10']}, "
          f"{d['qps']} q/s = {d['qps_ratio']}x exact")
    m = result["memory_21m_768"]
    print(f"\n3. 21M x 768: exact float32 {m['exact_float32_gb']} GB; ScaNN (AH + int8 reorder) "
          f"{m['scann_total_gb']} GB ({m['projected_bytes_per_vector']} B/vector, {m['ratio_vs_exact']}x smaller); "
          f"AH codes only {m['scann_without_reorder_copy_gb']} GB")
  if not args.skip_text:
    if os.path.isdir(SHARED_DATA):
      text = text_recall(args.cache_dir, args.encode)
      result["text"] = text
      print("\n2. Supporting-paragraph recall on the 31k multi-hop corpus")
      print(f"{'backend':>14} {'questions':>14} {'R@1':>7} {'R@3':>7} {'R@10':>7} {'ans@10':>7}")
      for b, per in text["backends"].items():
        for qn, row in per.items():
          print(f"{b:>14} {qn:>14} {row['1']['support_recall']:>7.4f} {row['3']['support_recall']:>7.4f} "
                f"{row['10']['support_recall']:>7.4f} {row['10']['answer_recall']:>7.4f}")
      if "minilm_scann_vs_exact_recall@10" in text:
        print("MiniLM ScaNN top-10 vs exact top-10:", text["minilm_scann_vs_exact_recall@10"])
      if "minilm_skipped" in text:
        print("MiniLM rows skipped:", text["minilm_skipped"])
    else:
      result["text"] = {"skipped": f"{SHARED_DATA} not present"}
  print(json.dumps(result))


if __name__ == "__main__":
  main()
