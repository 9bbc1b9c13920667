"""`python -m ragjax.compare`: the paper-layout table of several configs' runs.

The table's numbers on a hand-computed example; the retrieve-once protocol's prompt; and the
command end to end on real parts: `configs/smollm2.py:tiny` with its policy swapped for the
small bigram-chain checkpoint of tests/_eval_helpers.py (it searches once, then answers
"December 1972") over 300 shared passages, one RL step through `python -m ragjax.train`, the
rows evaluated on the first 2 questions of each `covered` dataset (the held-out HotpotQA split
in place of the suite's own).  A second invocation reruns nothing, a third after a kill inside
an evaluation only what it had not written, and a fourth in a new directory reading the first's
row records (`--rows_from`) trains and evaluates nothing for the same table; a row record's
round trip and what makes it fit (or not) by hand; a config variant that does
not exist, a run that fails, `--skip` and a cold start the run does not have are "not run"
rows that say why; bad input is one error line.
"""

import json
import os
import sys

import pytest

from conftest import SHARED_DATA
from _recipe_helpers import ROOT, train_env
import _preloaded as preloaded

ANSWER = "December 1972"


# --- the table, by hand -------------------------------------------------------------------------
def preds(ems, f1s, searches):
  return [{"index": i, "id": f"q{i}", "scores": {"em": e, "f1": f}, "searches": s, "seconds": 0.5}
          for i, (e, f, s) in enumerate(zip(ems, f1s, searches))]


def test_table_numbers_by_hand():
  from ragjax.eval.comparison import Row, comparison_table
  ref = Row("Search-R1 GRPO", {"a": preds([1, 0, 1, 0], [1, .5, 1, 0], [1, 1, 2, 0]),
                               "b": preds([0, 1], [0, 1], [1, 1])}, run_seconds=100.0)
  m = Row("method", {"a": preds([1, 1, 1, 0], [1, 1, 1, .5], [2] * 4),
                     "b": preds([1, 1], [1, 1], [2, 2])}, run_seconds=50.0)
  x = Row("broken", None, "run failed (exit 2)")
  out = comparison_table([ref, m, x], [("a", "A"), ("b", "B")], "Search-R1 GRPO")
  rows = {r["system"]: r for r in out["json"]["rows"]}
  r, q = rows["Search-R1 GRPO"], rows["method"]
  assert r["cells"]["a"]["em"]["mean"] == pytest.approx(50) and r["cells"]["a"]["f1"]["mean"] == \
      pytest.approx(62.5)
  assert r["average"]["em"]["mean"] == pytest.approx(50) and r["average"]["f1"]["mean"] == \
      pytest.approx(56.25)                          # (62.5 + 50) / 2: macro, not pooled (58.3)
  assert q["average"]["em"]["mean"] == pytest.approx(87.5)
  assert r["searches"] == pytest.approx(1.0) and q["searches"] == pytest.approx(2.0)
  assert r["eval_seconds"] == pytest.approx(3.0) and "paired" not in r
  # method − reference: A 75 − 50 = 25, B 100 − 50 = 50, macro 37.5 (EM); F1 87.5 − 62.5 and
  # 100 − 50: macro 37.5; the per-question differences are never negative, so neither is the
  # interval's low end; McNemar on EM pooled: 2 discordant pairs, both for the method: p = 0.5
  d = q["paired"]["em"]
  assert d["a"]["diff"] == pytest.approx(25) and d["b"]["diff"] == pytest.approx(50)
  assert d["_average"]["diff"] == pytest.approx(37.5) and d["_average"]["ci95"][0] >= 0
  assert d["_average"]["mcnemar"]["p"] == pytest.approx(0.5)
  assert q["paired"]["f1"]["_average"]["diff"] == pytest.approx(37.5)
  md = out["markdown"]
  assert "| method | 75.0 [" in md and "| +37.5 [" in md and "| 2.00 | 50 | 3 |" in md
  assert "| Search-R1 GRPO |" in md and "| reference | reference |" in md
  assert "| broken | " + " | ".join(["not run"] * 11) + " |" in md
  assert "- broken: not run — run failed (exit 2)" in md
  assert "| |" not in md and "||" not in md.replace("|---|", "")


