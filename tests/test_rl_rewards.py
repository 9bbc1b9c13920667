"""Rewards: SQuAD metrics by hand, response-span scoring, tag caps, registry, per-step, gin."""

import gin
import pytest

from ragjax.rl.rewards import (combine_rewards, cover_exact_match, exact_match, get_reward,
                               is_valid_search_r1_format, normalize_answer, register_reward,
                               registered_rewards, token_f1)

GOOD = ("<think> need the capital </think> <search> capital of France </search> "
        "<information> Doc 1(Title: Paris) Paris is the capital. </information> "
        "<think> found it </think> <answer> The Paris! </answer>")


def test_normalisation_and_metrics_by_hand():
  assert normalize_answer("  The  Eiffel-Tower, an icon. ") == "eiffeltower icon"
  assert exact_match("the Paris", ["Lyon", "paris"]) == 1.0
  assert exact_match("Paris France", ["paris"]) == 0.0
  assert cover_exact_match("it is Paris, France", ["paris"]) == 1.0
  # F1: pred "barack obama jr" vs gold "barack obama": p=2/3, r=1 -> 0.8
  assert token_f1("Barack Obama Jr.", ["Barack Obama"]) == pytest.approx(0.8)
  # multiset overlap: "a a b" -> "b" after article removal? no: 'a' is an article -> "b"
  assert token_f1("the cat cat", "cat") == pytest.approx(2 * 0.5 * 1 / 1.5)
  assert token_f1("yes", ["no"]) == 0.0 and token_f1("no", ["no"]) == 1.0
  with pytest.raises(ValueError, match="golden_answers must be"):
    exact_match("x", [])


def test_builtin_rewards_score_the_response_only():
  gold = ["Paris"]
  assert get_reward("em")(GOOD, gold, {}) == 1.0
  assert get_reward("search_r1_em")(GOOD, gold, {}) == 1.0
  assert get_reward("format")(GOOD, gold, {}) == 1.0
  wrong = GOOD.replace("The Paris!", "Lyon")
  assert get_reward("search_r1_em")(wrong, gold, {}) == 0.0
  assert get_reward("search_r1_em")(wrong, gold, {}, format_score=0.2) == 0.2
  assert get_reward("f1")(GOOD.replace("The Paris!", "Paris France"), gold, {}) == pytest.approx(2 / 3)
  # no answer tag: zero, even though the information block holds the gold string
  assert get_reward("cover_em")(GOOD.split("<answer>")[0], gold, {}) == 0.0


def test_repeated_answer_tags_are_capped():
  spray = "<think> x </think> <answer> Lyon </answer> <answer> Paris </answer>"
  assert get_reward("em")(spray, ["Paris"], {}) == 0.0
  assert get_reward("em")(spray, ["Paris"], {}, max_answer_tags=None) == 1.0
  assert get_reward("format")(spray, ["Paris"], {}) == 0.0


@pytest.mark.parametrize("text,ok", [
    (GOOD, True),
    ("<answer> x </answer>", True),
    ("<think> a </think> <answer> x </answer> trailing", False),
    ("<think> a </think> <search> q </search> <answer> x </answer>", False),  # no information
    ("<think> a <search> q </search> </think> <answer> x </answer>", False),  # nested
    ("<think> a </think>", False),                                          # no answer
    ("<search> q </search> <information> d </information> <answer> x </answer>", True),
])
def test_format_state_machine(text, ok):
  assert is_valid_search_r1_format(text) is ok


def test_metadata_and_per_step_rewards_combine():
  @register_reward("test_step_relevance")
  def step_relevance(response, golden, metadata):
    return [0.6 if "Paris" in d else -0.1 for d in metadata["retrieved_titles"]]

  meta = {"retrieved_titles": ["Lyon", "Paris"], "num_steps": 2, "refine_text": ["it is Paris"]}
  res = combine_rewards({"test_step_relevance": 1.0, "em": 2.0, "refine_cover_em": 0.1}, GOOD,
                        ["Paris"], meta, record="nq-17")
  assert res.per_step == pytest.approx([-0.1, 0.6 + 2.0 + 0.1])
  assert res.total == pytest.approx(2.6)
  assert res.components == {"test_step_relevance": pytest.approx(0.5), "em": 1.0,
                            "refine_cover_em": 1.0}
  with pytest.raises(ValueError, match="reward 'refine_cover_em' failed on record nq-3"):
    combine_rewards({"refine_cover_em": 1.0}, GOOD, ["Paris"], {}, record="nq-3")
  with pytest.raises(KeyError, match="unknown reward 'nope'"):
    combine_rewards({"nope": 1.0}, GOOD, ["Paris"])


def length_penalty(response, golden, metadata, per_word=0.01):
  return -per_word * len(response.split())


def test_user_reward_bound_with_gin():
  gin.clear_config()
  gin.external_configurable(length_penalty, module="tests")
  try:
    gin.parse_config("""
      user_rewards.rewards = {"length": @tests.length_penalty}
      tests.length_penalty.per_word = 0.5
    """)
    assert "length" in registered_rewards()
    res = combine_rewards({"em": 1.0, "length": 1.0}, "<answer> Paris </answer>", ["Paris"])
    assert res.total == pytest.approx(1.0 - 0.5 * 3)
  finally:
    gin.clear_config()
  assert "length" not in registered_rewards()
