"""Bounded soak of the two servers a run depends on, with concurrent clients and hostile requests.

    python -m ragjax.bench.soak [--retrieve-requests 2000] [--chat-requests 200] [--clients 16]

1. `python -m ragjax.retrieval.server` over a BM25 index of the synthetic world's corpus;
2. `python -m ragjax.services.chat_server` over a small random Qwen2-shaped checkpoint
   (`bench.services.make_checkpoint`).

Each server runs in its own process on 127.0.0.1 and gets a fixed number of requests from
`--clients` threads at once.  One request in `--hostile-every` is hostile (an oversized
`topk` or `max_tokens`, a 1 MB query, thousands of queries, malformed JSON, a wrong type) and
must be refused with a 4xx; every other request must succeed.  Prints one JSON line per server:
requests, served, refused as expected, errors (anything else: a 5xx, a dropped connection, a
4xx for a good request, a 2xx for a hostile one), p50 / p99 latency of the good requests, and
the server's resident memory before and after.  Exit status 1 if any error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np

from ragjax.bench import serving


def hostile_retrieve(i: int) -> tuple[object, bool]:
  """(body, is_json) of the i-th hostile /retrieve request."""
  kinds = [({"queries": ["q"], "topk": 10 ** 6}, True),
           ({"queries": ["x" * (1 << 20)]}, True),
           ({"queries": ["q"] * 10_000}, True),
           ('{"queries": ["unclosed"', False),
           ({"queries": "not a list"}, True),
           ({"queries": [5]}, True)]
  return kinds[i % len(kinds)]


def hostile_chat(i: int) -> tuple[object, bool]:
  msg = [{"role": "user", "content": "hi"}]
  kinds = [({"model": "bench", "messages": msg, "max_tokens": 10 ** 6}, True),
           ({"model": "bench", "messages": [{"role": "user", "content": "x" * (1 << 20)}]}, True),
           ('{"model": "bench", "messages": [', False),
           ({"model": "bench", "messages": "hi"}, True),
           ({"model": "bench", "messages": msg, "temperature": "hot"}, True)]
  return kinds[i % len(kinds)]


def soak(url: str, path: str, good, hostile, requests_n: int, clients: int,
         hostile_every: int, timeout: float) -> dict:
  """Sends `requests_n` requests from `clients` threads; see the module docstring."""
  import requests
  latencies, counts, errors = [], {"served": 0, "refused": 0}, []
  lock = threading.Lock()
  jobs = list(range(requests_n))

  def client(mine):
    session = requests.Session()
    for i in mine:
      bad = hostile_every > 0 and i % hostile_every == hostile_every - 1
      body, is_json = hostile(i // hostile_every) if bad else (good(i), True)
      t0 = time.perf_counter()
      try:
        if is_json:
          r = session.post(url + path, json=body, timeout=timeout)
        else:
          r = session.post(url + path, data=body, timeout=timeout,
                           headers={"Content-Type": "application/json"})
        status = r.status_code
      except requests.RequestException as e:
        with lock:
          errors.append(f"request {i}: {type(e).__name__}: {e}"[:300])
        continue
      took = time.perf_counter() - t0
      with lock:
        if bad and 400 <= status < 500:
          counts["refused"] += 1
        elif not bad and status == 200:
          counts["served"] += 1
          latencies.append(took)
        else:
          errors.append(f"request {i} ({'hostile' if bad else 'good'}): HTTP {status} "
                        f"{r.text[:200]}")

  threads = [threading.Thread(target=client, args=(jobs[c::clients],)) for c in range(clients)]
  t0 = time.perf_counter()
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  wall = time.perf_counter() - t0
  lat = np.asarray(latencies) * 1e3
  return {"requests": requests_n, "clients": clients, "served": counts["served"],
          "refused_as_expected": counts["refused"], "errors": len(errors),
          "first_errors": errors[:3], "wall_s": round(wall, 2),
          "requests_per_s": round(requests_n / wall, 1),
          "p50_ms": round(float(np.percentile(lat, 50)), 2) if lat.size else None,
          "p99_ms": round(float(np.percentile(lat, 99)), 2) if lat.size else None}


def world_index(out_dir: str) -> tuple[str, list[str]]:
  """A BM25 index of the synthetic world's corpus, and its training questions."""
  from ragjax.data.world import WorldConfig, generate_world, write_flashrag
  from ragjax.retrieval.index import build_index
  world = generate_world(WorldConfig(seed=0, num_train=500, num_dev=10, num_test=10))
  paths = write_flashrag(world, os.path.join(out_dir, "world"))
  build_index(paths["corpus"], os.path.join(out_dir, "index"), "bm25", progress=False)
  return os.path.join(out_dir, "index"), [e.question for e in world.questions["train"]]


def run_server(module: str, args: list, path: str, good, hostile, n: int, a) -> dict:
  proc, url = serving.start(module, *args)
  try:
    before = serving.rss_mb(proc.pid)
    out = soak(url, path, good, hostile, n, a.clients, a.hostile_every, a.timeout)
    import requests
    out["healthy_after"] = requests.get(url + "/health", timeout=10).ok
    out["rss_mb_before"], out["rss_mb_after"] = round(before, 1), round(serving.rss_mb(proc.pid), 1)
  finally:
    serving.stop(proc)
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--retrieve-requests", type=int, default=2000)
  ap.add_argument("--chat-requests", type=int, default=200)
  ap.add_argument("--clients", type=int, default=16)
  ap.add_argument("--hostile-every", type=int, default=10, help="one hostile request in N")
  ap.add_argument("--timeout", type=float, default=120.0, help="per-request client timeout (s)")
  ap.add_argument("--chat-max-tokens", type=int, default=16)
  a = ap.parse_args(argv)
  results = []
  with tempfile.TemporaryDirectory() as tmp:
    if a.retrieve_requests:
      index, questions = world_index(tmp)
      rng = np.random.default_rng(0)

      def good_retrieve(i):
        n = 1 + i % 8
        return {"queries": [questions[j] for j in rng.integers(0, len(questions), n)],
                "topk": 1 + i % 10}
      results.append({"server": "ragjax.retrieval.server (BM25, world corpus)", **run_server(
          "ragjax.retrieval.server", ["--index", index], "/retrieve", good_retrieve,
          hostile_retrieve, a.retrieve_requests, a)})
    if a.chat_requests:
      from ragjax.bench.services import make_checkpoint
      ckpt = os.path.join(tmp, "ckpt")
      make_checkpoint(ckpt, hidden=64, layers=2)

      def good_chat(i):
        return {"model": "bench", "max_tokens": a.chat_max_tokens, "temperature": 0.0,
                "messages": [{"role": "user", "content": f"Who founded the observatory? {i}"}]}
      results.append({"server": "ragjax.services.chat_server (random 2-layer Qwen2)", **run_server(
          "ragjax.services.chat_server", ["--checkpoint", ckpt, "--model-name", "bench",
                                    "--max-batch", "16", "--max-new-tokens", "64",
                                    "--max-prompt-tokens", "256"],
          "/v1/chat/completions", good_chat, hostile_chat, a.chat_requests, a)})
  for r in results:
    print(json.dumps(r))
  return int(any(r["errors"] or not r["healthy_after"] for r in results))


if __name__ == "__main__":
  sys.exit(main())
