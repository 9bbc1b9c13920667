"""`configs/ur2.py:tiny` end to end through `python -m ragjax.train`: the synthetic world's three
tasks, a cold start, difficulty by rollouts, Stage 1 then Stage 2 from Stage 1's weights,
knowledge through the summarising proxy served on 127.0.0.1 (`python -m ragjax.services.proxy`
with a small model in its process); an exact resume of Stage 2 from its step-1 checkpoint; and
`python -m ragjax.evaluate` of the exported policy on a slice of each UR² evaluation set with
each set's metric."""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import requests

from _retrieval_helpers import free_port, stop_server
from _xla_helpers import xla_flags
from test_services_fixtures import checkpoint_dir
import _preloaded as preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
SHARED = os.path.join(ROOT, "..", "shared", "data", "ur2_eval")
SETS = [("mmlupro", "mmlupro.jsonl", "mcq"), ("mmlupro_med", "mmlupro_med.jsonl", "mcq"),
        ("medqa", "medqa_500_5options.jsonl", "mcq"), ("math500", "math500.jsonl", "math"),
        ("minerva", "minervamath.jsonl", "math"), ("hotpotqa", "hotpotqa_500.jsonl", "qa"),
        ("2wiki", "2wiki_500.jsonl", "qa"), ("musique", "musique_500.jsonl", "qa"),
        ("bamboogle", "bamboogle.jsonl", "qa")]


def _env() -> dict:
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=TESTS + os.pathsep + ROOT)
  env["XLA_FLAGS"] = xla_flags()
  return env


def _run(args, timeout=1500):
  p = preloaded.run([sys.executable, "-m", *args], cwd=ROOT, env=_env(), capture_output=True,
                    text=True, timeout=timeout)
  assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-4000:])
  return p.stdout


