"""Rewards: SQuAD metrics by hand, record-based scoring, registry, per-step, gin."""

import gin
import pytest

from ragjax import registry
from ragjax.metrics import cover_exact_match, exact_match, normalize_answer, token_f1
from ragjax.rl.rewards import (RewardContext, combine_rewards, get_reward,
                               is_valid_search_r1_format, registered_rewards)
from ragjax.rollout.protocols import get_protocol
from ragjax.rollout.trajectory import RowMeta, TurnRecord

GOOD = ("<think> need the capital </think> <search> capital of France </search> "
        "<information> Doc 1(Title: Paris) Paris is the capital. </information> "
        "<think> found it </think> <answer> The Paris! </answer>")


def row(response=GOOD, protocol="search_r1", turns=None, **extra) -> RowMeta:
  """A row record as the engine writes it: the answer is the protocol's parse of the text."""
  answer = get_protocol(protocol).extract_answer(response.split("<information>")[-1])
  return RowMeta(row=0, group_id=0, prompt_index=0, sample_index=0, answer=answer,
                 response_text=response, turns=turns or [TurnRecord(0, "answer", response)],
                 extra=dict(extra))


def ctx(response=GOOD, gold=("Paris",), **kw) -> RewardContext:
  return RewardContext(row(response, **kw), {"golden_answers": list(gold)})


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


def test_an_empty_normalised_answer_or_gold_never_matches():
  """SQuAD normalisation drops articles, so the gold letter "A" and the answer "The" both
  normalise to "": neither may count as a match, in the metrics or in the EM rewards."""
  assert normalize_answer("A") == normalize_answer("The") == ""
  assert exact_match("The", ["A"]) == 0.0 and exact_match("A", ["A"]) == 0.0
  assert exact_match("the!", ["an"]) == 0.0 and exact_match("", [""]) == 0.0
  assert exact_match("Paris", ["A", "paris"]) == 1.0      # a non-empty alias still counts
  assert cover_exact_match("The", ["A"]) == 0.0 and token_f1("The", ["A"]) == 0.0
  bad = ctx(GOOD.replace("The Paris!", "The"), gold=("A",))
  assert bad.answer == "The"
  for name in ("em", "search_r1_em", "cover_em", "f1"):
    assert get_reward(name)(bad) == 0.0, name


def test_builtin_rewards_read_the_parsed_answer():
  assert ctx().answer == "The Paris!"
  assert get_reward("em")(ctx()) == 1.0
  assert get_reward("search_r1_em")(ctx()) == 1.0
  assert get_reward("format")(ctx()) == 1.0
  wrong = GOOD.replace("The Paris!", "Lyon")
  assert get_reward("search_r1_em")(ctx(wrong)) == 0.0
  assert get_reward("search_r1_em")(ctx(wrong), format_score=0.2) == 0.2
  assert get_reward("f1")(ctx(GOOD.replace("The Paris!", "Paris France"))) == pytest.approx(2 / 3)
  # no answer: zero, even though the information block holds the gold string
  no_answer = ctx(GOOD.split("<answer>")[0])
  assert no_answer.answer is None and get_reward("cover_em")(no_answer) == 0.0


def test_search_r1_format_reward_by_hand():
  """Search-R1 qa_em_format.compute_score_em at structure 0.2, final 0.1, retrieval 0.1: each
  branch of its table, by hand."""
  r = get_reward("search_r1_format")
  kw = dict(structure_format_score=0.2, final_format_score=0.1, retrieval_score=0.1)
  assert r(ctx(), **kw) == 1.0                                    # EM, valid
  invalid = GOOD.replace("<think> found it </think>", "found it")  # stray text: invalid
  assert not is_valid_search_r1_format(invalid)
  assert r(ctx(invalid), **kw) == pytest.approx(0.8)               # EM, invalid: 1 - 0.2
  wrong = GOOD.replace("The Paris!", "Lyon")
  assert r(ctx(wrong), **kw) == pytest.approx(0.3)                 # valid, gold in information
  assert r(ctx(wrong, gold=("Marseille",)), **kw) == pytest.approx(0.2)   # valid, not retrieved
  assert r(ctx(wrong), structure_format_score=0.2) == pytest.approx(0.2)  # retrieval 0: default
  direct = "<think> I know </think> <answer> Lyon </answer>"       # valid without a search
  assert r(ctx(direct), **kw) == pytest.approx(0.2)
  assert r(ctx(invalid.replace("The Paris!", "Lyon")), **kw) == pytest.approx(0.1)  # final
  assert r(ctx(GOOD.split("<answer>")[0] + "so"), **kw) == 0.0     # no answer, invalid
  # the gold "A" normalises to "": never counts as retrieved
  assert r(ctx(wrong, gold=("A",)), **kw) == pytest.approx(0.2)
  # search_required: a well-formed answer without a search is scored as malformed
  req = dict(kw, search_required=True)
  assert r(ctx(direct), **req) == pytest.approx(0.1)
  assert r(ctx(direct.replace("Lyon", "Paris")), **req) == pytest.approx(0.8)
  searched = row(wrong, turns=[TurnRecord(0, "search", "<search> capital </search>",
                                           query="capital of France"),
                                TurnRecord(1, "answer", "<answer> Lyon </answer>")])
  assert searched.num_searches == 1
  assert r(RewardContext(searched, {"golden_answers": ["Paris"]}), **req) == pytest.approx(0.3)


