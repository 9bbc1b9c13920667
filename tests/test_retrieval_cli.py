"""The build and evaluate command lines, run as a user would (subprocesses, real files)."""

import json

import pytest

from _retrieval_helpers import run_module, small_corpus, write_jsonl
import ragjax.retrieval as retrieval
from ragjax.retrieval.recall import has_answer, normalize_answer, read_questions


def test_build_reports_bad_lines_then_evaluate_prints_recall(tmp_path):
  rows = small_corpus(40)
  corpus = write_jsonl(tmp_path / "c.jsonl", rows, raw_lines={5: "{not json", 9: '{"id": "p1", "contents": "dup"}'})
  out = tmp_path / "idx"
  r = run_module("ragjax.retrieval.build", "--corpus", str(corpus), "--out", str(out), "--backend", "bm25")
  assert r.returncode == 0, r.stderr
  assert f"{corpus}:6: malformed: invalid JSON" in r.stderr
  assert f"{corpus}:10: duplicate_id: id 'p1' already seen" in r.stderr
  meta = json.loads(r.stdout.strip().splitlines()[-1])
  assert meta["backend"] == "bm25" and meta["n"] == len(rows)

  r = run_module("ragjax.retrieval.build", "--corpus", str(corpus), "--out", str(tmp_path / "idx2"),
           "--backend", "bm25", "--on-error", "fail")
  assert r.returncode == 2 and f"{corpus}:6: malformed" in r.stderr

  # Two hotpot-format questions with hand-known outcomes: BM25 finds the first gold passage
  # (shared words) and nothing for the second (no word in common with the corpus).
  questions = [{"_id": "q1", "question": "Zürich Käse Schokolade", "answer": "Schokolade",
                "supporting_facts": [["Zürich Grüße", 0]]},
               {"_id": "q2", "question": "Tokyo tower", "answer": "電波塔",
                "supporting_facts": [["東京タワー", 0], ["Zürich Grüße", 0]]}]
  qfile = tmp_path / "q.json"
  qfile.write_text(json.dumps(questions, ensure_ascii=False))
  r = run_module("ragjax.retrieval.evaluate", "--index", str(out), "--questions", str(qfile), "--k", "10")
  assert r.returncode == 0, r.stderr
  result = json.loads(r.stdout.strip().splitlines()[-1])
  assert result["questions"] == 2
  for k in ("1", "3", "10"):
    assert result["recall"][k]["support_recall"] == pytest.approx(0.5)    # (1 + 0) / 2
    assert result["recall"][k]["support_all"] == pytest.approx(0.5)
    assert result["recall"][k]["answer_recall"] == pytest.approx(0.5)
  assert "support recall" in r.stdout and "answer recall" in r.stdout

  # The package-level entry point opens the same index.
  hits = retrieval.open_index(str(out)).search(["Zürich Käse Schokolade"], 1)
  assert hits[0][0].title == "Zürich Grüße"


