"""UR²'s difficulty curriculum and task mixing (seeds_ur2_rezero.md §A4.4): labels, quotas,
the LLaMA substitution, which samples get the retrieval prompt, uniform sampling, errors."""

import collections

import pytest

from ragjax.data.curriculum import label_of, mix, quotas, retrieval_draw
from ragjax.rollout.protocols import get_protocol, ur2
from ragjax.rollout.protocols.base import as_prompt_input

# score per level: easy 0.9, medium 0.6, hard 0.3, very_hard 0.1
SCORE = {"easy": 0.9, "medium": 0.6, "hard": 0.3, "very_hard": 0.1}


def pool(task: str, **sizes) -> list[dict]:
  return [{"id": f"{task}-{lvl}-{i}", "question": f"q {task} {lvl} {i}", "golden_answers": ["a"],
           "metadata": {"task": task, "difficulty_score": SCORE[lvl]}}
          for lvl, n in sizes.items() for i in range(n)]


def count(out, key=lambda r: (r["task"], r["difficulty"])):
  return collections.Counter(key(r) for r in out)


def test_labels_thresholds():
  assert [label_of(s) for s in (1.0, 0.8, 0.79, 0.5, 0.49, 0.2, 0.19, 0.0)] == [
      "easy", "easy", "medium", "medium", "hard", "hard", "very_hard", "very_hard"]
  # 10 split 7:2:1 exactly; 11 by largest remainder: 7.7/2.2/1.1 -> 8, 2, 1
  assert quotas(10, {"hard": 7, "medium": 2, "easy": 1}) == {"hard": 7, "medium": 2, "easy": 1}
  assert quotas(11, {"hard": 7, "medium": 2, "easy": 1}) == {"hard": 8, "medium": 2, "easy": 1}
  assert quotas(3000, {"hard": 1, "medium": 1, "easy": 1}) == {"hard": 1000, "medium": 1000,
                                                                 "easy": 1000}


def test_qa_and_math_ratios_drop_very_hard_and_assign_prompts():
  recs = pool("qa", easy=40, medium=40, hard=80, very_hard=30) + \
      pool("math", easy=30, medium=30, hard=30, very_hard=30)
  out = mix(recs, seed=0, counts={"qa": 100, "math": 60})
  c = count(out)
  # the code's QA 2100/600/300 is 7:2:1; math 1:1:1
  assert c == {("qa", "hard"): 70, ("qa", "medium"): 20, ("qa", "easy"): 10,
               ("math", "hard"): 20, ("math", "medium"): 20, ("math", "easy"): 20}
  assert len({r["id"] for r in out}) == 160                     # without replacement
  # all QA and only hard math get the retrieval prompt
  assert count(out, lambda r: (r["task"], r["difficulty"], r["retrieval"])) == {
      ("qa", "hard", True): 70, ("qa", "medium", True): 20, ("qa", "easy", True): 10,
      ("math", "hard", True): 20, ("math", "medium", False): 20, ("math", "easy", False): 20}
  # the prompt kind is what the protocol uses
  proto = get_protocol("ur2")
  easy_math = next(r for r in out if r["task"] == "math" and r["difficulty"] == "easy")
  hard_math = next(r for r in out if r["task"] == "math" and r["difficulty"] == "hard")
  assert proto.system_message(as_prompt_input(easy_math)) == ur2.MATH_COT
  assert proto.system_message(as_prompt_input(hard_math)) == ur2.MATH_RETRIEVAL
  # seeded: the same list again; another seed, another draw
  assert [r["id"] for r in mix(recs, seed=0, counts={"qa": 100, "math": 60})] == \
      [r["id"] for r in out]
  assert [r["id"] for r in mix(recs, seed=1, counts={"qa": 100, "math": 60})] != \
      [r["id"] for r in out]


def test_llama_substitutes_easy_for_hard_math():
  """The code's LLaMA math mix: easy 1961, medium 1039, hard 0 (the hard quota from easy)."""
  recs = pool("math", easy=70, medium=40, hard=40)
  out = mix(recs, seed=3, counts={"math": 90}, substitute={"math": {"hard": "easy"}})
  assert count(out) == {("math", "easy"): 60, ("math", "medium"): 30}
  assert not any(r["retrieval"] for r in out)                   # no hard math: no retrieval
  # 50 easy: the hard quota takes 30 of them, the easy quota then finds 20
  with pytest.raises(ValueError, match=r"easy quota needs 30 questions, the easy pool has 20"):
    mix(pool("math", easy=50, medium=40), seed=3, counts={"math": 90},
        substitute={"math": {"hard": "easy"}})


