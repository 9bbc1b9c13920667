"""Difficulty scoring by N rollouts (UR² §A4.4): scores and labels, resume, the CLI on a
ragjax checkpoint in process.  The rollout-engine path runs in tests/test_recipe_ur2.py."""

import json
import os
import sys

import pytest

from _retrieval_helpers import REPO
from test_services_fixtures import ScriptedChat, checkpoint_dir
from ragjax.eval.difficulty import attach_scores, read_scores, score_with_chat, score_with_engine
from ragjax.rollout.protocols import ur2
import _preloaded as preloaded

SHARED = os.path.join(REPO, "..", "shared", "data", "ur2_eval")


def recs():
  return [{"id": f"m{i}", "question": f"What is {i} + {i}?", "golden_answers": [str(2 * i)],
           "task": "math"} for i in range(5)]


def test_scores_labels_and_resume(tmp_path):
  """Question i is answered right in min(i + 1, 4) of 4 samples: scores 1/4, 2/4, 3/4, 1, 1
  -> hard, medium, medium, easy, easy."""
  calls = {}

  def reply(msgs):
    q = msgs[-1]["content"]
    i = int(q.split()[3])
    calls[i] = calls.get(i, 0) + 1
    right = calls[i] <= i + 1
    return f"so \\boxed{{{2 * i if right else -1}}}"
  chat = ScriptedChat(reply)
  out = str(tmp_path / "scores.jsonl")
  part = score_with_chat(chat, recs()[:2], out, n=4, chunk=1, task="math")
  assert [part[k]["score"] for k in ("m0", "m1")] == [0.25, 0.5]
  # every conversation is the math CoT prompt (no retrieval)
  assert all(m[0]["content"] == ur2.MATH_COT for m in chat.seen)
  seen = len(chat.seen)
  full = score_with_chat(chat, recs(), out, n=4, chunk=2, task="math")
  assert len(chat.seen) - seen == 3 * 4                   # resumed: only m2..m4 were asked
  assert {k: (v["score"], v["label"]) for k, v in full.items()} == {
      "m0": (0.25, "hard"), "m1": (0.5, "medium"), "m2": (0.75, "medium"), "m3": (1.0, "easy"),
      "m4": (1.0, "easy")}
  assert read_scores(out) == full
  with_scores = attach_scores(recs(), full)
  assert with_scores[0]["difficulty_score"] == 0.25
  with pytest.raises(ValueError, match="record m9 has no difficulty score"):
    attach_scores([{"id": "m9"}], full)


def test_cli_scores_shared_math_with_a_checkpoint_in_process(tmp_path):
  data = os.path.join(SHARED, "math500.jsonl")
  if not os.path.exists(data):
    pytest.skip("shared UR² evaluation data not present")
  out = str(tmp_path / "s.jsonl")
  env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
  cmd = [sys.executable, "-m", "ragjax.eval.difficulty", "--data", data, "--format", "math",
         "--task", "math", "--out", out, "--n", "2", "--checkpoint", checkpoint_dir(True),
         "--max-tokens", "8", "--limit", "3", "--chunk", "2"]
  p = preloaded.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0, p.stderr[-2000:]
  summary = json.loads(p.stdout.strip().splitlines()[-1])
  assert summary["scored"] == 3 and sum(summary["labels"].values()) == 3
  lines = [json.loads(line) for line in open(out)]
  assert [len(line["scores"]) for line in lines] == [2, 2, 2]
  # a random model never finds the answer: every question is very hard
  assert all(line["label"] == "very_hard" for line in lines)
  p = preloaded.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0 and len(open(out).readlines()) == 3     # nothing left to score
