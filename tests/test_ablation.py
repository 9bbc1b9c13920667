"""The ablation's paired statistics on a hand-computed example, and its override parsing."""

import pytest

from ragjax.eval.systems import SystemResult
from ragjax.eval.ablation_report import paired_rows, paired_table
from ragjax.recipes.ablation import apply_overrides
import _preloaded as preloaded


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


def report(workdir, em_a, em_b, qtypes, num_a, den_a, num_b, den_b):
  """An ablation.json as `ablate` writes it (the fields `pool_reports` reads)."""
  return {"workdir": workdir, "split": "test", "arms": {"off": [], "on": ["x=1"]},
          "qtypes": qtypes, "em": {"off": em_a, "on": em_b},
          "signature_values": {"off": {"sig": {"num": num_a, "den": den_a}},
                               "on": {"sig": {"num": num_b, "den": den_b}}}}


def test_pooled_reports_by_hand(tmp_path):
  """Two seeds' reports pooled: EM per question averaged over the runs, a signature's
  numerator and denominator summed, the bootstrap over questions."""
  import json
  import sys
  from ragjax.eval.ablation_report import pool_reports
  qt = ["1hop", "1hop", "2hop"]
  r0 = report("s0", [0, 0, 1], [1, 0, 1], qt, [0, 1, 0], [1, 2, 0], [1, 2, 0], [1, 2, 0])
  r1 = report("s1", [0, 1, 0], [1, 1, 0], qt, [0, 0, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1])
  out = pool_reports([r0, r1])
  rows = {r["type"]: r for r in out["rows"]}
  # per question means over the runs: off (0, .5, .5), on (1, .5, .5)
  assert rows["all"]["a"].mean == pytest.approx(1 / 3) and rows["all"]["b"].mean == pytest.approx(2 / 3)
  assert rows["1hop"]["diff"].mean == pytest.approx(0.5) and rows["2hop"]["diff"].mean == 0
  assert rows["all"]["p"] is None
  # summed over runs: off num (0, 1, 1) / den (2, 3, 1) = 2/6, on (2, 3, 0) / (2, 3, 1) = 5/6
  (sig,) = out["signatures"]
  assert sig["a"].mean == pytest.approx(2 / 6) and sig["b"].mean == pytest.approx(5 / 6)
  assert sig["diff"].mean == pytest.approx(0.5) and sig["diff"].low <= 0.5 <= sig["diff"].high
  assert "Pooled over 2 runs: s0, s1" in out["table"] and "| sig |" in out["table"]
  with pytest.raises(ValueError, match="other questions"):
    pool_reports([r0, dict(r1, qtypes=["1hop", "2hop", "2hop"])])
  with pytest.raises(ValueError, match="two or more"):
    pool_reports([r0])
  old = {k: v for k, v in r1.items() if k != "signature_values"}
  with pytest.raises(ValueError, match="s1: no per-question values of signature 'sig'"):
    pool_reports([r0, old])
  # the command line: the pooled table, or one error line naming the file
  paths = []
  for i, r in enumerate((r0, r1, old)):
    paths.append(str(tmp_path / f"r{i}.json"))
    json.dump(r, open(paths[-1], "w"))
  run = lambda files: preloaded.run(  # noqa: E731
      [sys.executable, "-m", "ragjax.ablate", f"--pool={','.join(files)}"],
      capture_output=True, text=True, timeout=300)
  proc = run(paths[:2])
  assert proc.returncode == 0 and "| all | 3 |" in proc.stdout and "| — |" in proc.stdout
  proc = run([paths[0], paths[2]])
  assert proc.returncode == 2 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith("ragjax.ablate: error: s1: no per-question")
  json.dump({"arms": {}}, open(tmp_path / "other.json", "w"))
  proc = run([paths[0], str(tmp_path / "other.json")])
  assert proc.returncode == 2 and "other.json: not an ablation.json" in proc.stderr
  assert "Traceback" not in proc.stderr
  proc = run([paths[0], str(tmp_path / "missing.json")])
  assert proc.returncode == 2 and "missing.json" in proc.stderr and "Traceback" not in proc.stderr