def test_cli_argument_errors_are_clear(tmp_path):
  r = run_module("ragjax.retrieval.build", "--corpus", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o"))
  assert r.returncode == 2 and "--corpus file not found" in r.stderr
  r = run_module("ragjax.retrieval.evaluate", "--index", str(tmp_path), "--questions", str(tmp_path / "q.json"))
  assert r.returncode == 2 and "--questions file not found" in r.stderr
  (tmp_path / "q.json").write_text("[]")
  r = run_module("ragjax.retrieval.evaluate", "--index", str(tmp_path), "--questions", str(tmp_path / "q.json"))
  assert r.returncode != 0 and "is not a ragjax index" in r.stderr


def test_question_formats_and_answer_matching(tmp_path):
  hf = {"id": "h", "question": "q?", "answer": "Tulsa",
        "supporting_facts": {"title": ["A", "B", "A"], "sent_id": [0, 1, 2]}}
  flash = {"id": "f", "question": "q?", "golden_answers": ["x", "y"],
           "metadata": {"supporting_facts": [["C", 0]]}}
  musique = {"id": "m", "question": "q?", "answer": "Paris", "answer_aliases": ["City of Light"],
             "paragraphs": [{"title": "D", "paragraph_text": "t", "is_supporting": True},
                            {"title": "E", "paragraph_text": "t", "is_supporting": False}]}
  write_jsonl(tmp_path / "q.jsonl", [hf, flash, musique])
  qs = read_questions(str(tmp_path / "q.jsonl"))
  assert [q.gold_titles for q in qs] == [("A", "B"), ("C",), ("D",)]
  assert qs[2].answers == ("Paris", "City of Light")
  assert normalize_answer("The  Beatles!") == "beatles"
  assert has_answer(["the Beatles"], "A song by The Beatles, 1965.")
  assert not has_answer(["Tuls"], "Tulsa, Oklahoma")        # whole tokens only
  (tmp_path / "bad.jsonl").write_text('{"question": "q"}\n')
  with pytest.raises(ValueError, match=r"bad\.jsonl:1: record has neither 'golden_answers' nor 'answer'"):
    read_questions(str(tmp_path / "bad.jsonl"))


def _usage_error(main, argv, capsys):
  with pytest.raises(SystemExit) as e:
    main(argv)
  err = capsys.readouterr().err
  assert e.value.code == 2, err
  return err.strip().splitlines()[-1]          # argparse: usage line(s), then the error line


@pytest.mark.parametrize("module,argv,flag,says", [
    ("server", ["--port", "70000"], "--port", "1..65535"),
    ("server", ["--port", "-1"], "--port", "1..65535"),
    ("server", ["--topk", "0"], "--topk", ">= 1"),
    ("server", ["--cache-size", "-5"], "--cache-size", ">= 0"),
    ("server", ["--max-queries", "0"], "--max-queries", ">= 1"),
    ("server", ["--max-query-chars", "-1"], "--max-query-chars", ">= 1"),
    ("server", ["--topk", "10", "--max-topk", "5"], "--topk", "<= --max-topk (5)"),
    ("evaluate", ["--batch", "0"], "--batch", ">= 1"),
    ("evaluate", ["--limit", "-3"], "--limit", ">= 1"),
    ("evaluate", ["--k", "0"], "--k", ">= 1"),
    ("build", ["--batch-size", "0"], "--batch-size", ">= 1"),
    ("build", ["--chunk-rows", "-1"], "--chunk-rows", ">= 1"),
    ("build", ["--max-length", "0"], "--max-length", ">= 1"),
])
def test_out_of_range_numbers_are_usage_errors_naming_the_flag(tmp_path, capsys, module, argv, flag, says):
  import importlib
  main = importlib.import_module(f"ragjax.retrieval.{module}").main
  required = {"server": ["--index", str(tmp_path)],
              "evaluate": ["--index", str(tmp_path), "--questions", str(tmp_path / "q.json")],
              "build": ["--corpus", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "o")]}[module]
  line = _usage_error(main, required + argv, capsys)
  assert f"argument {flag}:" in line and says in line, line


def test_build_checks_scann_overrides(tmp_path, capsys):
  from ragjax.retrieval.build import main
  base = ["--corpus", str(tmp_path), "--out", str(tmp_path / "o"), "--scann"]
  for override, says in [('{"reorder": -1}', "reorder must be an int >= 0, got -1"),
                         ('{"num_leaves": 0}', "num_leaves must be an int >= 1, got 0"),
                         ('{"leaves_to_search_frac": 0}', "leaves_to_search_frac must be in (0, 1]")]:
    line = _usage_error(main, base + [override], capsys)
    assert f"error: --scann: {says}" in line, line


def test_serve_port_out_of_range_exits_2_without_listening(tmp_path):
  r = run_module("ragjax.retrieval.server", "--index", str(tmp_path), "--port", "70000")
  assert r.returncode == 2 and "argument --port: must be a TCP port in 1..65535" in r.stderr
  assert "Traceback" not in r.stderr


def test_build_reports_corpus_problems_in_one_line(tmp_path, capsys):
  from ragjax.retrieval.build import main
  (tmp_path / "empty.jsonl").write_text("")
  write_jsonl(tmp_path / "bad.jsonl", [{"paragraphs": 5}, {"context": {"title": 1, "sentences": 2}}])
  cases = [(tmp_path, "is a directory"),
           (tmp_path / "empty.jsonl", "no usable passages in"),
           (tmp_path / "bad.jsonl", f"the first: {tmp_path / 'bad.jsonl'}:1: malformed: field 'paragraphs'")]
  for corpus, says in cases:
    code = main(["--corpus", str(corpus), "--out", str(tmp_path / "out"), "--backend", "bm25",
                 "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
  write_jsonl(tmp_path / "mixed.jsonl", [{"paragraphs": 5}, {"id": "a", "contents": '"T"\nok'}])
  assert main(["--corpus", str(tmp_path / "mixed.jsonl"), "--out", str(tmp_path / "out2"),
               "--backend", "bm25", "--no-progress"]) == 0
  assert f"warning: {tmp_path / 'mixed.jsonl'}:1: malformed: field 'paragraphs'" in capsys.readouterr().err


def test_evaluate_reports_unreadable_question_files_in_one_line(tmp_path, capsys):
  from ragjax.retrieval.evaluate import main
  (tmp_path / "deep.jsonl").write_text("[" * 100000 + "]" * 100000 + "\n")
  for questions, says in [(tmp_path / "deep.jsonl", ":1: invalid JSON (nested deeper"),
                          (tmp_path, "is a directory")]:
    line = _usage_error(main, ["--index", str(tmp_path), "--questions", str(questions)], capsys)
    assert "argument" not in line and "--questions:" in line and says in line, line
