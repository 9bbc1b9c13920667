"""Signature metrics (ragjax.rl.signatures), each computed by hand on constructed rollouts;
the ratio bootstrap behind the ablation's signature table; the table itself."""

import numpy as np
import pytest

from ragjax import registry
from ragjax.eval.systems import SystemResult
from ragjax.eval.ablation_report import signature_rows, signature_table
from ragjax.report.bootstrap import bootstrap_ratio, bootstrap_ratio_diff
from ragjax.rl.signatures import pairs, signature_metrics
from ragjax.rollout.trajectory import RowMeta, TurnRecord


def row(answer, searches=(), refine=None):
  """A rollout: one search turn per (doc_ids, doc_texts) in `searches`, then the answer."""
  turns = [TurnRecord(i, "search", "<search> q </search>", query=f"q{i}", doc_ids=tuple(ids),
                      doc_texts=tuple(texts)) for i, (ids, texts) in enumerate(searches)]
  turns.append(TurnRecord(len(turns), "answer", f"<answer> {answer} </answer>"))
  extra = {} if refine is None else {"refine_texts": list(refine)}
  return RowMeta(row=0, group_id=0, prompt_index=0, sample_index=0, answer=answer, turns=turns,
                 extra=extra)


def ex(gold, qtype="1hop", supporting=()):
  return {"golden_answers": [gold], "metadata": {"qtype": qtype},
          "supporting_ids": list(supporting)}


NAMESAKE = (("p7",), ("Vorar Tregil the painter was born in Sokrus Ford.",))
TARGET = (("p8",), ("Vorar Tregil the miller was born in Amber Hill.",))


def test_every_signature_is_registered_with_a_description():
  names = set(registry.names("signature"))
  assert {"two_hop_em", "retry_after_failed_search", "em_after_failed_search",
          "refine_has_answer", "step_relevance", "em_medium_hard", "searched", "gold_recall"} <= names


def test_two_hop_em_counts_only_two_hop_questions():
  rows = [row("Amber Hill"), row("Sokrus Ford"), row("Amber Hill")]
  exs = [ex("Amber Hill", "2hop"), ex("Amber Hill", "2hop"), ex("Amber Hill", "1hop")]
  num, den = pairs("two_hop_em", rows, exs)
  assert num.tolist() == [1, 0, 0] and den.tolist() == [1, 1, 0]
  assert signature_metrics(["two_hop_em"], rows, exs) == {
      "signature/two_hop_em": 0.5, "signature/two_hop_em_n": 2.0}


def test_retry_after_failed_search_by_hand():
  gold = ex("Amber Hill", "retry")
  rows = [row("Sokrus Ford", [NAMESAKE]),            # failed, gave up: 0 / 1
          row("Amber Hill", [NAMESAKE, TARGET]),     # failed, searched again, right: 1 / 1
          row("Amber Hill", [TARGET, NAMESAKE]),     # first search found it: not counted
          row("Amber Hill")]                         # never searched: not counted
  num, den = pairs("retry_after_failed_search", rows, [gold] * 4)
  assert num.tolist() == [0, 1, 0, 0] and den.tolist() == [1, 1, 0, 0]
  num, den = pairs("em_after_failed_search", rows, [gold] * 4)
  assert num.tolist() == [0, 1, 0, 0] and den.tolist() == [1, 1, 0, 0]
  # a second search after a failed one that still answers wrong: retried, EM 0
  r = row("Sokrus Ford", [NAMESAKE, NAMESAKE])
  assert pairs("retry_after_failed_search", [r], [gold])[0].tolist() == [1]
  assert pairs("em_after_failed_search", [r], [gold])[0].tolist() == [0]
  # the metric over a step: 2 of 3 failed first searches retried
  stats = signature_metrics(["retry_after_failed_search"], rows[:2] + [r], [gold] * 3)
  assert stats["signature/retry_after_failed_search"] == pytest.approx(2 / 3)


def test_searched_counts_rows_with_a_search():
  gold = ex("Amber Hill")
  rows = [row("Amber Hill", [TARGET]), row("Sokrus Ford"), row("x", [NAMESAKE, TARGET]),
          row("Amber Hill")]
  num, den = pairs("searched", rows, [gold] * 4)
  assert num.tolist() == [1, 0, 1, 0] and den.tolist() == [1, 1, 1, 1]
  assert signature_metrics(["searched"], rows, [gold] * 4)["signature/searched"] == 0.5


def test_refine_has_answer_counts_blocks():
  gold = ex("Amber Hill")
  rows = [row("x", refine=["born in Amber Hill", "nothing here"]), row("x", refine=[]),
          row("x")]                                  # a protocol without refine blocks
  num, den = pairs("refine_has_answer", rows, [gold] * 3)
  assert num.tolist() == [1, 0, 0] and den.tolist() == [2, 0, 0]


