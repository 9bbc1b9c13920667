"""The `smollm2` variants of configs/r3_rag.py and configs/ur2.py without a model: they take
configs/smollm2.py's model, split, corpus and sampler sizes; R3-RAG's scripted teacher and
UR²'s scripted traces, by hand; UR²'s per-task cap; which variants share a cached evaluation.  (The runs: test_recipe_smollm2.py.)"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "configs"))
import r3_rag as r3_config  # noqa: E402
import smollm2 as smollm2_config  # noqa: E402
import ur2 as ur2_config  # noqa: E402

from ragjax.recipes.ur2 import cap_per_task  # noqa: E402
from ragjax.rl.r3_script_teacher import ScriptTeacher  # noqa: E402
from ragjax.rl.search_traces import ur2_script  # noqa: E402
from ragjax.services.templates import render_r3_teacher  # noqa: E402


def test_variants_take_the_real_models_settings():
  for arg, tiny in (("default", False), ("tiny", True)):
    base = smollm2_config.get_config(arg)
    name = "smollm2-tiny" if tiny else "smollm2"
    for c in (r3_config.get_config(name), ur2_config.get_config(name)):
      assert c.model.checkpoint == base.model.checkpoint and c.model.lora == base.model.lora
      assert c.data.source == "files" and c.data.split == base.data.split
      assert c.retriever.corpus == base.retriever.corpus and c.retriever.backend == "bm25"
      for k in ("max_cache_length", "max_new_tokens", "prompt_buckets", "unroll_layers"):
        assert c.sampler[k] == base.sampler[k], k
      assert c.rollout.widths == base.rollout.widths
      assert c.workdir.endswith(name.replace("-", "_")) and c.hardware == ""
  r3 = r3_config.get_config("smollm2")
  assert (r3.judge.kind, r3.judge.model) == ("url", smollm2_config.MODEL_NAME)
  assert r3.teacher.kind == "script" and r3.teacher.script.require_retrieved
  assert r3.rl.advantage == "gae" and r3.rl.step_samples and r3.r3.acc_judge == "training"
  u = ur2_config.get_config("smollm2")
  s = u.ur2.knowledge.summariser
  assert (u.ur2.knowledge.mode, s.kind, s.checkpoint) == ("summary", "checkpoint",
                                                          u.model.checkpoint)
  assert u.data.train_files == (f"math:{ur2_config.GSM8K}",) and u.ur2.stage1.mode == "full"
  assert set(u.data.stages.ur2_curriculum.ratios) == {"qa", "math"}
  # every method's variant gets the Search-R1 run's budget of rollouts, and its shared head
  base = smollm2_config.get_config("default")
  budget = base.trainer.num_steps * base.trainer.batch_prompts * base.rl.group_size
  for c in (r3, u):
    assert c.trainer.num_steps * c.trainer.batch_prompts * c.rl.group_size == budget == 1536
    assert c.sampler.shared_prefix == base.sampler.shared_prefix == 64
  import rex_rag as rex_config
  rx = rex_config.get_config("smollm2")
  assert rx.rl.use_sampler_logprobs and "injected" in rx.rl.train_on
  assert not rex_config.get_config("qwen2.5-3b").rl.use_sampler_logprobs    # verl re-scores
  # the update skips rows without an advantage (no KL loss: the same gradient); the paper
  # config, with its KL loss, cannot
  assert rx.rl.skip_zero_advantage_rows and rx.rl.kl_coef == 0
  assert not rex_config.get_config("qwen2.5-3b").rl.skip_zero_advantage_rows


def test_evaluation_keys_hold_what_a_greedy_evaluation_reads():
  """A cached evaluation is reused across configs that evaluate alike: REX-RAG's variant (its
  probe clones, `rex_rag.*` and their spare rows are training-time hooks) shares Search-R1's
  cold-start evaluation, the combined config AutoRefine's, and the training temperature is not
  in the key; the protocol, the retrieval depth and the decoding budget are."""
  from ragjax.recipes.qa import eval_fingerprint
  from ragjax.typed_config import json_safe
  from ragjax.wiring.config_files import apply_overrides, load_config

  def key(spec, *overrides):
    return json_safe(eval_fingerprint(apply_overrides(load_config(spec), list(overrides))))

  base = key("configs/smollm2.py")
  assert key("configs/rex_rag.py:smollm2") == base
  assert key("configs/smollm2.py", "sampler.temperature=0.7", "optim.lr=0.1") == base
  assert key("configs/combined.py:smollm2") == key("configs/autorefine.py:smollm2") != base
  for changed in ("protocol.top_k=5", "sampler.max_new_tokens=32", "protocol.max_turns=3"):
    assert key("configs/smollm2.py", changed) != base, changed


def test_script_teacher_steps_by_hand():
  teacher = ScriptTeacher([{"question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"]}])
  first = teacher.complete([render_r3_teacher("Who wrote Hamlet?")])[0]
  assert first == ("The problem analysis: I need to search for the question.\n"
                   "The retrieval query: Who wrote Hamlet?")
  found = dict(analysis="a", query="Who wrote Hamlet?", documents="Hamlet, by William "
                                                                  "Shakespeare, 1603")
  assert teacher.complete([render_r3_teacher("Who wrote Hamlet?", [found])])[0] == (
      "The problem analysis: The documents say the answer is Shakespeare.\n"
      "The final answer: Shakespeare")
  # the passages lack the answer: no answer line (the attempt fails on format and is dropped)
  missing = dict(found, documents="Macbeth, 1606")
  assert teacher.complete([render_r3_teacher("Who wrote Hamlet?", [missing])])[0] == (
      "The problem analysis: The documents do not say.")
  # an answer the question itself names is not "in the documents"
  older = ScriptTeacher([{"question": "Which is older, Rome or Paris?",
                          "golden_answers": ["Rome"]}])
  step = dict(analysis="a", query="Which is older, Rome or Paris?", documents="Paris, 250 BC")
  assert older.complete([render_r3_teacher("Which is older, Rome or Paris?", [step])])[0] == (
      "The problem analysis: The documents do not say.")
  step2 = dict(step, query="Rome founded", documents="Rome, 753 BC")
  assert older.complete([render_r3_teacher("Which is older, Rome or Paris?",
                                           [step, step2])])[0].endswith("The final answer: Rome")
  anyway = ScriptTeacher([{"question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"]}],
                         require_retrieved=False)
  assert anyway.complete([render_r3_teacher("Who wrote Hamlet?", [missing])])[0].endswith(
      "The final answer: Shakespeare")


def test_ur2_scripts_by_hand():
  qa = {"question": "Who  wrote\nHamlet?", "golden_answers": ["Shakespeare"], "task": "qa",
        "retrieval": True}
  assert ur2_script(qa) == ["<|begin_of_query|> Who wrote Hamlet? <|end_of_query|>",
                            "The documents say the answer is Shakespeare. \\boxed{Shakespeare}"]
  math = {"question": "2 eggs and 3 eggs?", "golden_answers": ["5"], "task": "math",
          "retrieval": False, "metadata": {"solution": "She has 2 + 3 = <<2+3=5>>5 eggs.\n#### 5"}}
  assert ur2_script(math) == ["She has 2 + 3 = 5 eggs. \\boxed{5}"]
  assert ur2_script(dict(math, retrieval=True))[0] == (
      "<|begin_of_query|> 2 eggs and 3 eggs? <|end_of_query|>")


def test_cap_per_task_is_a_seeded_sample_in_order():
  recs = [{"id": i, "task": "qa" if i < 5 else "math"} for i in range(8)]
  kept = cap_per_task(recs, 2, seed=0)
  assert [r["task"] for r in kept].count("qa") == 2 and [r["task"] for r in kept].count(
      "math") == 2
  assert [r["id"] for r in kept] == sorted(r["id"] for r in kept)
  assert kept == cap_per_task(recs, 2, seed=0) and cap_per_task(recs, 0, seed=0) == recs
