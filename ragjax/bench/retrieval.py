"""Retrieval benchmark: tuned ScaNN vs exact on 1M clustered vectors, resident memory in a fresh
process and its projection to 21M x 768, recall on real multi-hop questions, and (see
`ragjax.bench.retrieval_scale`) a 1M-passage build, encode throughput and server queries/s.

    python -m ragjax.bench.retrieval [--n 1000000] [--queries 1000] [--repeats 3]
        [--skip-synthetic] [--skip-memory] [--skip-text] [--skip-scale] [--encode]

1. Synthetic: N clustered unit vectors (Gaussian blobs around random centres, 384-d); queries are
   perturbed database points, split in half: `ragjax.retrieval.tune` sweeps leaves probed and
   re-scoring depth on the first half (exact top-10 from the JAX blocked matmul `ExactIndex`
   as ground truth) and picks the fastest setting meeting recall 0.95; recall@10 and queries/s
   are measured on the held-out half, for exact, ScaNN's untuned default and the tuned setting,
   in alternating rounds (best of --repeats; the machine is shared).  The index is built the
   way `build` builds one: trained on a seeded sample, rows added in streaming, re-scoring rows
   on disk.
2. Memory: a fresh process loads the index and runs the held-out queries; its anonymous resident
   bytes (what must stay in RAM) and file-backed ones (re-scoring pages the kernel may drop) are
   read from /proc/self/status, and queries/s measured with those pages evicted first (cold)
   and again (warm).  The same at 768-d on a smaller N, beside ScaNN's in-RAM int8 re-scoring
   copy (the previous design) built on the same vectors; both projected to 21M x 768.
3. Text (when ../shared/data is present): supporting-paragraph recall on the 31k-passage corpus
   for BM25, MiniLM exact and MiniLM ScaNN (tuned on a random half of the HotpotQA questions;
   top-10 agreement with exact on the other half and on 2Wiki).  The MiniLM embeddings are
   cached (tensorstore, resumable) under --cache-dir; --encode builds or resumes them.
4. Scale (`ragjax.bench.retrieval_scale`): passage encode throughput, the server's queries/s at
   batch 64 with its time split, and a 1M-passage build's peak memory.

Prints tables and one JSON line (last line of stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DATA = os.path.abspath(os.path.join(REPO, "..", "shared", "data"))
CORPUS = "corpus/derived_multihop_wiki_passages_31144.jsonl"
QUESTION_SETS = {"hotpotqa_1668": "flashrag_format/derived_hotpotqa_dev_with_context_1668.jsonl",
                 "2wiki_164": "2wikimultihopqa/derived_2wiki_dev_with_context_164.json"}
WIKI18 = (21_000_000, 768)


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


def perturbed_queries(db: np.ndarray, nq: int, seed: int = 1) -> np.ndarray:
  rng = np.random.default_rng(seed)
  dim = db.shape[1]
  q = db[rng.integers(0, len(db), nq)] + 0.6 / np.sqrt(dim) * rng.standard_normal((nq, dim), dtype=np.float32)
  return q / np.linalg.norm(q, axis=1, keepdims=True)


def best_of(fns: dict, repeats: int) -> dict:
  """{name: best seconds} running each fn once per round, rounds alternating, after a warm-up."""
  for fn in fns.values():
    fn()
  best = {name: float("inf") for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      t0 = time.perf_counter()
      fn()
      best[name] = min(best[name], time.perf_counter() - t0)
  return best


_RSS_PROBE = r"""
import json, os, sys, time
import numpy as np
import scann
from ragjax.retrieval.scann_index import ScannIndex

def status():
  out = {}
  for line in open("/proc/self/status"):
    key = line.split(":")[0]
    if key in ("VmRSS", "RssAnon", "RssFile"):
      out[key] = int(line.split()[1]) * 1024
  return out

directory, queries, leaves, reorder, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
q = np.load(queries)
before = status()
index = ScannIndex.load(directory)
loaded = status()
path = os.path.join(directory, "reorder.npy")
if index.reorder_vectors is not None:        # evict the re-scoring rows: the first pass reads the disk
  fd = os.open(path, os.O_RDONLY)
  os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
  os.close(fd)
