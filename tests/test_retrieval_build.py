"""Building at scale, with the real command and the real MiniLM: a build killed (SIGKILL) while
encoding is resumed by two JAX processes (`launch/local.sh`, jax.distributed on 127.0.0.1) that
share the rest of the encoding and produce exactly the index an uninterrupted build makes;
progress written by P processes resumes with any other number."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from _retrieval_helpers import REPO, small_corpus, write_jsonl
from ragjax.retrieval import embed_store
from ragjax.retrieval.index import build_index, open_index
from ragjax.retrieval.scann_index import ScannConfig
from _xla_helpers import xla_flags

SCANN = {"training_sample_size": 16}          # 43 rows, no tree: trains on 16, upserts all 43
QUERIES = ["Who founded the Qessa guild of astronomy?", "Zürich Käse", "glassblowing in Belcaro"]


def _env(**extra):
  env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu", **extra}
  env["XLA_FLAGS"] = xla_flags()
  return env


def _build_args(corpus, out):
  return ["--corpus", str(corpus), "--out", str(out), "--chunk-rows", "1", "--batch-size", "4",
          "--no-progress", "--scann", json.dumps(SCANN)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """An uninterrupted single-process build (the encoder `--batch-size 4` loads: small calls,
  since every chunk is one passage)."""
  from ragjax.models.encoder import TextEncoder
  d = tmp_path_factory.mktemp("build")
  corpus = write_jsonl(d / "corpus.jsonl", small_corpus(40))
  encoder = TextEncoder.from_dir(batch_size=4)
  build_index(str(corpus), str(d / "ref"), "scann", encoder=encoder, scann_config=ScannConfig(**SCANN),
              chunk_rows=1, progress=False)
  return d, corpus, encoder


def _same_index(a, b, encoder):
  np.testing.assert_array_equal(embed_store.load_embeddings(os.path.join(a, "embeddings")),
                                embed_store.load_embeddings(os.path.join(b, "embeddings")))
  for name in ("scann/reorder.npy", "scann/hashed_dataset.npy", "passages.arrow"):
    with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
      assert fa.read() == fb.read(), name
  assert open_index(a, encoder=encoder).search(QUERIES, 5) == open_index(b, encoder=encoder).search(QUERIES, 5)


def test_a_killed_build_resumes_in_two_processes_to_the_uninterrupted_index(reference):
  """SIGKILL mid-encoding, then the rest shared by two JAX processes (`launch/local.sh`,
  jax.distributed on 127.0.0.1): only the missing chunks are encoded, split between them, and
  process 0 builds exactly the index an uninterrupted single-process build makes."""
  d, corpus, encoder = reference
  out, logs = d / "killed", d / "logs"
  progress = out / "embeddings" / "progress.json"
  proc = subprocess.Popen([sys.executable, "-m", "ragjax.retrieval.build", *_build_args(corpus, out)],
                          cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 240
  while time.time() < deadline:
    try:
      if json.load(open(progress))["done_rows"] >= 3:
        break
    except (OSError, ValueError):
      pass
    time.sleep(0.01)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  done = json.load(open(progress))["done_rows"]
  assert 3 <= done < 43, f"the build was not caught mid-encoding ({done} rows done)"
  assert not (out / "index.json").exists()
  p = subprocess.run(["bash", "launch/local.sh", "ragjax.retrieval.build", *_build_args(corpus, out)],
                     cwd=REPO, env=_env(NUM_PROCESSES="2", LOG_DIR=str(logs)), capture_output=True,
                     text=True, timeout=600)
  assert p.returncode == 0, p.stderr
  lines = [json.loads(open(logs / f"proc{i}.log").read().strip().splitlines()[-1]) for i in range(2)]
  assert [l["process"] for l in lines] == [0, 1] and all(l["processes"] == 2 for l in lines)
  left = 43 - done                                                  # no rework, each its share
  assert [l["encoded_chunks"] for l in lines] == [(left + 1) // 2, left // 2]
  assert lines[0]["n"] == 43 and "scann_num_leaves" in lines[0]    # process 0 built the index
  assert not list((out / "embeddings").glob("progress.*.*.json"))  # folded into progress.json
  _same_index(str(d / "ref"), str(out), encoder)


def _ramp(texts):
  return np.stack([np.full(4, float(t), np.float32) * np.arange(1, 5) for t in texts])


def test_progress_of_several_processes_resumes_with_one(tmp_path):
  """Process 1 of 2 is killed after 2 of its chunks, process 0 never ran: a single process
  resuming encodes exactly the chunks nobody finished."""
  n, d = 40, str(tmp_path / "emb")
  texts = lambda a, b: [str(i) for i in range(a, b)]
  plans = []

  def as_process_0(obj):                    # stands in for the all-gather: process 0's plan
    plans.append(obj)
    return [plans[0]]
  embed_store.build_embeddings(d, n, 4, texts, _ramp, {"e": 1}, chunk_rows=4, progress=False,
                               process_index=0, process_count=2, gather=as_process_0,
                               stop_after_chunks=0)
  plans.clear()
  plans.append(json.loads(json.dumps({"state": embed_store.read_progress(d), "run": "r1"})))
  embed_store.build_embeddings(d, n, 4, texts, _ramp, {"e": 1}, chunk_rows=4, progress=False,
                               process_index=1, process_count=2, gather=lambda obj: [plans[0]],
                               stop_after_chunks=2)
  shard = json.load(open(os.path.join(d, "progress.r1.1.json")))
  assert shard["chunks"] == [[5, 10]] and shard["done"] == 2          # chunks 5 and 6 written
  calls = []
  encoded = embed_store.build_embeddings(d, n, 4, texts, lambda t: calls.append(t) or _ramp(t),
                                         {"e": 1}, chunk_rows=4, progress=False)
  assert encoded == 8 and [int(c[0]) // 4 for c in calls] == [0, 1, 2, 3, 4, 7, 8, 9]
  state = embed_store.read_progress(d)
  assert state["done_rows"] == n and state["done_chunks"] == [[0, 10]]
  np.testing.assert_array_equal(embed_store.load_embeddings(d), _ramp(texts(0, n)))
