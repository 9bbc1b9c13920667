"""`configs/smollm2.py:tiny` end to end through `python -m ragjax.train`: a real pretrained
model (SmolLM2-135M-Instruct from its GGUF file), real HotpotQA questions split by a seed, BM25
over the shared Wikipedia passages, the real engine and trainer (LoRA, one GRPO step), and the
qa recipe's table before and after.  Skips without the model wheel or ../shared/data."""

import json
import os

import pytest

from _recipe_helpers import TESTS, finish, read_metrics, real_model_lock, train
from conftest import SHARED_DATA
from ragjax.models.gguf_io import SMOLLM2_135M, installed_gguf

pytestmark = pytest.mark.skipif(
    not installed_gguf(*SMOLLM2_135M) or not os.path.isdir(SHARED_DATA)
    or __import__("importlib").util.find_spec("gguf") is None,
    reason="needs the SmolLM2 GGUF wheel (requirements-model.txt), gguf and ../shared/data")


@pytest.fixture(autouse=True, scope="module")
def one_heavy_real_model_module_at_a_time():
  with real_model_lock():
    yield


def read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def test_tiny_real_model_run_trains_and_writes_its_table(tmp_path):
  work = str(tmp_path / "run")
  # a dense user reward next to EM, so one step of a model that answers nothing right still
  # has a gradient (tests/dense_reward.gin)
  out, _ = finish(train(["--config=configs/smollm2.py:tiny", f"--config.workdir={work}",
                         "--gin_file", os.path.join(TESTS, "dense_reward.gin"),
                         "--config.rl.rewards={'search_r1_format': 1.0, 'test_vowels': 1.0}",
                         "--config.progress=False"]))
  assert "data: {'train': 1664, 'dev': 2, 'test': 2} questions" in out
  (m,) = read_metrics(work)
  assert m["trajectories"] == 4 and m["grad_norm"] > 0 and m["reward/test_vowels"] > 0
  assert 0 <= m["search_r1/search_rate"] <= 1 and "search_r1/valid_format" in m
  with open(os.path.join(work, "summary.json")) as f:
    summary = json.load(f)
  assert list(summary["systems"]) == ["untrained, direct answer", "untrained + search",
                                      "cold start + search", "trained + search"]
  assert summary["test_questions"] == 2 and set(summary["timings_s"]) >= {
      "data_index_policy", "evaluation_before", "cold_start", "evaluation_cold_start", "rl",
      "evaluation_after", "total"}
  # the cold start: one SFT step on scripted search traces, merged into an HF directory
  assert "cold start: 4 traces kept of 4 training questions" in out
  assert [r["step"] for r in read_jsonl(os.path.join(work, "sft_metrics.jsonl"))] == [1]
  assert os.path.exists(os.path.join(work, "cold_start_policy", "model.safetensors"))
  table = open(os.path.join(work, "results.md")).read()
  assert "| trained + search |" in table and "gold recall of searches" in table
  # LoRA: the exported policy is the merged model, loadable as an HF directory
  assert os.path.exists(os.path.join(work, "policy", "model.safetensors"))
  # and as one float16 GGUF file (135M weights at 2 bytes, SmolLM2's tokenizer copied)
  assert summary["policy_gguf"] == os.path.join(work, "policy.gguf")
  assert 2 * 134e6 < os.path.getsize(summary["policy_gguf"]) < 2 * 136e6 + 2e7
  assert os.path.exists(os.path.join(work, "trajectories.html"))
  # a rerun of the finished config reuses every evaluation (nothing is rolled out again) but
  # one whose cache a cut write left as bad UTF-8 (issue 65): set aside in one line, redone
  damaged = os.path.join(work, "eval", "untrained,_direct_answer.json")
  stats = json.load(open(damaged))["stats"]
  with open(damaged, "wb") as f:
    f.write(b'{"key": "\xff')
  out2, _ = finish(train(["--config=configs/smollm2.py:tiny", f"--config.workdir={work}",
                          "--gin_file", os.path.join(TESTS, "dense_reward.gin"),
                          "--config.rl.rewards={'search_r1_format': 1.0, 'test_vowels': 1.0}",
                          "--config.progress=False"]))
  assert out2.count(": reusing ") == 4 and "cold start: reusing" in out2
  assert out2.count("set aside as") == 1 and f"{damaged} is damaged (UnicodeDecodeError" in out2
  assert json.load(open(damaged))["stats"] == stats      # greedy: the same answers again