t0 = time.perf_counter()
index.search(q, 10, leaves_to_search=leaves, reorder=reorder)
cold = time.perf_counter() - t0
warm = float("inf")
for _ in range(repeats):
  t0 = time.perf_counter()
  index.search(q, 10, leaves_to_search=leaves, reorder=reorder)
  warm = min(warm, time.perf_counter() - t0)
after = status()
print(json.dumps({"n": index.n, "dim": index.dim, "queries": len(q),
                  "anon_bytes": after["RssAnon"] - before["RssAnon"],
                  "loaded_anon_bytes": loaded["RssAnon"] - before["RssAnon"],
                  "file_bytes": after["RssFile"] - before["RssFile"],
                  "cold_qps": round(len(q) / cold, 1), "warm_qps": round(len(q) / warm, 1)}))
"""


def fresh_process_memory(directory: str, queries: np.ndarray, leaves: int, reorder: int,
                         scratch: str, repeats: int = 3) -> dict:
  """What a fresh process holds after loading the index at `directory` and searching `queries`."""
  qpath = os.path.join(scratch, "probe_queries.npy")
  np.save(qpath, queries)
  env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
  out = subprocess.run([sys.executable, "-c", _RSS_PROBE, directory, qpath, str(leaves), str(reorder),
                        str(repeats)], capture_output=True, text=True, env=env, check=True)
  res = json.loads(out.stdout.strip().splitlines()[-1])
  res["anon_bytes_per_vector"] = round(res["anon_bytes"] / res["n"], 1)
  res["file_bytes_per_vector"] = round(res["file_bytes"] / res["n"], 1)
  res["disk_bytes"] = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
  return res


def synthetic(n: int, dim: int, nq: int, k: int, out_dir: str, repeats: int) -> dict:
  from ragjax.retrieval.exact import ExactIndex
  from ragjax.retrieval.scann_index import ScannConfig, ScannIndex
  from ragjax.retrieval.tune import per_query_recall, split, tune
  t0 = time.time()
  clusters = max(100, n // 500)
  db, _ = clustered(n, dim, clusters=clusters, seed=0)
  queries = perturbed_queries(db, nq)
  gen_s = time.time() - t0
  exact = ExactIndex(db, block=32768)
  truth, _ = exact.search(queries, k, batch=nq)
  cfg = ScannConfig()
  sdir = os.path.join(out_dir, f"scann_synthetic_{n}x{dim}")
  t0 = time.time()
  index = ScannIndex.build_streaming(lambda a, b: db[a:b], n, dim, cfg, directory=sdir)
  build_s = time.time() - t0
  t0 = time.time()
  tuned = tune(index, queries, truth, k=k, target=0.95, holdout=0.5, repeats=repeats)
  tune_s = time.time() - t0
  _, held = split(nq, 0.5, 0)
  hq, ht = queries[held], truth[held]
  default_l, default_r = index.leaves_to_search, index.reorder_depth
  tl, tr = tuned["leaves_to_search"], tuned["reorder"]
  secs = best_of({
      "exact": lambda: exact.search(hq, k, batch=len(hq)),
      "scann_default": lambda: index.search(hq, k, leaves_to_search=default_l, reorder=default_r),
      "scann_tuned": lambda: index.search(hq, k, leaves_to_search=tl, reorder=tr)}, repeats)
  qps = {name: round(len(hq) / s, 1) for name, s in secs.items()}
  rec = {"scann_default": per_query_recall(index.search(hq, k, leaves_to_search=default_l,
                                                        reorder=default_r)[0], ht).mean(),
         "scann_tuned": per_query_recall(index.search(hq, k, leaves_to_search=tl, reorder=tr)[0], ht).mean()}
  num_leaves = index.num_leaves
  del exact, index      # unmapped here, so the probe's eviction of the re-scoring rows takes effect
  memory = fresh_process_memory(sdir, hq, tl, tr, out_dir, repeats)
  return {"n": n, "dim": dim, "queries": nq, "clusters": clusters, "gen_s": round(gen_s, 1),
          "scann_build_s": round(build_s, 1), "tune_s": round(tune_s, 1), "num_leaves": num_leaves,
          "scann_config": cfg.to_json(), "qps": qps,
          "default": {"leaves_to_search": default_l, "reorder": default_r,
                      "recall@10": round(float(rec["scann_default"]), 4),
                      "x_exact": round(qps["scann_default"] / qps["exact"], 1)},
          "tuned": {**{key: v for key, v in tuned.items() if key != "sweep"},
                    "recall@10_heldout": round(float(rec["scann_tuned"]), 4),
                    "x_exact": round(qps["scann_tuned"] / qps["exact"], 1)},
          "sweep": tuned["sweep"], "memory": memory}


def memory_768(n: int, out_dir: str, repeats: int, nq: int = 200) -> dict:
  """Disk re-scoring vs ScaNN's in-RAM int8 copy on the same n x 768 vectors, fresh processes."""
  from ragjax.retrieval.exact import ExactIndex
  from ragjax.retrieval.scann_index import ScannConfig, ScannIndex
  from ragjax.retrieval.tune import per_query_recall
  dim = WIKI18[1]
  db, _ = clustered(n, dim, clusters=max(100, n // 500), seed=2)
  queries = perturbed_queries(db, nq, seed=3)
  truth, _ = ExactIndex(db, block=32768).search(queries, 10, batch=nq)
  out = {"n": n, "dim": dim}
  for name, cfg in (("disk_bfloat16", ScannConfig()),
                    ("ram_int8", ScannConfig(reorder_store="ram", reorder_dtype="int8"))):
    d = os.path.join(out_dir, f"scann_{name}_{n}x{dim}")
    t0 = time.time()
    index = ScannIndex.build(db, cfg, directory=d)
    build_s = time.time() - t0
    leaves, depth = index.leaves_to_search, index.reorder_depth
    rec = per_query_recall(index.search(queries, 10)[0], truth).mean()
    del index
    out[name] = {"build_s": round(build_s, 1), "leaves_to_search": leaves, "reorder": depth,
                 "recall@10": round(float(rec), 4),
                 **fresh_process_memory(d, queries, leaves, depth, out_dir, repeats)}
  return out


def memory_projection(measured: dict, num_leaves_at: int, n: int = WIKI18[0], dim: int = WIKI18[1]) -> dict:
  """Scales measured anonymous resident bytes/vector to n x dim (linear in dim when measured at
  another dim: AH codes are dim / 4 bytes) plus the tree centroids (sqrt(n) x dim x 4 bytes)."""
  bpv = measured["anon_bytes"] / measured["n"] * dim / measured["dim"]
  tree = int(round(np.sqrt(n))) * dim * 4 if num_leaves_at > 1 else 0
  return {"bytes_per_vector": round(bpv, 1), "resident_gb": round((bpv * n + tree) / 1e9, 2),
          "reorder_file_gb": round(n * dim * 2 / 1e9, 1)}


def text_recall(cache_dir: str, encode: bool, repeats: int, k: int = 10, corpus: str = "",
                question_sets: dict | None = None, tag: str = "multihop31k") -> dict:
  """BM25 / MiniLM exact / MiniLM ScaNN recall; the ScaNN index is built and tuned with the
  user's commands (`build_index(..., "scann")` over the cached embeddings, then
  `python -m ragjax.retrieval.tune --queries <HotpotQA file>`), and its top-10 agreement with
  exact search is measured on the held-out half and on 2Wiki (questions of another dataset)."""
  from ragjax.retrieval import embed_store
  from ragjax.retrieval.bm25 import BM25Index
  from ragjax.retrieval.index import build_index, open_index, read_meta
  from ragjax.retrieval.recall import read_questions, recall_table
  from ragjax.retrieval.store import PassageStore
  from ragjax.retrieval.tune import per_query_recall, split
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

  def run(name, search):
    res = {}
    for qname, qs in questions.items():
      t0 = time.time()
      hits = search([q.question for q in qs])
      res[qname] = {"seconds": round(time.time() - t0, 2),
                    **{str(kk): v for kk, v in recall_table(qs, hits, (1, 3, k)).items()}}
    backends[name] = res

  run("bm25", lambda qs: store.hits(*bm25.search(qs, k)))
  progress = embed_store.read_progress(os.path.join(dense_dir, "embeddings"))
  complete = progress is not None and progress["done_rows"] == progress["n"]
  if not complete and not encode:
    done = 0 if progress is None else progress["done_rows"]
    out["minilm_skipped"] = (f"MiniLM embeddings of the corpus not cached ({done}/{len(store)} rows in "
                             f"{dense_dir}); rerun with --encode to build/resume them")
    out["backends"] = backends
    return out
  t0 = time.time()                        # encodes only what is missing, then builds ScaNN
  build_index(corpus, dense_dir, "scann", progress=not complete, chunk_rows=1024)
  out["minilm_scann_build_s"] = round(time.time() - t0, 1)
  tune_set = "hotpotqa_1668"
  env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
  t0 = time.time()
  r = subprocess.run([sys.executable, "-m", "ragjax.retrieval.tune", "--index", dense_dir, "--queries",
                      question_sets[tune_set], "--repeats", str(repeats)],
                     capture_output=True, text=True, env=env)
  if r.returncode != 0:
    raise RuntimeError(f"tune failed: {r.stderr[-2000:]}")
  out["tune_s"] = round(time.time() - t0, 1)
  out["tune_stdout"] = r.stdout.strip().splitlines()[:-1]
  meta = read_meta(dense_dir)
  out["tuned"] = meta["search"]["tuned"]
  out["minilm_scann_leaves"] = meta["scann_num_leaves"]
  scann = open_index(dense_dir)                         # searches with the tuned setting
  exact = open_index(dense_dir, backend="exact", encoder=scann.encoder)
  default = (scann.index.config.leaves_to_search(scann.index.num_leaves), scann.index.config.reorder)
  setting = (scann.index.leaves_to_search, scann.index.reorder_depth)
  qvecs = {qn: scann.encode([q.question for q in qs]) for qn, qs in questions.items()}
  truth = {qn: exact.index.search(v, k)[0] for qn, v in qvecs.items()}
  _, held = split(len(qvecs[tune_set]), 0.5, 0)         # the tuner's held-out half
  agreement = {}
  for name, (leaves, depth) in (("default", default), ("tuned", setting)):
    per = {}
    for qn, v in qvecs.items():
      rows = held if qn == tune_set else np.arange(len(v))
      got = scann.index.search(v[rows], k, leaves_to_search=leaves, reorder=depth)[0]
      per[qn + ("_heldout" if qn == tune_set else "")] = round(float(per_query_recall(got, truth[qn][rows]).mean()), 4)
    agreement[name] = {"leaves_to_search": leaves, "reorder": depth, **per}
  out["top10_agreement_with_exact"] = agreement
  run("minilm_exact", lambda qs: exact.search(qs, k))
  run("minilm_scann_tuned", lambda qs: scann.search(qs, k))
  out["backends"] = backends
  out["index_dir"] = dense_dir
  return out


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--n", type=int, default=1_000_000)
  ap.add_argument("--dim", type=int, default=384)
  ap.add_argument("--queries", type=int, default=1000, help="synthetic queries (half tune, half held out)")
  ap.add_argument("--n768", type=int, default=200_000, help="vectors for the 768-d memory comparison")
  ap.add_argument("--repeats", type=int, default=3, help="timing rounds, best of")
  ap.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/ragjax"))
  ap.add_argument("--skip-synthetic", action="store_true")
  ap.add_argument("--skip-memory", action="store_true")
  ap.add_argument("--skip-text", action="store_true")
  ap.add_argument("--skip-scale", action="store_true")
  ap.add_argument("--scale-passages", type=int, default=1_000_000, help="passages in the bounded-memory build")
  ap.add_argument("--encode", action="store_true", help="encode (or resume) the 31k corpus if not cached")
  args = ap.parse_args(argv)
  os.makedirs(args.cache_dir, exist_ok=True)
  result: dict = {"bench": "retrieval", "date": time.strftime("%Y-%m-%d")}
  if not args.skip_synthetic:
    syn = synthetic(args.n, args.dim, args.queries, 10, args.cache_dir, args.repeats)
    result["synthetic"] = syn
    result["projection_from_%d" % args.dim] = memory_projection(syn["memory"], syn["num_leaves"])
    print(f"\n1. ScaNN vs exact, {syn['n']:,} clustered {syn['dim']}-d vectors, {syn['num_leaves']} leaves; "
          f"build {syn['scann_build_s']} s (sample + streaming add), tune {syn['tune_s']} s")
    print(f"{'leaves':>7} {'depth':>6} {'recall@10':>10} {'lower bd':>9}   (tuning half)")
    for row in syn["sweep"]:
      print(f"{row['leaves_to_search']:>7} {row['reorder']:>6} {row['recall']:>10.4f} {row['lower_bound']:>9.4f}")
    d, t = syn["default"], syn["tuned"]
    print(f"held-out {args.queries // 2} queries: exact {syn['qps']['exact']} q/s; default "
          f"({d['leaves_to_search']} leaves, depth {d['reorder']}) recall@10 {d['recall@10']} at "
          f"{d['x_exact']}x exact; tuned ({t['leaves_to_search']} leaves, depth {t['reorder']}) "
          f"recall@10 {t['recall@10_heldout']} at {t['x_exact']}x exact")
    m = syn["memory"]
    print(f"fresh process: {m['anon_bytes_per_vector']} B/vector anonymous, {m['file_bytes_per_vector']} "
          f"B/vector file pages; cold {m['cold_qps']} q/s, warm {m['warm_qps']} q/s")
  if not args.skip_memory:
    mem = memory_768(args.n768, args.cache_dir, args.repeats)
    result["memory_768"] = mem
    leaves = int(round(np.sqrt(args.n768)))
    result["projection_21m_768"] = {name: memory_projection(mem[name], leaves)
                                    for name in ("disk_bfloat16", "ram_int8")}
    print(f"\n2. Memory at {mem['n']:,} x 768 (fresh process), projected to 21M x 768:")
    for name in ("disk_bfloat16", "ram_int8"):
      m, p = mem[name], result["projection_21m_768"][name]
      print(f"{name:>13}: recall@10 {m['recall@10']}, {m['anon_bytes_per_vector']} B/vector anonymous "
            f"-> {p['resident_gb']} GB; warm {m['warm_qps']} q/s, cold {m['cold_qps']} q/s")
  if not args.skip_text:
    if os.path.isdir(SHARED_DATA):
      text = text_recall(args.cache_dir, args.encode, args.repeats)
      result["text"] = text
      print("\n3. Supporting-paragraph recall on the 31k multi-hop corpus")
      print(f"{'backend':>18} {'questions':>14} {'R@1':>7} {'R@3':>7} {'R@10':>7} {'ans@10':>7}")
      for b, per in text["backends"].items():
        for qn, row in per.items():
          print(f"{b:>18} {qn:>14} {row['1']['support_recall']:>7.4f} {row['3']['support_recall']:>7.4f} "
                f"{row['10']['support_recall']:>7.4f} {row['10']['answer_recall']:>7.4f}")
      if "top10_agreement_with_exact" in text:
        print("MiniLM ScaNN top-10 agreement with exact:", text["top10_agreement_with_exact"])
      if "minilm_skipped" in text:
        print("MiniLM rows skipped:", text["minilm_skipped"])
    else:
      result["text"] = {"skipped": f"{SHARED_DATA} not present"}
  if not args.skip_scale:
    from ragjax.bench import retrieval_scale
    text_index = (result.get("text") or {}).get("index_dir")
    result["scale"] = retrieval_scale.run(args.cache_dir, args.repeats, args.scale_passages, text_index)
  print(json.dumps(result))


if __name__ == "__main__":
  main()