def test_mcq_retrieval_share_and_very_hard():
  """5/7 of hard multiple choice and all very_hard get the retrieval prompt; with 7:2:1
  sampling that is 0.7 x 5/7 = 50% retrieval (§A4.4)."""
  recs = pool("mcq", easy=200, medium=400, hard=1400, very_hard=100)
  out = mix(recs, seed=0, counts={"mcq": 2000})
  hard = [r for r in out if r["difficulty"] == "hard"]
  share = sum(r["retrieval"] for r in hard) / len(hard)
  assert abs(share - 5 / 7) < 0.04
  assert abs(sum(r["retrieval"] for r in out) / len(out) - 0.5) < 0.03
  # each record's draw depends only on (seed, id)
  assert all(r["retrieval"] == (retrieval_draw(0, r["id"]) < 5 / 7) for r in hard)
  vh = mix(recs, seed=0, counts={"mcq": 100}, keep=("very_hard",), ratios={})
  assert len(vh) == 100 and all(r["retrieval"] for r in vh)


def test_mcq_sources_are_drawn_with_their_own_counts():
  """UR²'s multiple choice (§4.1): 3K MedQA + 2K of each synthetic MMLU-Pro domain, each source
  its own pool at 7:2:1, whatever the pools' sizes (one 9K pool would follow them instead)."""
  recs = []
  for src, n in (("medicine", 8), ("philosophy", 3), ("history", 3), ("economics", 3)):
    recs += [dict(r, id=f"{src}-{r['id']}", source=src)
             for r in pool("mcq", easy=20 * n, medium=20 * n, hard=70 * n)]
  counts = {"mcq:medicine": 300, "mcq:philosophy": 200, "mcq:history": 200,
            "mcq:economics": 200}
  out = mix(recs, seed=0, counts=counts)
  assert count(out, lambda r: r["source"]) == {"medicine": 300, "philosophy": 200,
                                                "history": 200, "economics": 200}
  assert count([r for r in out if r["source"] == "history"]) == {
      ("mcq", "hard"): 140, ("mcq", "medium"): 40, ("mcq", "easy"): 20}
  # one pool of 900 follows the pools' sizes: medicine 8 / 17 of it, not 1 / 3
  one = count(mix(recs, seed=0, counts={"mcq": 900}), lambda r: r["source"])
  assert one["medicine"] > 380
  with pytest.raises(ValueError, match="counted by source .* its source is 'law'"):
    mix(recs + [dict(recs[0], id="x", source="law")], seed=0, counts=counts)
  with pytest.raises(ValueError, match="counted both as a whole and by source"):
    mix(recs, seed=0, counts={"mcq": 10, "mcq:medicine": 10})


def test_stage1_selection_and_uniform_ablation():
  recs = pool("qa", easy=10, hard=10) + pool("math", easy=10, hard=10, very_hard=7)
  # Stage 1: the math questions the curriculum discards, all with the retrieval prompt
  s1 = mix(recs, seed=0, tasks=("math",), keep=("very_hard",), ratios={})
  assert count(s1) == {("math", "very_hard"): 7} and all(r["retrieval"] for r in s1)
  # uniform: the same counts, drawn whatever the level
  uni = mix(recs, seed=0, mode="uniform", counts={"qa": 10, "math": 10})
  assert count(uni, lambda r: r["task"]) == {"qa": 10, "math": 10}
  assert {r["difficulty"] for r in uni} <= {"easy", "hard"}
  # count 0: as many as the ratios allow (qa: 10 hard / 0.7 -> 14, but easy 10 / 0.1 -> 100)
  allq = mix(pool("qa", easy=10, medium=10, hard=10), seed=0)
  assert count(allq) == {("qa", "hard"): 10, ("qa", "medium"): 3, ("qa", "easy"): 1}


