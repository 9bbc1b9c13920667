"""Building and serving at scale on this CPU (part 4 of `python -m ragjax.bench.retrieval`).

    python -m ragjax.bench.retrieval_scale [--index DIR] [--passages 1000000] [--repeats 3]

1. Encode throughput: MiniLM passages/s on passages of the served corpus, the build's encoder
   (batch 64, bucketed widths), timed after a warm-up pass compiled its buckets.
2. Server: `python -m ragjax.retrieval.server` on the tuned MiniLM ScaNN index (--index, e.g. the
   31k corpus from part 3), requests of 64 distinct questions; queries/s and the mean time split
   from each reply's "timing", with 1 client and with 4 concurrent clients, beside the same
   batches searched in process (no HTTP), rounds alternating (best of --repeats).  The server
   runs with --cache-size 0 so every query is encoded; a second server with the default cache
   answers the same questions twice (the second pass from the cache by query text).
3. Bounded memory: a synthetic corpus of --passages passages (jsonl) built into a ScaNN index by
   the real command (`python -m ragjax.retrieval.build`) with a tiny random BERT (1 layer,
   32-d, MiniLM's tokenizer) so that a million passages encode in minutes on two cores; the
   build process's peak resident memory (anonymous and total, sampled from /proc) at a quarter
   and at all of the passages.  The pipeline streams: store, encode chunks, ScaNN sample + add.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import requests

from ragjax.bench import serving

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUESTIONS = os.path.join(REPO, "..", "shared", "data", "flashrag_format",
                         "derived_hotpotqa_dev_with_context_1668.jsonl")


def encode_throughput(index_dir: str, repeats: int, passages: int = 512) -> dict:
  from ragjax.retrieval.index import EncoderSpec, read_meta
  from ragjax.retrieval.store import PassageStore
  store = PassageStore(index_dir)
  texts = store.contents(list(range(min(passages, len(store)))))
  encoder = EncoderSpec(**{**read_meta(index_dir)["encoder"], "batch_size": 64}).load()
  encoder.encode(texts, kind="passage")                  # compiles every width bucket it needs
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    encoder.encode(texts, kind="passage")
    best = min(best, time.perf_counter() - t0)
  return {"passages": len(texts), "passages_per_s": round(len(texts) / best, 1),
          "mean_tokens": round(float(encoder.tokenize(texts)[1].sum(1).mean()), 1)}


def _serve_pass(url: str, batches: list[list[str]], clients: int) -> tuple[float, list[dict]]:
  """Wall seconds for `clients` threads to send all `batches` (round-robin), and the timings."""
  timings: list[dict] = []
  lock = threading.Lock()

  def client(mine):
    session = requests.Session()
    for batch in mine:
      r = session.post(url + "/retrieve", json={"queries": batch, "topk": 10}, timeout=600)
      r.raise_for_status()
      with lock:
        timings.append(r.json()["timing"])
  threads = [threading.Thread(target=client, args=(batches[i::clients],)) for i in range(clients)]
  t0 = time.perf_counter()
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  return time.perf_counter() - t0, timings


def _mean_split(timings: list[dict]) -> dict:
  keys = ("queue_s", "encode_s", "search_s", "fetch_s", "total_s")
  out = {k: round(float(np.mean([t[k] for t in timings])), 4) for k in keys}
  out["mean_batch_queries"] = round(float(np.mean([t["batch_queries"] for t in timings])), 1)
  return out


def server_throughput(index_dir: str, repeats: int, batch: int = 64, batches: int = 8) -> dict:
  from ragjax.retrieval.index import open_index
  from ragjax.retrieval.tune import read_queries
  texts = list(dict.fromkeys(read_queries(QUESTIONS)))[:batch * batches]
  groups = [texts[i:i + batch] for i in range(0, len(texts), batch)]
  in_proc = open_index(index_dir)
  proc, url = serving.start("ragjax.retrieval.server", "--index", index_dir, "--cache-size", "0")
  try:
    runs: dict = {}

    def in_process():
      for g in groups:
        in_proc.search(g, 10)
    for name in ("in_process", "server_1_client", "server_4_clients"):
      runs[name] = {"seconds": float("inf")}
    in_process()                                         # warm-up (compiles the buckets)
    _serve_pass(url, groups, 1)
    for _ in range(repeats):
      t0 = time.perf_counter()
      in_process()
      runs["in_process"]["seconds"] = min(runs["in_process"]["seconds"], time.perf_counter() - t0)
      for name, clients in (("server_1_client", 1), ("server_4_clients", 4)):
        secs, timings = _serve_pass(url, groups, clients)
        if secs < runs[name]["seconds"]:
          runs[name] = {"seconds": secs, "split": _mean_split(timings)}
    health = requests.get(url + "/health", timeout=10).json()
  finally:
    serving.stop(proc)
  for r in runs.values():
    r["qps"] = round(len(texts) / r["seconds"], 1)
    r["seconds"] = round(r["seconds"], 2)
  proc, url = serving.start("ragjax.retrieval.server", "--index", index_dir)  # cache by query text
  try:
    first, t_first = _serve_pass(url, groups, 1)
    second, t_second = _serve_pass(url, groups, 1)
  finally:
    serving.stop(proc)
  runs["server_cached"] = {"first_pass_qps": round(len(texts) / first, 1),
                           "second_pass_qps": round(len(texts) / second, 1),
                           "second_pass_split": _mean_split(t_second),
                           "second_pass_cached": int(sum(t["cached"] for t in t_second))}
  return {"queries": len(texts), "batch": batch, "search": health.get("search"), **runs}


def _tiny_encoder(directory: str) -> str:
  """A random 1-layer, 32-d BERT with MiniLM's tokenizer (HF layout), saved once."""
  if os.path.exists(os.path.join(directory, "config.json")):
    return directory
  import torch
  from transformers import BertConfig, BertModel
  from ragjax.models.encoder import default_minilm_dir
  torch.manual_seed(0)
  minilm = default_minilm_dir()
  model = BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=64, max_position_embeddings=512))
  model.save_pretrained(directory)
  for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
    if os.path.exists(os.path.join(minilm, name)):
      shutil.copy(os.path.join(minilm, name), directory)
  return directory