def test_other_protocols_answers_are_scored():
  """R3-RAG and UR² answers are not <answer> tags; the protocol's parse is what is scored."""
  r3 = "Step 1:\nThe problem analysis: it is known.\nThe final answer: Paris"
  assert get_reward("em")(ctx(r3, protocol="r3_rag")) == 1.0
  ur2 = "Reasoning ... so the answer is \\boxed{Paris}"
  assert get_reward("em")(ctx(ur2, protocol="ur2")) == 1.0


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


def test_record_fields_and_per_step_rewards_combine():
  @registry.register("reward", "test_step_relevance")
  def step_relevance(ctx):
    return [0.6 if any("Paris" in d for d in t.doc_texts) else -0.1 for t in ctx.row.turns]

  turns = [TurnRecord(0, "search", "<search> q </search>", doc_texts=('"Lyon"\nLyon.',)),
           TurnRecord(1, "search", "<search> p </search>", doc_texts=('"Paris"\nParis.',)),
           TurnRecord(2, "answer", "<answer> The Paris! </answer>")]
  c = RewardContext(row(turns=turns, refine_texts=["it is Paris"]), {"golden_answers": ["Paris"]})
  assert c.row.num_turns == 3
  res = combine_rewards({"test_step_relevance": 1.0, "em": 2.0, "refine_cover_em": 0.1}, c,
                        record="nq-17")
  assert res.per_step == pytest.approx([-0.1, 0.6, -0.1 + 2.0 + 0.1])
  assert res.total == pytest.approx(2.5)
  assert res.components == {"test_step_relevance": pytest.approx(0.4), "em": 1.0,
                            "refine_cover_em": 1.0}
  with pytest.raises(ValueError, match="reward 'refine_cover_em' failed on record nq-3"):
    combine_rewards({"refine_cover_em": 1.0}, ctx(), record="nq-3")
  with pytest.raises(KeyError, match="unknown reward 'nope'"):
    combine_rewards({"nope": 1.0}, ctx())


def test_registry_checks_names_before_any_work():
  with pytest.raises(ValueError, match=r"rl.rewards: unknown reward \['emm'\]"):
    registry.check("reward", {"emm": 1.0}, "rl.rewards")
  with pytest.raises(ValueError, match="already registered"):
    registry.register("reward", "em")(lambda ctx: 0.0)
  from ragjax.rl.run_config import RLConfig
  with pytest.raises(ValueError, match="rl.advantage: unknown advantage"):
    RLConfig(advantage="grpoo")
  with pytest.raises(ValueError, match="rl.train_on: cannot train on 'prompt'"):
    RLConfig(train_on=("policy", "prompt"))
  with pytest.raises(ValueError, match="rl.use_sampler_logprobs with rl.train_on holding"):
    RLConfig(train_on=("policy", "retrieved"), use_sampler_logprobs=True)


def length_penalty(ctx, per_word=0.01):
  return -per_word * len(ctx.row.response_text.split())


def test_user_reward_bound_with_gin():
  gin.clear_config()
  gin.external_configurable(length_penalty, module="tests")
  try:
    gin.parse_config("""
      user_plugins.plugins = {"reward": {"length": @tests.length_penalty}}
      tests.length_penalty.per_word = 0.5
    """)
    assert "length" in registered_rewards()
    res = combine_rewards({"em": 1.0, "length": 1.0}, ctx("<answer> Paris </answer>"))
    assert res.total == pytest.approx(1.0 - 0.5 * 3)
  finally:
    gin.clear_config()
  assert "length" not in registered_rewards()


def test_search_stats_and_the_search_r1_metric_by_hand():
  from ragjax.rl.rewards.builtin import search_r1_metrics, search_stats
  docs = ('"Gian Carlo Menotti"\nGian Carlo Menotti was a composer.',
          '"The Hero (opera)"\nThe Hero is an opera.')
  searched = row(turns=[TurnRecord(0, "search", "<search> q </search>", query="q",
                                   doc_texts=docs),
                        TurnRecord(1, "answer", "<answer> The Paris! </answer>")])
  ex = {"golden_answers": ["Paris"],
        "metadata": {"supporting_facts": [["Gian Carlo Menotti", 0], ["Maria Golovin", 1],
                                          ["Gian Carlo Menotti", 2]]}}
  s = search_stats(searched, ex)
  # one of the two supporting titles was retrieved; GOOD is a valid Search-R1 trajectory
  assert s == {"searched": 1.0, "searches": 1.0, "valid_format": 1.0, "answered": 1.0,
               "gold_recall": 0.5}
  silent = row("I do not know.", turns=[TurnRecord(0, "end", "I do not know.")])
  assert search_stats(silent, {"golden_answers": ["x"]}) == {
      "searched": 0.0, "searches": 0.0, "valid_format": 0.0, "answered": 0.0,
      "gold_recall": None}
  m = search_r1_metrics([searched, silent], [ex, {"golden_answers": ["x"]}])
  assert m == {"search_rate": 0.5, "valid_format": 0.5, "answered": 0.5, "gold_recall": 0.5}