def test_bad_records_and_settings_are_named():
  with pytest.raises(ValueError, match="record r1 has no difficulty_score or difficulty label"):
    mix([{"id": "r1", "question": "q", "task": "qa"}], seed=0)
  with pytest.raises(ValueError, match="record r2: task must be one of"):
    mix([{"id": "r2", "question": "q", "difficulty": "easy"}], seed=0)
  with pytest.raises(ValueError, match="record r3: difficulty_score must be a number in"):
    mix([{"id": "r3", "question": "q", "task": "qa", "difficulty_score": 3}], seed=0)
  with pytest.raises(ValueError, match="curriculum mode"):
    mix(pool("qa", easy=1), seed=0, mode="random")
  with pytest.raises(ValueError, match="no training question is left"):
    mix(pool("qa", very_hard=3), seed=0)
  short = mix(pool("qa", easy=1, medium=1, hard=2), seed=0, counts={"qa": 10},
              shortage="take_all")
  assert count(short) == {("qa", "hard"): 2, ("qa", "medium"): 1, ("qa", "easy"): 1}


def test_data_stages_from_config():
  import os
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "configs"))
  import common
  from ragjax.wiring.components import apply_data_stages, validate
  c = common.get_config()
  recs = pool("qa", easy=5, medium=5, hard=20)
  assert apply_data_stages(c, recs) == recs                       # no stage: the records
  c.data.stages = {"ur2_curriculum": {"counts": {"qa": 10}}}
  validate(c)
  out = apply_data_stages(c, recs)
  assert count(out) == {("qa", "hard"): 7, ("qa", "medium"): 2, ("qa", "easy"): 1}
  c.data.stages = {"ur2_curriculm": {}}
  with pytest.raises(ValueError, match="data.stages: unknown data_stage"):
    validate(c)


def test_uniform_draws_as_many_as_the_curriculum():
  """Same-size training sets for the curriculum-vs-uniform comparison: with no counts, the
  uniform arm draws the number of questions the curriculum's ratios allow."""
  recs = pool("qa", easy=30, medium=30, hard=21)
  cur = mix(recs, seed=0)                                  # 21 hard -> n = 30 at 7:2:1
  uni = mix(recs, seed=0, mode="uniform")
  assert len(cur) == len(uni) == 30
  assert count(cur) == {("qa", "hard"): 21, ("qa", "medium"): 6, ("qa", "easy"): 3}
  assert count(uni)[("qa", "hard")] < 21                  # drawn whatever the level


def test_world_tasks_and_their_traces():
  """The synthetic world's three UR² tasks: MCQ options hold the gold answer (letter in
  golden_answers) among same-relation distractors, sums are right, traces use UR²'s grammar."""
  import random
  import string
  from ragjax.data.world import WorldConfig, generate_world
  from ragjax.data.world_tasks import ur2_trace_turns, world_task_splits
  w = generate_world(WorldConfig(num_people=30, num_places=10, num_orgs=8, num_works=12,
                                 retry_groups=6, num_train=40, num_dev=8, num_test=8))
  splits = world_task_splits({k: [e.to_record() for e in v] for k, v in w.questions.items()},
                             seed=0, mcq_fraction=0.5, math_fraction=0.25)
  train = splits["train"]
  assert collections.Counter(r["task"] for r in train) == {"qa": 40, "mcq": 20, "math": 10}
  for r in train:
    if r["task"] == "mcq":
      gold = r["metadata"]["answer_text"]
      assert r["options"][string.ascii_uppercase.index(r["golden_answers"][0])] == gold
      assert len(set(r["options"])) == len(r["options"]) >= 2 and r["metadata"]["qtype"] == "mcq"
    if r["task"] == "math":
      m = r["metadata"]
      assert r["golden_answers"] == [str(m["a"] + m["b"])] and m["qtype"] == "arithmetic"
  assert world_task_splits({"train": train[:40]}, seed=0)["train"][40:] == \
      world_task_splits({"train": train[:40]}, seed=0)["train"][40:]            # seeded
  rng = random.Random(0)
  qa = next(r for r in train if r["task"] == "qa" and r["metadata"]["qtype"] == "2hop")
  turns = ur2_trace_turns(qa, rng)
  assert [t.startswith(ur2.BEGIN_QUERY) for t in turns] == [True] * (len(turns) - 1) + [False]
  assert turns[-1] == f"\\boxed{{{qa['golden_answers'][0]}}}"
  mcq = next(r for r in train if r["task"] == "mcq")
  assert ur2_trace_turns(dict(mcq, retrieval=False), rng) == [
      f"the correct answer is: {mcq['golden_answers'][0]}"]
  assert ur2.extract_answer(ur2_trace_turns(mcq, rng)[-1]) == mcq["golden_answers"][0]
