"""R3-RAG's paper-size pieces beside the reward (tests/test_r3_rag_rewards.py): the format retry
(the code regenerates a step whose `Step j:` header check fails, 3 generations in all; the
sampler's `reseed` is tested in tests/test_rollout_fidelity.py), each
document cut to 512 characters (App. E), the RL sample of 8,192 questions, and evaluation ACC
by the paper's judge or not at all."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.wiring import components as parts  # noqa: E402
from ragjax.recipes import r3_rag as recipe  # noqa: E402
from ragjax.wiring.config_files import load_config  # noqa: E402
from ragjax.rollout.engine import EngineConfig, RolloutEngine  # noqa: E402
from ragjax.rollout.protocols import get_protocol  # noqa: E402

Q = "Who founded the Quillport Observatory?"
EOS = "<|im_end|>"
GOOD = "Step 1:\nThe problem analysis: known.\nThe final answer: Mirela Dunst"
BAD = "The problem analysis: no header.\nThe final answer: x"


def run(retries, scripts):
  tok = h.tokenizer()
  proto = get_protocol("r3_rag", max_turns=3, step_header=True, format_retries=retries)
  pol = h.ScriptedPolicy(tok, scripts, stop_strings=proto.stop_sequences)
  batch = RolloutEngine(proto, pol, h.bm25_retriever(), tok).run([Q], samples_per_prompt=2)
  h.check_alignment(batch)
  return batch, tok


def test_a_step_failing_the_header_check_is_generated_again():
  """Row 0 writes no header, then a good step: the second generation is the step (one turn,
  one sample, no trace of the first).  Row 1 fails three times: after 2 retries the third
  generation is kept as the format failure (the code's reward -0.9 then lands on it)."""
  scripts = {0: [BAD + EOS, GOOD + EOS], 1: [BAD + EOS, BAD + " 2" + EOS, BAD + " 3" + EOS]}
  batch, tok = run(2, scripts)
  r0, r1 = batch.rows
  assert (r0.answer, r0.stop_reason, len(r0.turns)) == ("Mirela Dunst", "answer", 1)
  assert r0.turns[0].text == GOOD                   # (the eos token is not turn text)
  assert r1.stop_reason == "format_step_header" and [t.text for t in r1.turns] == [BAD + " 3"]
  assert batch.stats["format_retries"] == 3
  s = batch.samples
  assert list(s.row) == [0, 1]                      # each row one sample: its kept step
  n, p = int(s.traj.lengths[0]), int(s.traj.prompt_lengths[0])
  assert tok.decode(s.traj.tokens[0, p:n].tolist()) == GOOD + EOS
  # without retries the first generation is the failure
  batch, _ = run(0, scripts)
  assert [r.stop_reason for r in batch.rows] == ["format_step_header"] * 2
  assert "format_retries" not in batch.stats


def test_each_document_is_cut_not_the_joined_string():
  proto = get_protocol("r3_rag", doc_cut="each", obs_max_chars=10)
  docs = ['"Mirela Dunst"\nMirela Dunst founded it.', '"Quillport"\nA town.']
  assert proto.truncate_chars(proto.format_documents(docs)) == '"Mirela Du\n"Quillport'
  code = get_protocol("r3_rag", doc_cut="joined", obs_max_chars=10)
  assert code.truncate_chars(code.format_documents(docs)) == '"Mirela Du'
  c = load_config("configs/r3_rag.py:qwen2.5-7b")
  assert (c.protocol.doc_cut, c.protocol.obs_max_chars, c.protocol.format_retries) == \
      ("each", 512, 2)
  # the relevance judge is told the same cut (linked fields): one switch moves both
  c.protocol.doc_cut = "joined"
  assert c.rl.reward_kwargs.r3_rag.doc_cut == "joined"
  assert c.rl.reward_kwargs.r3_rag.doc_chars == 512
  assert c.rl.reward_kwargs.r3_rag.lambda_form == "gamma"
  ev = recipe.eval_config(load_config("configs/r3_rag.py:qwen2.5-7b"))
  assert (ev.protocol.top_k, ev.protocol.obs_max_chars, ev.protocol.format_retries) == \
      (5, None, 0)


def test_rl_trains_on_a_seeded_sample_of_the_remaining_questions(tmp_path):
  c = load_config("configs/r3_rag.py:qwen2.5-7b")
  assert (c.r3.rl_questions, c.r3.rl_sample) == (8192, "random")
  c.workdir = str(tmp_path)
  train = [{"id": str(i), "question": f"q{i}", "golden_answers": ["a"]} for i in range(50)]
  data = os.path.join(str(tmp_path), recipe.DATA_DIR)
  os.makedirs(data)
  with open(os.path.join(data, "trajectories.jsonl"), "w") as f:   # the cold start used 0-9
    f.writelines(f'{{"id": "{i}"}}\n' for i in range(10))
  c.r3.rl_questions = 8
  ids = lambda c: [r["id"] for r in recipe.rl_setup(c, parts.Setup({"train": train}, None))
                   .splits["train"]]
  picked = ids(c)
  assert len(picked) == 8 and not set(picked) & {str(i) for i in range(10)}
  assert picked == sorted(picked, key=int) and picked != [str(i) for i in range(10, 18)]
  assert ids(c) == picked                               # seeded
  c.seed = 1
  assert ids(c) != picked
  c.r3.rl_sample = "first"                              # the code's slice after the cold start
  assert ids(c) == [str(i) for i in range(10, 18)]


def test_acc_is_the_papers_judge_or_not_computed():
  from ragjax.eval.r3_rag import R3Result, r3_table
  from ragjax.eval.systems import SystemResult
  c = load_config("configs/r3_rag.py:qwen2.5-7b")
  assert c.eval.judge.model == "Qwen2.5-72B-Instruct" and c.r3.acc_judge == "eval"
  assert recipe.acc_judge(c, None) is None             # never the 14B training judge silently
  c.eval.judge.url = "http://127.0.0.1:9/v1"
  assert recipe.acc_judge(c, None).model == "Qwen2.5-72B-Instruct"
  system = SystemResult(name="R3-RAG", split="dev", em=[1.0, 0.0], qtypes=["", ""],
                        searches=[1, 1], batch=[], responses=["", ""])
  table = r3_table([R3Result(system, None, [1.0, 0.5], {})])
  assert "| dev | R3-RAG | 2 | not computed |" in table
  assert "ACC: not computed (no evaluation judge" in table
  with pytest.raises(ValueError, match="r3.acc_judge must be one of"):
    bad = load_config("configs/r3_rag.py:tiny")
    bad.r3.acc_judge = "teacher"
    recipe.validate(bad)
