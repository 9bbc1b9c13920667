"""`ragjax.rl.reward_designs`: reward designs rescored on hand-made rollout dumps, their GRPO
signal computed by hand, the logged-reward check and the CLI's errors."""

import json

import numpy as np
import pytest

from ragjax.rl import reward_designs as rd


def record(step, group, row, answer, body, golds=("Paris",), reward=None):
  spans = [{"label": "PROMPT", "turn": 0, "text": "Question: capital of France?\n"},
           {"label": "POLICY", "turn": 0, "text": body}]
  turns = [{"turn": 0, "action": "search" if "<search>" in body else "answer",
            "query": "capital of France" if "<search>" in body else None}]
  return {"row": row, "group_id": group, "step": step, "answer": answer, "spans": spans,
          "stop_reason": "answer",
          "turns": turns, "golden_answers": list(golds), "reward": reward}


SEARCH = ("<think> I need to search. </think>\n<search> capital of France </search>\n\n"
          "<information>Doc 1(Title: \"France\") Its capital is Paris.</information>\n\n")
VALID_RIGHT = SEARCH + "<think> x </think>\n<answer> Paris </answer>"
VALID_WRONG = SEARCH + "<think> x </think>\n<answer> Lyon </answer>"
INVALID_WRONG = SEARCH + "<answer> Lyon </answer> and more"

FORMAT = ("format", {"search_r1_format": 1.0},
          {"search_r1_format": {"structure_format_score": 0.2, "final_format_score": 0.0,
                                "retrieval_score": 0.0}})
EM = ("em", {"em": 1.0}, {})


def recs():
  return [record(1, 0, 0, "Paris", VALID_RIGHT, reward=1.0),
          record(1, 0, 1, "Lyon", VALID_WRONG, reward=0.2),
          record(1, 1, 2, "Lyon", VALID_WRONG, reward=0.2),
          record(1, 1, 3, "Lyon", INVALID_WRONG, reward=0.0),
          # step 2 reuses group id 0: a different GRPO group
          record(2, 0, 0, "Lyon", VALID_WRONG, reward=0.2),
          record(2, 0, 1, "Lyon", VALID_WRONG, reward=0.2)]


def test_the_rows_rescore_to_the_logged_rewards_under_the_runs_design():
  r = recs()
  assert rd.logged_matches(r, FORMAT[1], FORMAT[2]) == 6
  np.testing.assert_allclose(rd.rescore(r, FORMAT[1], FORMAT[2]), [1, .2, .2, 0, .2, .2])
  assert rd.logged_matches(r, EM[1], EM[2]) == 2          # only the 1.0 and the 0.0 agree
  assert list(rd.group_keys(r)) == [0, 0, 1, 1, 2, 2]


def test_signal_by_hand():
  out = rd.compare(recs(), [FORMAT, EM])
  assert out["rows"] == 6 and out["steps"] == 2 and out["em"] == pytest.approx(1 / 6)
  f, e = out["designs"]["format"], out["designs"]["em"]
  # format: groups (1,0) and (1,1) vary; only the first in EM; (2,0) is constant
  assert (f["varied_groups"], f["em_varied_groups"], f["other_term_only_groups"],
          f["kept_rows"]) == (2, 1, 1, 4)
  # two-row groups: advantages +-a in both; group (1,1) pays the well-formed wrong answer
  # (+a: against EM) and docks the ill-formed one (-a: with it) -> 3 of 4 equal parts aligned
  assert f["aligned"] == pytest.approx(0.75)
  assert (e["varied_groups"], e["em_varied_groups"], e["kept_rows"], e["aligned"]) == (1, 1, 2, 1.0)
  assert e["mean_reward"] == pytest.approx(1 / 6)


def test_cli_prints_the_table_checks_the_design_and_writes_json(tmp_path, capsys):
  d = tmp_path / "rollouts"
  d.mkdir()
  for step in (1, 2):
    with open(d / f"step_{step:06d}.jsonl", "w") as f:
      for rec in recs():
        if rec["step"] == step:
          f.write(json.dumps(rec) + "\n")
  out = tmp_path / "designs.json"
  fmt = 'format=' + json.dumps({"search_r1_format": [1.0, FORMAT[2]["search_r1_format"]]})
  assert rd.main([str(d), "--design", fmt, "--design", 'em={"em": [1.0, {}]}',
                  "--check", "format", "--out", str(out)]) == 0
  printed = capsys.readouterr().out
  assert "reproduces the logged reward on 6 of 6 rows" in printed
  assert "| format | 0.300 | 2 of 3 | 1 | 1 | 4 | 0.75 |" in printed
  assert json.load(open(out))["designs"]["em"]["kept_rows"] == 2
  # the wrong design named as the run's: one error line
  assert rd.main([str(d), "--design", 'em={"em": [1.0, {}]}', "--check", "em"]) == 2
  assert capsys.readouterr().err.strip() == (
      "error: design 'em' is not the run's reward (4 rows differ)")


@pytest.mark.parametrize("design,message", [
    ("noequals", "expected name="),
    ("x={bad", "not JSON"),
    ('x={"em": 1.0}', "must be [weight, {kwargs}]"),
    ('x={"no_such_reward": [1.0, {}]}', "no_such_reward"),
])
def test_bad_designs_get_one_error_line(tmp_path, capsys, design, message):
  f = tmp_path / "step_000001.jsonl"
  f.write_text("".join(json.dumps(r) + "\n" for r in recs()))
  assert rd.main([str(f), "--design", design]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_an_empty_folder_says_how_to_get_dumps(tmp_path, capsys):
  assert rd.main([str(tmp_path), "--design", 'em={"em": [1.0, {}]}']) == 2
  assert "trainer.dump_every" in capsys.readouterr().err