def test_retrieve_once_prompt_reads_the_records_documents():
  from ragjax.rollout.protocols import get_protocol
  from ragjax.rollout.protocols.base import as_prompt_input
  p = get_protocol("retrieve_once", top_k=2, max_turns=0)
  inp = as_prompt_input({"question": "who wrote it", "documents": "Doc 1(Title: A) b\n"})
  text = p.user_message(inp)
  assert text.endswith("<information>Doc 1(Title: A) b</information>\nQuestion: who wrote it?")
  assert "using the documents below, without searching" in text
  assert p.user_message(as_prompt_input({"question": "q"})) == \
      get_protocol("direct").user_message(as_prompt_input({"question": "q"}))
  with pytest.raises(ValueError, match="'documents' must be a string"):
    as_prompt_input({"question": "q", "documents": ["x"]})


# --- row records -------------------------------------------------------------------------------
def record_header(**kw):
  h = {"key": "m", "name": "method", "source": "configs/m.py",
       "run": {"fingerprint": {"model.checkpoint": "/a/b/model.gguf", "rl.lr": 1e-3},
               "seconds": 12.0},
       "evaluation": {"policy": {"path": "/x/policy", "sha256": "p1"},
                      "datasets": {"a": {"file": {"path": "/d/a.jsonl", "sha256": "f", "bytes": 9},
                                         "protocol": {"top_k": 3}}}},
       "limit": 0, "sizes": {"a": 2}}
  h.update(kw)
  return h


def test_row_record_round_trip_and_what_makes_it_fit(tmp_path):
  from ragjax.eval import row_record as rr
  row = {"a": [{**p, "answer": "x"} for p in preds([1, 0], [1, .25], [1, 2])]}
  path = str(tmp_path / "rows" / "m.jsonl")
  assert rr.write_row(path, record_header(), row)
  before = os.stat(path).st_mtime_ns
  assert not rr.write_row(path, record_header(), row)        # the same row: left as it is
  assert os.stat(path).st_mtime_ns == before
  rec = rr.read_rows([str(tmp_path / "rows")])["m"]
  assert [p["scores"] for p in rec.preds["a"]] == [{"em": 1, "f1": 1}, {"em": 0, "f1": .25}]
  assert rec.preds["a"][1]["searches"] == 2 and rec.header["machine"]["cpus"] == os.cpu_count()
  # the same config elsewhere: paths by file name; another value is named
  assert rr.run_mismatch(rec, {"model.checkpoint": "/elsewhere/model.gguf", "rl.lr": 1e-3}) is None
  why = rr.run_mismatch(rec, {"model.checkpoint": "/a/b/model.gguf", "rl.lr": 5e-4})
  assert "another config (rl.lr)" in why
  key = record_header()["evaluation"]
  moved = json.loads(json.dumps(key))
  moved["datasets"]["a"]["file"]["path"] = "/other/a.jsonl"
  moved["policy"] = None                                       # the policy is not here
  assert rr.evaluation_mismatch(rec, moved, 0) is None
  assert "--limit 0, not 2" in rr.evaluation_mismatch(rec, moved, 2)
  other = json.loads(json.dumps(moved))
  other["datasets"]["a"]["file"]["sha256"] = "g"
  assert "another question file" in rr.evaluation_mismatch(rec, other, 0)
  other = json.loads(json.dumps(moved))
  other["datasets"]["a"]["protocol"]["top_k"] = 5
  assert "other settings (protocol)" in rr.evaluation_mismatch(rec, other, 0)
  here = dict(moved, policy={"path": "/x/policy", "sha256": "p2"})
  assert "another policy" in rr.evaluation_mismatch(rec, here, 0)
  # bad records: one message naming the file and line
  bad = tmp_path / "bad.jsonl"
  for text, message in (("", "empty"), ("[1]\n", "line 1: not a row record"),
                        (open(path).read() + "{\"dataset\": \"a\"}\n", "line 4: a question line without"),
                        (open(path).read().replace('"f1": 0.25', '"f1": "x"'),
                         "line 3: scores must hold numbers")):
    bad.write_text(text)
    with pytest.raises(ValueError, match=message):
      rr.read_rows([str(bad)])
  (tmp_path / "rows2").mkdir()
  (tmp_path / "rows2" / "again.jsonl").write_text(open(path).read())
  with pytest.raises(ValueError, match="row 'm' is in both"):
    rr.read_rows([str(tmp_path / "rows"), str(tmp_path / "rows2")])