def test_step_relevance_by_hand():
  gold = ex("x", "2hop", supporting=("p1", "p2"))
  r = row("x", [(("p1", "p9"), ("a", "b")), (("p1", "p2"), ("a", "c")), (("p5",), ("d",))])
  num, den = pairs("step_relevance", [r], [gold])
  # steps retrieve 1/2, 2/2 and 0/2 of the gold passages: (0.5 + 1 + 0) / 3
  assert num.tolist() == [1.5] and den.tolist() == [3]
  assert pairs("step_relevance", [row("x")], [gold])[1].tolist() == [0]   # no search


def test_gold_recall_by_hand():
  gold = ex("x", "2hop", supporting=("p1", "p2"))
  one = row("x", [(("p1", "p9"), ("a", "b")), (("p1",), ("a",))])       # p1 twice: 1/2
  both = row("x", [(("p9",), ("b",)), (("p2",), ("c",)), (("p1",), ("a",))])   # 2/2
  num, den = pairs("gold_recall", [one, both, row("x")], [gold] * 3)
  assert num.tolist() == [0.5, 1.0, 0.0] and den.tolist() == [1, 1, 1]   # no search: 0 of 2
  # the same row's mean step relevance is (0 + 1/2 + 1/2) / 3 while its recall is 1
  num, den = pairs("step_relevance", [both], [gold])
  assert num[0] / den[0] == pytest.approx(1 / 3)
  assert pairs("gold_recall", [row("x")], [ex("x")])[1].tolist() == [0]   # no gold passages


def test_ratio_bootstrap_by_hand():
  est = bootstrap_ratio([1, 0, 1, 0], [1, 1, 1, 0])
  assert est.mean == pytest.approx(2 / 3) and est.n == 3 and 0 <= est.low <= est.high <= 1
  # B: 3/4, A: 1/3 on the questions each applies to -> 5/12
  d = bootstrap_ratio_diff([1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0])
  assert d.mean == pytest.approx(0.75 - 1 / 3) and d.n == 3 and d.low <= d.mean <= d.high
  # a difference that holds on every question has an interval above 0
  d = bootstrap_ratio_diff([1] * 30, [1] * 30, [0] * 30, [1] * 30)
  assert d.mean == d.low == d.high == 1.0
  assert np.isnan(bootstrap_ratio([0, 0], [0, 0]).mean)
  with pytest.raises(ValueError, match="equal lengths"):
    bootstrap_ratio_diff([1], [1], [1, 0], [1, 1])


def test_ablation_signature_table():
  def result(name, num, den):
    return SystemResult(name, "test", [0.0] * len(num), ["2hop"] * len(num), [], [], [],
                        {"two_hop_em": (num, den)})
  a = result("cold", [0, 0, 1, 0], [1, 1, 1, 1])
  b = result("grpo", [1, 1, 1, 0], [1, 1, 1, 1])
  (r,) = signature_rows(a, b, ["two_hop_em"])
  assert r["a"].mean == 0.25 and r["b"].mean == 0.75 and r["diff"].mean == 0.5
  assert r["p"] == pytest.approx(0.5)        # two discordant pairs, both for B: 2 * 0.5**2
  table = signature_table([r], "cold", "grpo")
  assert "| two_hop_em | 0.250" in table and "(4) |" in table and "| 0.5 |" in table
  # rates over different questions in the two arms: no McNemar, a ratio interval still
  b2 = result("grpo", [1, 1, 0, 0], [1, 1, 0, 1])
  (r2,) = signature_rows(a, b2, ["two_hop_em"])
  assert r2["p"] is None and r2["b"].mean == pytest.approx(2 / 3)
  assert "| — |" in signature_table([r2], "cold", "grpo")


def test_rex_rag_rescued_groups_by_hand():
  from ragjax.rl.rex_rag.metrics import rescued_groups
  gold = ex("Amber Hill")

  def r(group, answer, clone_of=None):
    m = row(answer)
    m.group_id, m.clone_of = group, clone_of
    return m
  rows = [r(0, "x"), r(0, "y"), r(0, "Amber Hill", clone_of=0),   # dead end, a probe right
          r(1, "x"), r(1, "x"), r(1, "z", clone_of=3),            # dead end, the probe wrong
          r(2, "Amber Hill"), r(2, "x"),                          # not a dead end
          r(3, "x"), r(3, "y")]                                   # dead end, no probe kept
  assert rescued_groups(rows, [gold] * len(rows)) == pytest.approx(1 / 3)
  assert rescued_groups(rows[6:8], [gold] * 2) is None


def test_em_medium_hard_by_difficulty_label_or_score():
  right, wrong, gold = row("Amber Hill"), row("Sokrus Ford"), ex("Amber Hill")
  rows = [right, wrong, right, right, right, right]
  exs = [dict(gold, difficulty_score=0.4),         # hard (0.2 <= s < 0.5): right
         dict(gold, difficulty="hard"),            # hard: wrong
         dict(gold, difficulty_score=0.6),         # medium (0.5 <= s < 0.8): right
         dict(gold, difficulty_score=0.9),         # easy: not counted
         dict(gold, difficulty="very_hard"),       # very hard: not counted
         gold]                                     # unscored: not counted
  num, den = pairs("em_medium_hard", rows, exs)
  assert num.tolist() == [1, 0, 1, 0, 0, 0] and den.tolist() == [1, 1, 1, 0, 0, 0]
