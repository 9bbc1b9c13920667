"""The ablation's paired statistics on a hand-computed example, and its override parsing."""

import pytest

from ragjax.eval.systems import SystemResult
from ragjax.recipes.ablation import apply_overrides, paired_rows, paired_table


def result(name, em, qtypes):
  return SystemResult(name, "test", em, qtypes, [1] * len(em), [], [])


def test_paired_rows_by_hand():
  qt = ["1hop", "1hop", "2hop", "2hop", "2hop"]
  a = result("a", [1, 0, 0, 0, 1], qt)
  b = result("b", [1, 1, 0, 1, 1], qt)
  rows = {r["type"]: r for r in paired_rows(a, b, ["1hop", "2hop"])}
  assert rows["all"]["n"] == 5 and rows["all"]["diff"].mean == pytest.approx(0.4)
  assert rows["1hop"]["diff"].mean == pytest.approx(0.5)
  assert rows["2hop"]["diff"].mean == pytest.approx(1 / 3)
  # the paired differences are (0, 1, 0, 1, 0): every bootstrap mean lies in [0, 1] and the
  # interval holds the mean; B is never worse on any question, so the low end is >= 0
  d = rows["all"]["diff"]
  assert 0.0 <= d.low <= d.mean <= d.high <= 1.0
  assert rows["all"]["a"].mean == pytest.approx(0.4) and rows["all"]["b"].mean == pytest.approx(0.8)
  # McNemar: 2 discordant pairs, both for B -> exact two-sided binomial p = 2 * 0.5**2 = 0.5
  assert rows["all"]["p"] == pytest.approx(0.5)
  table = paired_table(list(rows.values()), "a", "b")
  assert "| all | 5 | 0.400" in table and "b - a (paired)" in table and "| 0.5 |" in table


def test_overrides_parse_literals_and_name_unknown_fields():
  import sys, os
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs"))
  import search_r1
  c = search_r1.get_config("tiny")
  d = apply_overrides(c, ["rl.kl_coef=0.02", "rl.train_on=('policy','retrieved')",
                          "--config.protocol.name=world", "rl.rewards={'em': 1.0}"])
  assert d.rl.kl_coef == 0.02 and tuple(d.rl.train_on) == ("policy", "retrieved")
  assert d.protocol.name == "world" and dict(d.rl.rewards) == {"em": 1.0}
  assert c.rl.kl_coef == 0.001                       # the original is untouched
  with pytest.raises(ValueError, match="'rl.kl_coeff': no such config field"):
    apply_overrides(c, ["rl.kl_coeff=1"])
  with pytest.raises(ValueError, match="not FIELD=VALUE"):
    apply_overrides(c, ["rl.kl_coef"])