# --- the command, end to end -------------------------------------------------------------------
CONFIG = '''"""configs/smollm2.py:tiny on the chain policy and 300 passages (tests/test_compare.py)."""
import importlib.util, os
HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("smollm2_for_compare", {smollm2!r})
smollm2 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(smollm2)


def get_config(arg="default"):
  if arg != "default":
    raise ValueError(f"unknown config argument {{arg!r}}; use one of ['default']")
  c = smollm2.get_config("tiny")
  c.model.checkpoint = os.path.join(HERE, "policy")
  c.model.lora.layers = 1               # the chain has one layer
  c.retriever.corpus = os.path.join(HERE, "corpus.jsonl")
  c.sft.steps = 0                       # no cold start: its row is "not run"
  c.eval.baselines = False
  c.pool.update(dict(retrievable=False, exclude_cold_start=False, max_questions=0))
  c.progress = False
{extra}  return c
'''


def compare(cwd, *args):
  return preloaded.run([sys.executable, "-m", "ragjax.compare", *args], cwd=cwd,
                       env=train_env(), capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared data absent")
def test_compare_runs_then_reuses_everything_and_says_what_was_not_run(tmp_path):
  from _eval_helpers import chain_policy, corpus_slice, train_tokenizer_here
  chain_policy(str(tmp_path / "policy"), train_tokenizer_here(ANSWER), ANSWER)
  corpus_slice(SHARED_DATA, str(tmp_path / "corpus.jsonl"))
  smollm2 = os.path.join(ROOT, "configs", "smollm2.py")
  (tmp_path / "chain.py").write_text(CONFIG.format(smollm2=smollm2, extra=""))
  # a run that fails: a reward no registry holds (the train command refuses it at once)
  (tmp_path / "broken.py").write_text(CONFIG.format(
      smollm2=smollm2, extra="  c.rl.rewards = {'no_such_reward': 1.0}\n"))
  args = ["--workdir=D", "--limit=2", "--configs", "chain.py", "chain.py:nosuch", "broken.py"]
  first = compare(tmp_path, *args)
  assert first.returncode == 0, first.stderr[-3000:]
  assert first.stdout.count(": training (") == 2        # chain and broken; nosuch has no config
  D = tmp_path / "D"
  table = json.loads((D / "table.json").read_text())
  rows = {r["system"]: r for r in table["rows"]}
  assert list(rows) == ["direct answer", "retrieve-once RAG", "cold start", "Search-R1 GRPO",
                        "chain.py:nosuch", "broken.py"]
  assert rows["cold start"]["status"] == "not run" and "no cold start" in rows["cold start"]["reason"]
  assert "no variant 'nosuch'" in rows["chain.py:nosuch"]["reason"]
  assert rows["broken.py"]["reason"].startswith("run failed (exit 2: ragjax.train: error:")
  assert "no_such_reward" in rows["broken.py"]["reason"]
  # every evaluated row: the numbers are the predictions' own (2 questions a column)
  for key, name in (("direct", "direct answer"), ("rag", "retrieve-once RAG"),
                    ("chain", "Search-R1 GRPO")):
    for col in ("hotpotqa", "twowiki", "musique"):
      lines = (D / "eval" / key / "predictions" / f"{col}.jsonl").read_text().splitlines()
      got = [json.loads(l) for l in lines]
      assert len(got) == 2
      cell = rows[name]["cells"][col]
      assert cell["em"]["mean"] == pytest.approx(50 * sum(p["scores"]["em"] for p in got))
      assert cell["f1"]["mean"] == pytest.approx(50 * sum(p["scores"]["f1"] for p in got))
  # the held-out column is the run's own test split; the chain searches once on every question
  held = [json.loads(l) for l in (D / "data" / "test.jsonl").read_text().splitlines()]
  run_test = [json.loads(l) for l in (D / "runs" / "chain" / "data" / "test.jsonl")
              .read_text().splitlines()]
  assert [h["id"] for h in held] == [r["id"] for r in run_test]
  assert rows["Search-R1 GRPO"]["searches"] == pytest.approx(1.0)
  assert rows["Search-R1 GRPO"]["run_seconds"] > 0 and rows["direct answer"]["searches"] == 0
  # the comparison evaluates the policy itself: its run skipped the qa recipe's test rows
  results = (D / "runs" / "chain" / "results.md").read_text()
  assert "(no test rows: eval.test_rows=False)" in results and "trained + search" not in results
  assert "--config.eval.test_rows=False" in (D / "runs" / "chain" / "train.log").read_text()
  # retrieve-once: the question's own passages in the prompt, no search of its own
  rag = json.loads((D / "eval" / "rag" / "predictions" / "hotpotqa.jsonl").read_text()
                   .splitlines()[0])
  prompt = rag["trajectory"]["spans"][0]["text"]
  assert "using the documents below" in prompt and "<information>Doc 1(Title:" in prompt
  assert rag["trajectory"]["protocol"] == "retrieve_once" and rag["searches"] == 0
  md = (D / "table.md").read_text()
  assert "| cold start | not run |" in md and "| chain.py:nosuch | not run |" in md

  # again, the broken config skipped: nothing is trained or evaluated again
  files = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in D.rglob("*")
           if p.is_file() and p.name not in ("table.md", "table.json")}
  second = compare(tmp_path, *args, "--skip=broken.py")
  assert second.returncode == 0, second.stderr[-3000:]
  assert ": training (" not in second.stdout and "evaluating" not in second.stdout
  assert second.stdout.count("reusing the finished evaluation") == 3
  assert second.stdout.count("reusing the finished run") == 1
  assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in files} == files
  again = {r["system"]: r for r in json.loads((D / "table.json").read_text())["rows"]}
  assert again["broken.py"]["reason"] == "--skip"
  for name in ("direct answer", "retrieve-once RAG", "Search-R1 GRPO"):
    assert again[name]["cells"] == rows[name]["cells"]

  # what a comparison killed inside an evaluation leaves: that row's record not done, a batch
  # of its predictions not written; run again, only that batch runs
  record = D / "eval" / "direct" / "compare_eval.json"
  record.write_text(json.dumps(dict(json.loads(record.read_text()), done=False)))
  musique = D / "eval" / "direct" / "predictions" / "musique.jsonl"
  musique.write_text("")
  third = compare(tmp_path, *args, "--skip=broken.py")
  assert third.returncode == 0, third.stderr[-3000:]
  assert ": training (" not in third.stdout and third.stdout.count("evaluating") == 1
  assert "direct answer: evaluating" in third.stdout
  assert "2 questions to run (4 on disk)" in third.stdout
  final = {r["system"]: r for r in json.loads((D / "table.json").read_text())["rows"]}
  assert final["direct answer"]["cells"] == rows["direct answer"]["cells"]

  # the rows carried elsewhere: a new comparison directory (no runs, no evaluations) reading
  # D's row records trains and evaluates nothing and sets out the same table
  assert sorted(p.name for p in (D / "rows").iterdir()) == ["chain.jsonl", "direct.jsonl",
                                                             "rag.jsonl"]
  carried = compare(tmp_path, "--workdir=E", "--limit=2", "--configs", "chain.py",
                    "chain.py:nosuch", "--rows_from", str(D / "rows"))
  assert carried.returncode == 0, carried.stderr[-3000:]
  assert ": training (" not in carried.stdout and "evaluating" not in carried.stdout
  assert carried.stdout.count("reading the row from") == 3
  assert "chain: no finished run here; its row is read from" in carried.stdout
  got = {r["system"]: r for r in json.loads((tmp_path / "E" / "table.json").read_text())["rows"]}
  for name in ("direct answer", "retrieve-once RAG", "Search-R1 GRPO"):
    assert got[name]["cells"] == rows[name]["cells"], name
    assert "read from" in got[name]["source"]
  assert got["Search-R1 GRPO"]["run_seconds"] == rows["Search-R1 GRPO"]["run_seconds"]
  assert "rows read from row records" in (tmp_path / "E" / "table.md").read_text()
  assert not (tmp_path / "E" / "runs" / "chain").exists()