_WORDS = ("river mountain city guild trade king queen battle treaty harbour castle valley "
          "village church bridge market winter summer council archive railway island forest "
          "founded born died built ruled crossed signed opened closed named").split()


def synthetic_corpus(path: str, n: int, seed: int = 0) -> str:
  """n FlashRAG records of ~40 words, written in blocks (never all in memory)."""
  if os.path.exists(path):
    return path
  rng = np.random.default_rng(seed)
  words = np.array(_WORDS)
  with open(path + ".tmp", "w") as f:
    for a in range(0, n, 50_000):
      m = min(50_000, n - a)
      picks = words[rng.integers(0, len(words), (m, 40))]
      f.write("".join(json.dumps({"id": f"s{a + i}", "contents": f'"Title {a + i}"\n' + " ".join(row)}) + "\n"
                      for i, row in enumerate(picks)))
  os.replace(path + ".tmp", path)
  return path


def _peak_memory_build(args: list[str]) -> dict:
  """Runs the build command, sampling /proc/<pid>/status: peak anonymous and total resident."""
  proc = subprocess.Popen([sys.executable, "-m", "ragjax.retrieval.build", *args], env=serving.child_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  peak = {"RssAnon": 0, "VmHWM": 0, "RssFile": 0}
  t0 = time.time()
  while proc.poll() is None:
    try:
      for line in open(f"/proc/{proc.pid}/status"):
        key = line.split(":")[0]
        if key in peak:
          peak[key] = max(peak[key], int(line.split()[1]) * 1024)
    except OSError:
      pass
    time.sleep(0.2)
  out, err = proc.communicate()
  if proc.returncode != 0:
    raise RuntimeError(f"build failed: {err[-2000:]}")
  return {"seconds": round(time.time() - t0, 1), "peak_anon_mb": round(peak["RssAnon"] / 2**20, 1),
          "peak_rss_mb": round(peak["VmHWM"] / 2**20, 1), "peak_file_mb": round(peak["RssFile"] / 2**20, 1),
          "meta": json.loads(out.strip().splitlines()[-1])}


def bounded_build(cache_dir: str, passages: int) -> dict:
  work = os.path.join(cache_dir, "scale_build")
  os.makedirs(work, exist_ok=True)
  encoder = _tiny_encoder(os.path.join(work, "tiny_bert"))
  out = {}
  for n in (passages // 4, passages):
    corpus = synthetic_corpus(os.path.join(work, f"corpus_{n}.jsonl"), n)
    index = os.path.join(work, f"index_{n}")
    shutil.rmtree(index, ignore_errors=True)
    res = _peak_memory_build(["--corpus", corpus, "--out", index, "--encoder", encoder,
                              "--max-length", "64", "--batch-size", "512", "--chunk-rows", "16384",
                              "--no-progress"])
    meta = res.pop("meta")
    res.update({"passages": meta["n"], "dim": meta["dim"], "num_leaves": meta["scann_num_leaves"],
                "passages_per_s": round(meta["n"] / res["seconds"], 1),
                "corpus_mb": round(os.path.getsize(corpus) / 2**20, 1),
                "embeddings_mb": round(sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in
                                           os.walk(os.path.join(index, "embeddings")) for f in fs) / 2**20, 1)})
    out[str(n)] = res
  return out


def run(cache_dir: str, repeats: int, passages: int, index_dir: str | None) -> dict:
  result: dict = {}
  if index_dir and os.path.exists(os.path.join(index_dir, "index.json")):
    result["encode"] = encode_throughput(index_dir, repeats)
    print(f"\n4a. MiniLM passage encoding: {result['encode']['passages_per_s']} passages/s "
          f"({result['encode']['passages']} passages, mean {result['encode']['mean_tokens']} tokens)")
    result["server"] = server_throughput(index_dir, repeats)
    s = result["server"]
    print(f"4b. Server, {s['queries']} questions in requests of {s['batch']} (tuned: {s['search']}):")
    for name in ("in_process", "server_1_client", "server_4_clients"):
      print(f"   {name:>17}: {s[name]['qps']} q/s  {s[name].get('split', '')}")
    print(f"   cache by text: first pass {s['server_cached']['first_pass_qps']} q/s, second "
          f"{s['server_cached']['second_pass_qps']} q/s ({s['server_cached']['second_pass_cached']} cached)")
  else:
    result["server"] = {"skipped": "no MiniLM index (run the text part with --encode first)"}
  result["bounded_build"] = bounded_build(cache_dir, passages)
  print("4c. Build with streaming (tiny BERT), peak memory of the build process:")
  for n, r in result["bounded_build"].items():
    print(f"   {int(n):>9,} passages: {r['seconds']} s ({r['passages_per_s']} passages/s), peak anonymous "
          f"{r['peak_anon_mb']} MB, peak resident {r['peak_rss_mb']} MB (corpus {r['corpus_mb']} MB)")
  return result


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--index", default=None, help="a tuned MiniLM ScaNN index (part 3 of the bench)")
  ap.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/ragjax"))
  ap.add_argument("--passages", type=int, default=1_000_000)
  ap.add_argument("--repeats", type=int, default=3)
  args = ap.parse_args(argv)
  print(json.dumps(run(args.cache_dir, args.repeats, args.passages, args.index)))


if __name__ == "__main__":
  main()