def _metrics(path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
  """The tiny world's corpus indexed with BM25, summarised by a small model in the proxy."""
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import ur2 as ur2_config
  from ragjax.data.world import WorldConfig
  from ragjax.data.world_setup import prepare_world
  from ragjax.retrieval.index import build_index
  c = ur2_config.get_config("tiny")
  d = tmp_path_factory.mktemp("proxy")
  _, paths, _ = prepare_world(WorldConfig(**c.world.to_dict()), str(d), **c.tokenizer.to_dict())
  build_index(paths["corpus"], str(d / "index"), "bm25")
  port = free_port()
  cache = str(d / "summaries.jsonl")
  proc = preloaded.popen(
      [sys.executable, "-m", "ragjax.services.proxy", "--index", str(d / "index"),
       "--chat-checkpoint", checkpoint_dir(True), "--port", str(port), "--topk", "2",
       "--max-tokens", "8", "--temperature", "0", "--chat-cache", cache,
       "--chat-max-prompt-tokens", "2048"],
      cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  url = f"http://127.0.0.1:{port}"
  t_end = time.time() + 300
  while True:
    assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
    try:
      requests.get(url + "/health", timeout=1).raise_for_status()
      break
    except requests.RequestException:
      assert time.time() < t_end, "the proxy did not come up"
      time.sleep(0.3)
  yield url, cache
  stop_server(proc)


def _train(workdir, url, *extra):
  return _run(["ragjax.train", "--config=configs/ur2.py:tiny", f"--config.workdir={workdir}",
               f"--config.retriever.url={url}", "--config.ur2.knowledge.mode=summary",
               # a loaded 2-core machine summarises a batch of queries slowly
               "--config.retriever.timeout=600", "--config.retriever.deadline=1200",
               "--config.progress=False", "--config.trainer.eval_every=0", *extra])


@pytest.fixture(scope="module")
def run(proxy, tmp_path_factory):
  url, _ = proxy
  work = str(tmp_path_factory.mktemp("ur2"))
  _train(work, url)
  return work


def test_stage1_then_stage2_through_the_served_proxy(run, proxy):
  s1 = _metrics(os.path.join(run, "stage1", "rl", "metrics.jsonl"))
  s2 = _metrics(os.path.join(run, "rl", "metrics.jsonl"))
  assert [m["step"] for m in s1] == [1] and [m["step"] for m in s2] == [1, 2]
  # Stage 1: format + retrieval - fallback on hard math with the retrieval prompt; Stage 2:
  # answer + format - fallback on the curriculum's mix of tasks
  assert {k for k in s1[0] if k.startswith("reward/")} == {
      "reward/ur2_format", "reward/ur2_retrieval", "reward/ur2_fallback"}
  assert {k for k in s2[0] if k.startswith("reward/")} == {
      "reward/ur2_answer", "reward/ur2_format", "reward/ur2_fallback"}
  assert s1[0]["ur2_tasks/math/retrieval_prompt"] == 1.0 and "ur2_tasks/qa/score" not in s1[0]
  assert s1[0]["trajectories"] == 8                       # 4 prompts x G=2
  # Stage 2 starts from Stage 1's exported weights, not the cold start's
  from ragjax.models.hf_io import load_decoder
  import numpy as np
  _, p1 = load_decoder(os.path.join(run, "stage1", "policy"))
  _, p0 = load_decoder(os.path.join(run, "cold_start_policy"))
  flat = lambda p: np.concatenate([np.ravel(x) for x in __import__("jax").tree.leaves(p)])
  assert not np.allclose(flat(p1), flat(p0))
  assert os.path.exists(os.path.join(run, "policy", "model.safetensors"))
  # the difficulty file scored every training question with 2 rollouts
  lines = _metrics(os.path.join(run, "difficulty", "train.jsonl"))
  assert len(lines) == 48 and all(line["n"] == 2 for line in lines)
  # knowledge went through the served proxy: its summariser saw UR²'s prompts, the math one
  # for math queries, with the reasoning before the query
  _, cache = proxy
  prompts = [json.loads(line)["request"]["messages"][-1]["content"] for line in open(cache)]
  assert prompts and all("**Final Information**" in p for p in prompts)
  assert any("You are assisting in solving a math problem" in p for p in prompts)
  assert any("Your first task is to determine" in p for p in prompts)      # non-math, strong


def test_stage2_resumes_exactly(run, proxy, tmp_path):
  """Stage 2 killed after its step-1 checkpoint: the rerun skips the cold start, difficulty
  and Stage 1 and recomputes step 2 exactly."""
  url, _ = proxy
  work = str(tmp_path / "resumed")
  shutil.copytree(run, work)
  shutil.rmtree(os.path.join(work, "rl", "latest", "2"))
  out = _train(work, url)
  assert "stage 1: 1 steps (0 run now)" in out
  a = _metrics(os.path.join(run, "rl", "metrics.jsonl"))
  b = _metrics(os.path.join(work, "rl", "metrics.jsonl"))
  assert [m["step"] for m in b] == [1, 2] and b[0] == a[0]
  for key in ("loss", "pg_loss", "grad_norm", "reward", "response_length", "entropy",
              "searches_per_traj", "tokens"):
    assert b[1][key] == pytest.approx(a[1][key], rel=1e-6, abs=1e-9), key


def test_evaluate_a_slice_of_each_ur2_set(run, proxy, tmp_path):
  if not os.path.isdir(SHARED):
    pytest.skip("shared UR² evaluation data not present")
  from ragjax.data.readers import read_examples
  from ragjax.retrieval.records import write_jsonl
  recs = []
  for name, file, task in SETS:       # the two shortest questions of each set (CPU budget)
    ex = sorted(read_examples(os.path.join(SHARED, file), task),
                key=lambda e: len(e.question) + sum(len(o) for o in e.options))[:2]
    for e in ex:
      r = e.to_flashrag()
      r["metadata"].update(task=task, qtype=name)
      recs.append(r)
  data = str(tmp_path / "slices.jsonl")
  write_jsonl(data, recs)
  url, _ = proxy
  out = _run(["ragjax.evaluate", "--config=configs/ur2.py:tiny", f"--config.workdir={run}",
              f"--checkpoint={os.path.join(run, 'policy')}", f"--data={data}",
              "--format=flashrag", f"--url={url}", "--metric=task",
              "--config.sampler.max_cache_length=1024",
              "--config.sampler.prompt_buckets=(128,512)", "--config.rollout.widths=(1024,)"])
  header = next(line for line in out.splitlines() if line.startswith("| split"))
  assert [h.strip() for h in header.split("|")[3:-2]] == \
      ["task all"] + [f"task {name}" for name, _, _ in SETS]
  rows = [line for line in out.splitlines() if line.startswith(f"| {os.path.basename(data)} |")]
  assert [r.split(" | ")[1] for r in rows] == ["policy + retrieval", "policy, no retrieval"]
  for r in rows:                      # a score with its interval for every set
    cells = r.split(" | ")[2:-1]
    assert len(cells) == 1 + len(SETS)
    assert all(re.fullmatch(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", c) for c in cells), cells