def test_bad_input_is_one_error_line(tmp_path):
  (tmp_path / "file").write_text("x")
  cases = [(["--workdir=D", "--configs=nope.py"], "--configs nope.py: no config file"),
           ([f"--workdir={tmp_path / 'file' / 'D'}", "--configs=configs/smollm2.py"],
            "is a file, not a directory"),
           (["--workdir=D", "--configs=configs/smollm2.py", "--skip=smolm2"],
            "--skip smolm2: not a row"),
           (["--workdir=D", "--configs=configs/smollm2.py", "--heldout=nq"],
            "--heldout nq: suite covered has no such dataset"),
           (["--workdir=D", "--configs=configs/smollm2.py:nosuch"],
            "the first config is the Search-R1 reference and does not load"),
           (["--workdir=D", "--configs=configs/smollm2.py", f"--rows_from={tmp_path / 'file'}"],
            "line 1: not JSON (not a row record)"),
           (["--workdir=D", "--configs=configs/smollm2.py", "--rows_from=nowhere"],
            "--rows_from nowhere: no such file or directory")]
  for args, message in cases:
    proc = compare(ROOT, *args)
    assert proc.returncode == 2, (args, proc.stderr)
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("ragjax.compare: error: ") and message in line, line
  assert not os.path.exists(os.path.join(ROOT, "D"))
