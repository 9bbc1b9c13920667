"""Shared fixtures for the retrieval tests: a small fictional corpus, clustered vectors, a server."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import requests

from _xla_helpers import xla_flags
import _preloaded as preloaded

from ragjax.bench.serving import free_port, stop  # noqa: F401  (re-exported to the tests)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PLACES = ["Varnholt", "Qessa", "Lumerin", "Ostrava Minor", "Kelthune", "Dravenport", "Ysolde",
           "Marrowick", "Tannefjord", "Belcaro", "Zhuravka", "Oquendo"]
_TRADES = ["glassblowing", "shipbuilding", "astronomy", "cheese making", "cartography", "weaving",
           "clockmaking", "beekeeping", "printing", "mining"]
_NAMES = ["Alder", "Brisk", "Corvin", "Delphine", "Esker", "Fenwick", "Galen", "Hestia", "Ilse",
          "Jorund", "Kasimir", "Linnea", "Mireille", "Noor", "Osric", "Petra", "Quill", "Rowan",
          "Saoirse", "Teodor"]


def small_corpus(n: int = 240) -> list[dict]:
  """Deterministic fictional passages (FlashRAG `{id, contents}`), a few with non-ASCII text."""
  rows = []
  for i in range(n):
    name = f"{_NAMES[i % len(_NAMES)]} {_NAMES[(i * 7 + 3) % len(_NAMES)]}son"
    place, trade = _PLACES[i % len(_PLACES)], _TRADES[(i * 3) % len(_TRADES)]
    year = 1700 + (i * 37) % 300
    text = (f"{name} was a {trade} master born in {place} in {year}. "
            f"In {year + 25} {name.split()[0]} founded the {place} guild of {trade}.")
    rows.append({"id": f"p{i}", "contents": f'"{name}"\n{text}'})
  rows.append({"id": "u1", "contents": '"Zürich Grüße"\nDie Stadt Zürich grüßt ihre Gäste mit Käse und Schokolade.'})
  rows.append({"id": "u2", "contents": '"東京タワー"\n東京タワーは東京都港区にある電波塔である。'})
  rows.append({"id": "u3", "contents": '"Café Émile"\nLe Café Émile sert des crêpes à Montréal depuis 1921.'})
  return rows


def write_jsonl(path: str, rows, raw_lines: dict | None = None) -> str:
  """Writes rows as jsonl; raw_lines {index: text} injects literal (possibly malformed) lines."""
  raw_lines = raw_lines or {}
  with open(path, "w", encoding="utf-8") as f:
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    for i, text in sorted(raw_lines.items()):
      lines.insert(i, text)
    f.write("\n".join(lines) + "\n")
  return path


def clustered_vectors(n: int, dim: int, clusters: int, seed: int = 0, noise: float = 0.35):
  """Unit vectors around random unit centres (the shape real embeddings have, unlike uniform)."""
  rng = np.random.default_rng(seed)
  centres = rng.normal(size=(clusters, dim)).astype(np.float32)
  centres /= np.linalg.norm(centres, axis=1, keepdims=True)
  x = centres[rng.integers(0, clusters, n)] + noise * rng.normal(size=(n, dim)).astype(np.float32) / np.sqrt(dim) * 4
  return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), centres


def run_module(*args) -> subprocess.CompletedProcess:
  """`python -m ARGS` as a user runs it (this checkout on the path, CPU, one device)."""
  env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
  env["XLA_FLAGS"] = xla_flags()
  return preloaded.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)


def start_server(index_dir: str, port: int, *extra: str) -> subprocess.Popen:
  env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
  env["XLA_FLAGS"] = xla_flags()
  proc = subprocess.Popen([sys.executable, "-m", "ragjax.retrieval.server", "--index", index_dir,
                           "--port", str(port), *extra], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  deadline = time.time() + 90
  while time.time() < deadline:
    if proc.poll() is not None:
      raise RuntimeError(f"server exited with {proc.returncode}: {proc.stdout.read().decode()[-2000:]}")
    try:
      if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).ok:
        return proc
    except requests.RequestException:
      time.sleep(0.2)
  proc.kill()
  raise RuntimeError("server did not come up within 90 s")


stop_server = stop      # ragjax.bench.serving.stop: terminate, then kill after 20 s


@contextlib.contextmanager
def server(index_dir: str, port: int | None = None, *extra: str):
  port = port or free_port()
  proc = start_server(index_dir, port, *extra)
  try:
    yield f"http://127.0.0.1:{port}", proc
  finally:
    stop_server(proc)
