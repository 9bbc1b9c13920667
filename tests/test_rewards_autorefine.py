"""AutoRefine's Eq. 3 reward and its §3.3 metrics, each value worked out by hand from
seeds_rex_autorefine_r3.md §2.3."""

import pytest

from ragjax import registry
from ragjax.rl.rewards import RewardContext, combine_rewards, get_reward
from ragjax.rollout.trajectory import RowMeta, TurnRecord

GOLD = {"golden_answers": ["Quillport", "Port Quill"]}


def row(answer, refine=(), docs=(), extra=True):
  turns = [TurnRecord(i, "search", "<search> q </search>", query="q", doc_texts=tuple(d))
           for i, d in enumerate(docs)]
  turns.append(TurnRecord(len(docs), "answer", f"<answer> {answer} </answer>"))
  return RowMeta(row=0, group_id=0, prompt_index=0, sample_index=0, answer=answer, turns=turns,
                 extra={"refine_texts": list(refine)} if extra else {})


def reward(r, example=GOLD, **kw):
  return get_reward("autorefine")(RewardContext(r, example), **kw)


def test_eq3_branches_by_hand():
  # F1 > 0: the F1, whatever the refine text says
  assert reward(row("Quillport")) == 1.0
  # "the Quillport harbour" -> "quillport harbour" vs "quillport": P = 1/2, R = 1, F1 = 2/3;
  # vs "port quill": no overlap -> max is 2/3, and the refine bonus does not add to it
  assert reward(row("the Quillport harbour", refine=["Quillport"])) == pytest.approx(2 / 3)
  # F1 = 0 and a gold alias in the concatenated refine text -> 0.1
  assert reward(row("Amber Sea", refine=["the river", "reaches Port Quill."])) == 0.1
  # the alias spans two blocks only when they are joined with a space: "port" + "quill"
  assert reward(row("Amber Sea", refine=["it is Port", "Quill"])) == 0.1
  # F1 = 0, refine without the answer -> 0
  assert reward(row("Amber Sea", refine=["the Amber Sea"])) == 0.0
  # no answer tag -> 0 even when the refine text has the answer
  assert reward(row(None, refine=["Quillport"])) == 0.0
  # yes/no must match exactly for F1; "no" vs gold "yes" -> 0, then the refine test applies
  assert reward(row("no", refine=["the answer is yes"]), {"golden_answers": ["yes"]}) == 0.1


def test_retrieval_reward_off_is_the_ablation():
  assert reward(row("Amber Sea", refine=["Quillport"]), refine_score=0.0) == 0.0
  assert reward(row("Quillport", extra=False), refine_score=0.0) == 1.0   # Search-R1 rows
  with pytest.raises(KeyError, match="refine_texts"):
    reward(row("Amber Sea", extra=False))


def test_one_registered_reward_not_a_weighted_sum():
  res = combine_rewards({"autorefine": 1.0}, RewardContext(row("Amber Sea", ["Quillport"]), GOLD))
  assert res.total == 0.1 and res.components == {"autorefine": 0.1}
  assert get_reward("refine_cover_em")(RewardContext(row("x", ["Port Quill!"]), GOLD)) == 1.0


def test_metrics_search_success_refine_success_searches_per_rollout():
  metric = registry.lookup("metric", "autorefine")
  rows = [row("a", refine=["Quillport is it", "no idea"],
              docs=[('"Quillport"\nQuillport is a city.',), ('"Amber"\nThe Amber Sea.',)]),
          row("b", refine=[], docs=[('"X"\nnothing', '"Y"\nPort Quill harbour')]),
          row("c")]
  got = metric(rows, [GOLD] * 3)
  # 3 searches, 2 with the answer in their documents; 2 refine blocks, 1 with the answer
  assert got == {"search_success": pytest.approx(2 / 3), "refine_success": 0.5,
                 "searches_per_rollout": 1.0, "refines_per_rollout": pytest.approx(2 / 3)}
  assert metric([row("c")], [GOLD])["search_success"] == 0.0
