"""`configs/r3_rag.py:smollm2-tiny` and `configs/ur2.py:smollm2-tiny` end to end through
`python -m ragjax.train` with the real model (SmolLM2-135M-Instruct from its GGUF file), real
HotpotQA questions split as configs/smollm2.py splits them, BM25 over the shared Wikipedia
passages, the real engine and trainer, one RL step each:

* R3-RAG: the cold start scripted in its step format, SFT (LoRA, merged), one step of
  step-level PPO with a critic whose step rewards ask SmolLM2 itself, served by
  `python -m ragjax.services.chat_server`, then R3-RAG's evaluation (ACC by the same judge);
* UR²: HotpotQA mixed with GSM8K math, the cold start in UR²'s grammar, difficulty by CoT
  rollouts, the curriculum, one Stage-2 step, knowledge summarised by SmolLM2 in process.

Each asserts its method's signature in the step metrics.  Skips without the model wheel, gguf
or ../shared/data."""

import json
import os

import pytest
import requests

from _recipe_helpers import TESTS, finish, read_metrics, real_model_lock, train
from _retrieval_helpers import free_port
from conftest import SHARED_DATA
from test_services_fixtures import start_chat_server, wait_for_server
from ragjax.models.gguf_io import SMOLLM2_135M, installed_gguf

pytestmark = pytest.mark.skipif(
    not installed_gguf(*SMOLLM2_135M) or not os.path.isdir(SHARED_DATA)
    or __import__("importlib").util.find_spec("gguf") is None,
    reason="needs the SmolLM2 GGUF wheel (requirements-model.txt), gguf and ../shared/data")

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(autouse=True, scope="module")
def one_heavy_real_model_module_at_a_time():
  with real_model_lock():
    yield


def test_r3_rag_on_smollm2_judged_by_smollm2_served(tmp_path):
  work, port = str(tmp_path / "r3"), free_port()
  # the judge starts beside the run (its first request comes with the RL step, after the cold
  # start's data and SFT), so their start-ups overlap
  judge = start_chat_server(port, checkpoint=installed_gguf(*SMOLLM2_135M), name=MODEL,
                            wait=False)
  run = None
  try:
    run = train(["--config=configs/r3_rag.py:smollm2-tiny", f"--config.workdir={work}",
                 "--config.progress=False", f"--config.judge.url=http://127.0.0.1:{port}"])
    wait_for_server(judge, port, seconds=600)
    out, _ = finish(run)
    served = requests.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
  finally:
    for proc in (run, judge):
      if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
  # the cold start: 2 questions scripted in R3-RAG's step format, 2 step samples each
  assert "cold-start data: kept 2 of 2" in out
  assert "SFT: 4 step samples from 2 trajectories (0 replays did not reach their answer" in out
  (m,) = read_metrics(work)
  # one PPO step: 1 question x 2 rollouts, every step its own sample, the critic trained
  assert m["trajectories"] == 2 and m["step_samples"] >= 2
  assert m["critic/value_loss"] > 0 and m["grad_norm"] > 0
  # the step rewards' readings: outcome shares and mean relevance of the step
  outcomes = {k: v for k, v in m.items() if k.startswith("r3_rag/outcome_")}
  assert outcomes and sum(outcomes.values()) == pytest.approx(1.0)
  assert 0 <= m["r3_rag/relevance"] <= 1
  asked = m.get("r3_rag/judge_relevance_requests", 0) + m.get("r3_rag/judge_answer_requests", 0)
  assert served["requests"] >= asked
  results = json.load(open(os.path.join(work, "results.json")))
  assert {r["system"] for r in results["results"]} == {"R3-RAG-CS (cold start)", "R3-RAG (RL)"}
  assert all(r["acc"] is not None for r in results["results"])    # ACC: the served SmolLM2
  assert os.path.exists(os.path.join(work, "policy", "model.safetensors"))


def test_ur2_on_smollm2_summarised_by_smollm2(tmp_path):
  work = str(tmp_path / "ur2")
  # a dense user reward beside UR²'s, so one step of a policy that scores nothing still has a
  # gradient (tests/dense_reward.gin)
  out, _ = finish(train(["--config=configs/ur2.py:smollm2-tiny", f"--config.workdir={work}",
                         "--gin_file", os.path.join(TESTS, "dense_reward.gin"),
                         "--config.rl.rewards={'ur2_answer': 1.0, 'ur2_format': 1.0, "
                         "'ur2_fallback': 1.0, 'test_vowels': 1.0}",
                         "--config.progress=False"]))
  # task mixing: 2 HotpotQA + 2 GSM8K training questions; the split's 2 dev and 2 test
  assert "data: {'train': 4, 'dev': 2, 'test': 2} questions; knowledge summary" in out
  assert "difficulty (train):" in out
  (m,) = read_metrics(work)
  assert m["trajectories"] == 4                      # 2 prompts x G=2
  assert m["grad_norm"] > 0 and m["reward/test_vowels"] > 0
  assert {k for k in m if k.startswith("reward/")} >= {"reward/ur2_answer", "reward/ur2_format",
                                                        "reward/ur2_fallback"}
  # the curriculum's mix of the step, and each task's prompt kind
  levels = {k: v for k, v in m.items() if k.startswith("ur2_tasks/level/")}
  assert levels and sum(levels.values()) == pytest.approx(1.0)
  assert any(k.endswith("/retrieval_prompt") for k in m)
  assert os.path.exists(os.path.join(work, "policy", "model.safetensors"))
