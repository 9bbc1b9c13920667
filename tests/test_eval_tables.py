"""The harness's parts on hand-computed examples: McNemar and the paired / stratified bootstrap,
the paper-layout table (macro, weighted, groups, missing and partial columns, the published row
and differences), the predictions store after a torn write, suite validation, the published
rows against the spec's tables, the UR² metrics and readers, and `ragjax.data.prepare`'s
Search-R1 training mixture."""

import json
import math
import os
import re
import sys

import numpy as np
import pytest

from conftest import SHARED_DATA
import _preloaded as preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECS = os.path.join(os.path.dirname(SHARED_DATA), "research")
sys.path.insert(0, os.path.join(ROOT, "configs"))


def _config():
  import search_r1
  return search_r1.get_config("tiny")


# --- paired tests -----------------------------------------------------------------------------
def test_mcnemar_on_hand_computed_tables():
  from ragjax.eval.paired import mcnemar
  # 10 questions A right / B wrong, 2 the other way, 5 both right, 3 both wrong
  a = [1] * 10 + [0] * 2 + [1] * 5 + [0] * 3
  b = [0] * 10 + [1] * 2 + [1] * 5 + [0] * 3
  r = mcnemar(a, b)
  # exact: 2 * P(X <= 2), X ~ Bin(12, 1/2) = 2 * (1 + 12 + 66) / 4096
  assert (r["b"], r["c"]) == (10, 2) and r["method"] == "exact binomial"
  assert r["p"] == pytest.approx(158 / 4096, rel=1e-12)
  # 30 vs 10 discordant: chi2 = (|30 - 10| - 1)^2 / 40 = 9.025, p = erfc(sqrt(9.025 / 2))
  a = [1] * 30 + [0] * 10 + [1] * 50
  b = [0] * 30 + [1] * 10 + [1] * 50
  r = mcnemar(a, b)
  assert r["chi2"] == pytest.approx(9.025) and r["p"] == pytest.approx(
      math.erfc(math.sqrt(9.025 / 2)), rel=1e-9)
  assert mcnemar([1, 0], [1, 0])["p"] == 1.0


def test_paired_bootstraps():
  from ragjax.eval.paired import stratified_macro_diff
  from ragjax.report.bootstrap import bootstrap_diff
  assert bootstrap_diff([1, 1, 0, 1], [0, 1, 0, 0]).mean == pytest.approx(0.5)
  same = bootstrap_diff([0.3] * 50, [0.1] * 50)
  assert (same.mean, same.low, same.high) == pytest.approx((0.2, 0.2, 0.2))
  # two datasets, 40 and 10 questions: the macro difference is the mean of their differences
  rng = np.random.default_rng(0)
  a1, b1 = rng.integers(0, 2, 400), rng.integers(0, 2, 400)
  a2, b2 = np.ones(10), np.zeros(10)
  m = stratified_macro_diff([(a1, b1), (a2, b2)], resamples=4000)
  d1 = (a1 - b1).mean()
  assert m.mean == pytest.approx((d1 + 1.0) / 2) and m.n == 410
  # dataset 2's difference is constant, so the interval is dataset 1's halved: normal approx.
  se = (a1 - b1).std() / math.sqrt(400) / 2
  assert m.low == pytest.approx(m.mean - 1.96 * se, abs=0.01)
  assert m.high == pytest.approx(m.mean + 1.96 * se, abs=0.01)


# --- the table --------------------------------------------------------------------------------
def _suite(**over):
  from ragjax.eval.suites import get_suite
  s = dict(
      title="t", columns=("a", "b", "c", "d"), groups={"G": ("a", "b")},
      datasets=dict(a=dict(name="A", file="a.jsonl", paper_n=10),
                    b=dict(name="B", file="b.jsonl"), c=dict(name="C", file="c.jsonl"),
                    d=dict(name="D", file="d.jsonl", metric="letter_em")),
      metrics=("em", "f1"), paper_table="t")
  s.update(over)
  return get_suite({"suites": {"s": s}}, "s")


def _preds(key, ems, f1s=None, searches=1, extra=None):
  out = []
  for i, em in enumerate(ems):
    sc = {"em": em, "f1": (f1s or ems)[i], **(extra[i] if extra else {})}
    out.append({"index": i, "id": f"{key}{i}", "scores": sc, "searches": searches,
                "answer": "x"})
  return out


def test_summary_averages_missing_partial_and_published():
  from ragjax.eval.paper_table import summarize
  suite = _suite()
  preds = {"a": _preds("a", [1, 0, 0, 0], [1, 0.5, 0, 0]), "b": _preds("b", [1, 1], searches=2),
           "d": _preds("d", [0, 0, 1], extra=[{"letter_em": x} for x in (1, 0, 1)])}
  published = {"method": "M", "model": "m", "source": "spec §x",
               "values": {"a": {"em": 20.0}, "b": {"em": 50.0}, "d": {"letter_em": 60.0}},
               "averages": {"G": {"em": 40.0}, "Avg": {"em": 10.0}}}
  s = summarize(suite, preds, {"a": 4, "b": 3, "d": 3}, {"c": "/x/c.jsonl"}, published)
  cols = s["columns"]
  assert cols["a"]["values"] == {"em": 25.0, "f1": 37.5}
  assert cols["b"]["status"] == "partial" and cols["c"]["status"] == "missing"
  assert cols["d"]["paper_metric"] == pytest.approx(200 / 3)     # letter EM, its own metric
  g = s["averages"]["G"]
  assert g["em"]["macro"] == pytest.approx((25 + 100) / 2)
  assert g["em"]["weighted"] == pytest.approx(100 * 3 / 6) and g["complete"]
  avg = s["averages"]["Avg (macro)"]
  assert avg["paper_metric"]["macro"] is None        # EM and letter EM are not averaged
  assert not avg["complete"] and avg["present"] == 3
  assert s["weighted"]["paper_metric"] is None
  assert s["searches_weighted"] == pytest.approx((4 + 4 + 3) / 9)
  assert s["delta"] == pytest.approx({"a": 5.0, "b": 50.0, "d": 200 / 3 - 60, "G": 22.5})
  md = s["markdown"]
  assert "| questions | 4 (paper 10) | 2 of 3 (partial) | missing | 3 |" in md
  assert "| paper metric | 25.0 (EM) | 100.0 (EM) | – (EM) | 66.7 (letter EM) |" in md
  assert "C: MISSING — /x/c.jsonl" in md and "B: only 2 of 3" in md
  assert "| published: M / m | 20.0 | 50.0 | – | 60.0 | 40.0 | – |" in md
  lines = s["csv"].splitlines()
  assert lines[0] == ",A,B,C,D,G,Avg (macro) (3 of 4),Avg (weighted by n)"
  assert lines[2] == "EM,25.0,100.0,,,62.5,,"        # D reports letter EM only


def test_a_column_reports_only_its_task_metric_and_averages_combine_like_metrics():
  """A multiple-choice column reports letter EM only, a math column math equivalence only
  (their EM / F1 / cover-EM mean nothing), and an average exists only over columns that all
  report the same metric: no overall average of letter EM with F1."""
  from ragjax.eval.paper_table import summarize
  suite = _suite(columns=("a", "b", "c", "d"), groups={"QA": ("a", "b"), "Mixed": ("a", "d")},
                 datasets=dict(a=dict(file="a.jsonl"), b=dict(file="b.jsonl"),
                               c=dict(file="c.jsonl", metric="math_equiv"),
                               d=dict(file="d.jsonl", metric="letter_em")),
                 metrics=("em", "f1"))
  assert suite.metrics_of("d") == ("letter_em",) and suite.metrics_of("c") == ("math_equiv",)
  assert suite.metrics_of("a") == ("em", "f1")
  # stored records as an older run wrote them: every metric on every column
  every = lambda xs: [{"letter_em": x, "math_equiv": x} for x in xs]
  preds = {"a": _preds("a", [1, 0], extra=every([0, 0])), "b": _preds("b", [1, 1]),
           "c": _preds("c", [0, 0], extra=every([1, 0])),
           "d": _preds("d", [1, 1, 1], extra=every([1, 0, 0]))}
  s = summarize(suite, preds, {"a": 2, "b": 2, "c": 2, "d": 3}, {})
  cols, avgs = s["columns"], s["averages"]
  assert cols["d"]["values"] == {"letter_em": pytest.approx(100 / 3)}
  assert cols["c"]["values"] == {"math_equiv": 50.0}
  assert cols["a"]["values"] == {"em": 50.0, "f1": 50.0}
  assert avgs["QA"]["em"]["macro"] == 75.0 and avgs["QA"]["paper_metric"]["macro"] == 75.0
  for title in ("Mixed", "Avg (macro)"):
    assert avgs[title]["paper_metric"]["macro"] is None, title      # EM with letter EM
    assert avgs[title]["em"]["macro"] is None and avgs[title]["letter_em"]["macro"] is None
  assert s["weighted"]["paper_metric"] is None and s["weighted"]["em"] is None
  md = s["markdown"]
  assert "| EM | 50.0 | 100.0 | – | – | 75.0 | – | – | – |" in md
  assert "| letter EM | – | – | – | 33.3 | – | – | – | – |" in md


def test_difference_from_the_paper_averages_the_papers_datasets_only():
  """With a dataset added to a suite, our Avg column covers every dataset, but the difference
  from the paper's Avg (and a group's) is taken over the datasets the paper averages only,
  and the note says how many."""
  from ragjax.eval.paper_table import summarize
  suite = _suite(columns=("a", "b", "c", "e"), groups={"G": ("a", "b", "e")},
                 datasets=dict(a=dict(name="A", file="a"), b=dict(name="B", file="b"),
                               c=dict(name="C", file="c"), e=dict(name="E", file="e")),
                 metrics=("em",))
  preds = {"a": _preds("a", [1, 0]), "b": _preds("b", [1, 1]), "c": _preds("c", [0, 0]),
           "e": _preds("e", [1, 1])}
  published = {"method": "M", "model": "m", "source": "Paper, Table 1",
               "values": {k: {"em": 30.0} for k in "abc"},
               "averages": {"Avg": {"em": 40.0}, "G": {"em": 70.0}}}
  s = summarize(suite, preds, {k: 2 for k in "abce"}, {}, published)
  assert s["averages"]["Avg (macro)"]["paper_metric"]["macro"] == 62.5     # all 4 columns
  assert s["delta"]["Avg (macro)"] == pytest.approx(50.0 - 40.0)           # a, b, c only
  assert s["delta"]["G"] == pytest.approx(75.0 - 70.0)                     # a, b only
  assert s["delta_over"] == {"Avg (macro)": ["a", "b", "c"], "G": ["a", "b"]}
  md = s["markdown"]
  assert "over all 4" not in md
  assert ("ours − published for Avg (macro): over the 3 datasets the paper averages (A, B, "
          "C), not the 4 here") in md
  assert "| ours − published (points) | 20.0 | 70.0 | -30.0 | – | 5.0 | 10.0 |  |" in md


def test_suite_validation_names_the_field():
  from ragjax.eval.suites import get_suite
  with pytest.raises(ValueError, match=r"eval.suites.s.datasets.a: unknown field\(s\) \['fiel'\]"):
    _suite(datasets=dict(a=dict(file="x", fiel=1), b=dict(file="y"), c=dict(file="z"),
                         d=dict(file="w")))
  with pytest.raises(ValueError, match="columns"):
    _suite(columns=("a", "b"))
  with pytest.raises(ValueError, match=r"metric 'acc' needs judge_template"):
    _suite(metrics=("acc",))
  with pytest.raises(ValueError, match="unknown suite 'nope'"):
    get_suite(_config().eval, "nope")
  c = _config()
  for name in c.eval.suites:
    s = get_suite(c.eval, name)
    # a paper's suite cites the spec of its protocol; one no paper reports cites its data
    assert s.datasets and s.source.startswith("seeds_" if s.paper_table else "../shared/data/")
  c.eval.suites.search_r1.datasets.nq.file = "/mine/nq.jsonl"     # suites own their datasets
  assert get_suite(c.eval, "autorefine").dataset("nq").file != "/mine/nq.jsonl"


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared data absent")
def test_every_suite_file_is_on_this_machine_but_triviaqa():
  from ragjax.eval.suites import DEFAULT_DATA_ROOT, get_suite, read_dataset
  c = _config()
  assert os.path.samefile(DEFAULT_DATA_ROOT, SHARED_DATA)
  for name in c.eval.suites:
    suite = get_suite(c.eval, name)
    for d in suite.datasets:
      if d.key == "triviaqa":
        assert d.path(SHARED_DATA) is None
        continue
      assert d.path(SHARED_DATA), (name, d.key)
      if name == "ur2" or d.key == "nq":
        recs = read_dataset(d, SHARED_DATA)
        assert len(recs) == d.paper_n, (name, d.key)   # UR² and NQ: the paper's full sets
        assert all(r["golden_answers"] for r in recs)


def test_predictions_store_cuts_a_torn_write(tmp_path):
  from ragjax.eval.predictions import PredictionError, PredictionStore, check_matches
  store = PredictionStore(str(tmp_path))
  store.append("nq", [{"index": 0, "id": "q0"}, {"index": 1, "id": "q1"}])
  with open(store.path("nq"), "a") as f:
    f.write('{"index": 2, "id": "q')                       # killed mid-write
  assert sorted(store.load("nq")) == [0, 1]
  assert open(store.path("nq")).read().endswith('"q1"}\n')  # the torn tail is gone
  store.append("nq", [{"index": 2, "id": "q2"}])
  done = store.load("nq")
  assert sorted(done) == [0, 1, 2]
  with pytest.raises(PredictionError, match="stored prediction 1 is question 'q1'"):
    check_matches("nq", done, [{"id": "q0"}, {"id": "other"}, {"id": "q2"}], "f")
  with open(store.path("nq"), "a") as f:
    f.write("garbage\n" + '{"index": 3, "id": "q3"}\n')
  with pytest.raises(PredictionError, match="line 4: not JSON"):
    store.load("nq")


# --- published rows against the spec's tables --------------------------------------------------
def _spec_table(path, header_start):
  """Rows (label first) of the markdown table whose header line starts with `header_start`."""
  lines = open(path, encoding="utf-8").read().splitlines()
  start = next(i for i, l in enumerate(lines) if l.startswith(header_start))
  rows = []
  for line in lines[start + 2:]:
    if not line.startswith("|"):
      break
    rows.append([c.strip().strip("*").strip() for c in line.strip("|").split("|")])
  return rows


def _spec_rows(path, header_start):
  return {r[0]: r[1:] for r in _spec_table(path, header_start)}


@pytest.mark.skipif(not os.path.isdir(SPECS), reason="specs absent")
def test_published_rows_match_the_spec_tables():
  from ragjax.eval.published import load_published
  pub = load_published()
  spec = os.path.join(SPECS, "seeds_rex_autorefine_r3.md")
  keys = ["nq", "triviaqa", "popqa", "hotpotqa", "twowiki", "musique", "bamboogle"]
  checked = 0
  for row in pub["search_r1_7"]["rows"]:
    if row["method"].startswith("AutoRefine"):
      cells = _spec_rows(spec, "| Method | NQ | TriviaQA")[row["method"]]
      cells = [float(c) * 100 for c in cells]
    else:
      size = {"qwen2.5-3b": "| Qwen2.5-3B |", "qwen2.5-7b": "| Qwen2.5-7B |"}[row["model"]]
      cells = [float(c) for c in _spec_rows(spec, size)[row["method"]]]
    assert [row["values"][k]["em"] for k in keys] == pytest.approx(cells[:7]), row["method"]
    assert row["averages"]["Avg"]["em"] == pytest.approx(cells[7])
    checked += 1
  for row in pub["r3_rag"]["rows"]:
    head = {"llama-3.1-8b": "| Llama-3.1-8B | Retr.", "qwen2.5-7b": "| Qwen2.5-7B | Retr."}
    name, retr = re.match(r"(.*) \((.*)\)", row["method"]).groups()
    cells = next(r for r in _spec_table(spec, head[row["model"]])
                 if r[0] == name and r[1] == retr)
    for k, cell in zip(["hotpotqa", "twowiki", "musique"], cells[2:5]):
      acc, f1, em = (float(x) for x in cell.split("/"))
      assert row["values"][k] == {"acc": acc, "f1": f1, "em": em}, (row["method"], k)
    assert row["averages"]["Avg"]["acc"] == float(cells[5])
    checked += 1
  ur2 = _spec_rows(os.path.join(SPECS, "seeds_ur2_rezero.md"), "| Model / method | Hist")
  names = {("UR2", "qwen2.5-7b"): "Qwen-7B UR²", ("UR2", "qwen2.5-3b"): "Qwen-3B UR²",
           ("UR2", "llama-3.1-8b"): "LLaMA-8B UR²", ("Vanilla RL", "qwen2.5-7b"):
           "Qwen-7B Vanilla RL", ("Vanilla RL", "qwen2.5-3b"): "Qwen-3B Vanilla RL"}
  order = ["history", "philosophy", "economics", "law", None, "medqa", "mmlupro_med", None,
           "math500", "minerva"]
  for row in pub["ur2"]["rows"]:
    if (row["method"], row["model"]) not in names:
      continue
    cells = ur2[names[(row["method"], row["model"])]]
    for k, cell in zip(order, cells):
      if k:
        assert list(row["values"][k].values()) == [float(cell)], (row["method"], k)
    checked += 1
  assert checked == 8 + 8 + 5


# --- UR² metrics and readers ------------------------------------------------------------------
def test_ur2_metrics():
  from ragjax.eval.scoring import score_answer
  from ragjax.metrics import letter_match, math_equal
  assert math_equal("\\frac{1}{2}", ["0.5"]) == 1.0
  assert math_equal("(3,\\pi/2)", ["\\left( 3, \\frac{\\pi}{2} \\right)"]) == 1.0
  assert math_equal("3", ["4"]) == 0.0 and math_equal(None, ["4"]) == 0.0
  assert math_equal("x^2+2x+1", ["(x+1)^2"]) == 1.0
  assert letter_match(" b ", ["B"]) == 1.0 and letter_match("BC", ["B"]) == 0.0
  assert score_answer("B", ["B"], ("em", "letter_em")) == {"em": 1.0, "letter_em": 1.0}
  assert score_answer(None, ["B"], ("f1", "math_equiv")) == {"f1": 0.0, "math_equiv": 0.0}


def test_plain_qa_reader(tmp_path):
  from ragjax.data.readers import read_examples
  from ragjax.data.schema import DataError
  p = tmp_path / "qa.jsonl"
  p.write_text('{"idx": 7, "question": "Who?", "answer": "Ann"}\n'
               '{"question": "When?", "answer": ["1999", "in 1999"]}\n')
  ex = read_examples(str(p), "qa")
  assert [(e.id, e.golden_answers) for e in ex] == [("qa_7", ("Ann",)),
                                                     ("qa_1", ("1999", "in 1999"))]
  c = tmp_path / "b.csv"
  c.write_text("Question,Answer\nWho won?,Bo\n")
  assert read_examples(str(c), "qa")[0].golden_answers == ("Bo",)
  p.write_text('{"question": "Who?"}\n')
  with pytest.raises(DataError, match=r"qa.jsonl line 1: field 'answer': missing"):
    read_examples(str(p), "qa")


# --- data prep --------------------------------------------------------------------------------
@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared data absent")
def test_searchr1_training_mixture(tmp_path):
  nq = tmp_path / "nq_train.jsonl"
  with open(os.path.join(SHARED_DATA, "flashrag_format", "nq_test_sample1000.jsonl")) as f:
    nq.write_text("".join(f.readlines()[:30]))
  hq = os.path.join(SHARED_DATA, "hotpotqa", "rpt_hf_validation_sample_train300.jsonl")
  env = dict(os.environ, PYTHONPATH=ROOT)

  def run(out):
    p = preloaded.run([sys.executable, "-m", "ragjax.data.prepare", "searchr1-train", "--nq",
                        str(nq), "--hotpotqa", hq + ":hotpotqa", "--out", str(out)], env=env,
                      capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p
  p = run(tmp_path / "a")
  run(tmp_path / "b")
  a = (tmp_path / "a" / "train.jsonl").read_text()
  assert a == (tmp_path / "b" / "train.jsonl").read_text()        # seeded shuffle
  recs = [json.loads(l) for l in a.splitlines()]
  sources = [r["metadata"]["data_source"] for r in recs]
  assert sources.count("nq") == 30 and sources.count("hotpotqa") == 300
  assert sources[:30] != ["nq"] * 30                              # shuffled
  assert "--config.data.train_files" in p.stdout
  from ragjax.data.readers import read_examples
  assert len(read_examples(str(tmp_path / "a" / "train.jsonl"))) == 330
  dup = preloaded.run([sys.executable, "-m", "ragjax.data.prepare", "searchr1-train", "--nq",
                        str(nq), str(nq), "--out", str(tmp_path / "c")], env=env,
                      capture_output=True, text=True, timeout=300)
  assert dup.returncode == 2 and "appears twice" in dup.stderr


# --- what a suite pins, and datasets from the command line ------------------------------------
def test_overrides_of_what_a_suite_pins_are_refused():
  from ragjax.eval.suites import check_overrides, get_suite
  c = _config()
  s = get_suite(c.eval, "search_r1")
  for path, field in (("protocol.top_k", "protocol.top_k=3"),
                      ("sampler.max_new_tokens", "sampler.max_new_tokens=500"),
                      ("sampler.temperature", "greedy=True")):
    with pytest.raises(ValueError, match=re.escape(f"--config.{path}: suite search_r1 pins "
                                                   f"{field}")):
      check_overrides(s, [path])
  check_overrides(s, ["eval.top_k", "protocol.obs_max_chars", "eval.batch_size"])   # not pinned
  ur2 = get_suite(c.eval, "ur2")
  with pytest.raises(ValueError, match=r"pins datasets\.history\.protocol\.task='mcq'"):
    check_overrides(ur2, ["protocol.task"])
  with pytest.raises(ValueError, match=r"pins top_p=0\.5"):
    check_overrides(ur2, ["sampler.top_p"])
  with pytest.raises(ValueError, match=r"pins greedy=True"):
    check_overrides(s, ["sampler.top_k"])          # greedy decoding would ignore it
  check_overrides(ur2, ["sampler.top_k"])          # sampled: it applies (run.json records it)


def test_datasets_from_the_command_line():
  from ragjax.eval.suites import add_datasets, get_suite, select_datasets
  s = get_suite(_config().eval, "ur2")
  s2 = add_datasets(s, ["gpqa=/d/gpqa.jsonl,format=mcq,metric=letter_em,name=GPQA,paper_n=198,"
                        "protocol.task=mcq,where.domain=bio"])
  g = s2.dataset("gpqa")
  assert (g.file, g.format, g.metric, g.name, g.paper_n) == ("/d/gpqa.jsonl", "mcq", "letter_em",
                                                              "GPQA", 198)
  assert g.protocol == (("task", "mcq"),) and g.where == (("domain", "bio"),)
  assert s2.keys[-1] == "gpqa" and s2.groups == s.groups and s2.metrics_of("gpqa") == ("letter_em",)
  assert select_datasets(s2, ["law", "gpqa", "medqa"]).keys == ("law", "medqa", "gpqa")
  for bad, msg in (("nope", "expected KEY=FILE"), ("x=f,colour=red", "cannot read 'colour=red'"),
                   ("x=f,metric=bleu", r"--add_dataset x\.metric='bleu'; known"),
                   ("law=f", "already has a dataset law; point it at another file with "
                             "--config.eval.suites.ur2.datasets.law.file=PATH")):
    with pytest.raises(ValueError, match=msg):
      add_datasets(s, [bad])
  with pytest.raises(ValueError, match=r"no dataset hist \(did you mean history\?\); its "
                                       r"datasets: history, philosophy"):
    select_datasets(s, ["hist"])


def test_every_suite_sampler_takes_max_new_tokens_on_a_locked_config():
  """A suite that leaves the sampler to the method config still has the field, so the command
  line (a locked config: no new fields) can set it; unset, it changes nothing."""
  from ragjax.eval.suites import get_suite
  assert get_suite(_config().eval, "ur2").sampler == ()
  c = _config()
  c.lock()
  for name in c.eval.suites:
    c.eval.suites[name].sampler.max_new_tokens = 24
    assert get_suite(c.eval, name).sampler == (("max_new_tokens", 24),), name


def test_dataset_override_errors_name_the_suites_datasets(tmp_path):
  """`--config.eval.suites.S.datasets.K.file=...` for a K the suite lacks (ml-collections says
  only "'K'"): one line naming the suite's datasets and --add_dataset; also from a flagfile."""
  from ragjax.recipes.eval_suite import dataset_override_error
  cfg = "--config=" + os.path.join(ROOT, "configs", "search_r1.py") + ":tiny"
  msg = dataset_override_error(["x", cfg, "--config.eval.suites.search_r1.datasets.ambigqa.file=f"],
                               cfg)
  assert msg.startswith("--config.eval.suites.search_r1.datasets.ambigqa.file: suite search_r1 "
                        "has no dataset ambigqa; its datasets: nq, triviaqa, popqa")
  assert "--add_dataset KEY=FILE" in msg and "\n" not in msg
  flagfile = tmp_path / "flags.txt"
  flagfile.write_text("--config.eval.suites.serch_r1.datasets.nq.file=f\n")
  msg = dataset_override_error(["x", cfg, f"--flagfile={flagfile}"], cfg)
  assert msg.endswith("the config has no suite serch_r1; its suites: " + ", ".join(
      _config().eval.suites))
  assert dataset_override_error(["x", cfg, "--config.eval.batch_size=3"], cfg) is None


def test_run_file_checks_every_setting_and_adds_new_datasets(tmp_path):
  """run.json: the batch size is recorded (and checked) when the suite samples; a resume may
  add datasets but not change one it shares; a run.json without fingerprints is refused."""
  from ragjax.eval.run_record import check_run_file, run_record
  from ragjax.eval.suites import get_suite
  c = _config()
  ur2 = get_suite(c.eval, "ur2")
  rec = lambda datasets: run_record(c, ur2, checkpoint={"path": "/ckpt", "sha256": "1"},
                                    retrieval={"url": "http://h", "server": {}}, judge={},
                                    datasets=datasets)
  law = {"file": {"path": "/d/law", "bytes": 3, "sha256": "a"}, "protocol": {"top_k": 10}}
  check_run_file(str(tmp_path), rec({"law": law}))
  stored = check_run_file(str(tmp_path), rec({"medqa": dict(law, file={"sha256": "b"})}))
  assert sorted(stored["datasets"]) == ["law", "medqa"]
  assert json.load(open(tmp_path / "run.json"))["datasets"]["medqa"]["file"] == {"sha256": "b"}
  with pytest.raises(ValueError, match=r"datasets\.law\.file\.sha256: stored='a' now='z'"):
    check_run_file(str(tmp_path), rec({"law": dict(law, file=dict(law["file"], sha256="z"))}))
  batch = c.eval.batch_size
  c.eval.batch_size = batch + 1
  with pytest.raises(ValueError, match=rf"config\.eval\.batch_size: stored={batch} "
                                       rf"now={batch + 1}"):
    check_run_file(str(tmp_path), rec({}))
  greedy = run_record(c, get_suite(c.eval, "search_r1"), checkpoint={}, retrieval={}, judge={},
                      datasets={})
  assert "batch_size" not in greedy["config"]["eval"]       # checked only when sampling
  (tmp_path / "old").mkdir()
  (tmp_path / "old" / "run.json").write_text(json.dumps({"checkpoint": "/ckpt"}))
  with pytest.raises(ValueError, match="older ragjax"):
    check_run_file(str(tmp_path / "old"), greedy)


# --- smaller items -----------------------------------------------------------------------------
def test_readme_evaluate_commands_name_real_config_arguments():
  """Every `python -m ragjax.evaluate --config=configs/X.py:ARG` in README.md and docs/ is
  accepted by that config (AutoRefine's sizes end in -base / -instruct)."""
  import glob
  import importlib
  pages = [os.path.join(ROOT, "README.md")] + sorted(
      glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
  readme = "\n".join(open(p, encoding="utf-8").read() for p in pages)
  found = re.findall(r"ragjax\.evaluate --config=configs/(\w+)\.py:([\w.-]+)", readme)
  assert ("autorefine", "qwen2.5-3b-base") in found and len(found) >= 5
  for module, arg in found:
    importlib.import_module(module).get_config(arg)


def test_published_rows_cite_the_papers():
  """The published row printed under a table names the paper and its table, not a file
  outside the repository."""
  from ragjax.eval.published import load_published
  for table, v in load_published().items():
    if table.startswith("_"):
      continue
    for row in v["rows"]:
      assert "Table" in row["source"] and ".md" not in row["source"], row["source"]


def _r3_suite():
  from ragjax.eval.suites import get_suite
  return get_suite(_config().eval, "r3_rag")


def test_r3_table_shows_every_published_metric_and_the_judge_note():
  """R3-RAG's published row has ACC, F1 and EM: the table shows each, with our differences;
  with a judge configured, no note says ACC needs one."""
  from ragjax.eval.paper_table import summarize
  from ragjax.eval.published import published_row
  suite = _r3_suite()
  preds = {k: _preds(k, [1, 0], extra=[{"acc": 1.0, "cover_em": 1.0}, {"acc": 1.0, "cover_em": 0}])
           for k in suite.keys}
  row = published_row("r3_rag", "R3-RAG (E5)", "qwen2.5-7b")
  s = summarize(suite, preds, {k: 2 for k in suite.keys}, {}, published=row,
                info={"judge": "J", "judge_calls": 6, "judge_unparsed": 0})
  md = s["markdown"]
  assert "| published ACC (judge): R3-RAG (E5) / qwen2.5-7b | 65.5 |" in md
  assert "| published F1: R3-RAG (E5) / qwen2.5-7b | 59.7 |" in md
  assert "| published EM: R3-RAG (E5) / qwen2.5-7b | 46.4 |" in md
  assert s["delta_by_metric"]["f1"]["hotpotqa"] == pytest.approx(50.0 - 59.7)
  assert s["delta_by_metric"]["em"]["hotpotqa"] == pytest.approx(50.0 - 46.4)
  assert s["delta"]["hotpotqa"] == pytest.approx(100.0 - 65.5)
  assert "| ours − published F1 (points) | -9.7 |" in md
  assert "ACC judged by J" in md and "needs eval.judge" not in md
  bare = summarize(suite, preds, {k: 2 for k in suite.keys}, {}, published=row)["markdown"]
  assert "ACC: no judge configured" in bare


def test_ur2_note_says_what_retrieval_was_used():
  """UR² summarises its top-10 passages with an LLM; a run over a plain index reads raw
  passages, and the table says which, instead of claiming summarised retrieval."""
  from ragjax.eval.paper_table import summarize
  from ragjax.eval.run_record import describe_retrieval
  from ragjax.eval.suites import get_suite
  suite = get_suite(_config().eval, "ur2")
  raw = describe_retrieval({"index": "/idx", "sha256": "ab" * 32, "files": {}})
  assert raw.startswith("index /idx (") and raw.endswith("raw passages, not summarised")
  proxy = describe_retrieval({"url": "http://h/retrieve",
                              "server": {"summariser": "http://j/v1", "mode": "weak"}})
  assert proxy == "server http://h/retrieve: passages summarised by http://j/v1 (mode weak)"
  preds = {"hotpotqa": _preds("hotpotqa", [1, 0])}
  md = summarize(suite, preds, {"hotpotqa": 2}, {k: "x" for k in suite.keys if k != "hotpotqa"},
                 info={"retrieval": raw})["markdown"]
  assert "- retrieval: index /idx (" in md
  assert "top-10 is with UR²'s summarised retrieval" not in md


def test_compare_reports_both_averages_and_unequal_question_counts():
  from ragjax.eval.paired import compare_runs
  suite = _suite(metrics=("em",))
  a = {"a": _preds("a", [1, 1, 0, 0]), "b": _preds("b", [1, 0])}
  b = {"a": _preds("a", [1, 0]), "b": _preds("b", [0, 0])}
  rows, md = compare_runs(suite, a, b, resamples=200)
  avg = rows[-1]
  assert avg["a"] == pytest.approx((100 + 50) / 2) and avg["b"] == pytest.approx((50 + 0) / 2)
  assert "| Avg (macro) | 4 | 75.0 | 25.0 | 50.0 |" in md
  assert rows[0]["n_a"] == 4 and rows[0]["n_b"] == 2
  assert "A: 4 questions, B: 2; compared on the 2 both have" in md


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared data absent")
def test_prepare_with_a_missing_dataset_writes_nothing(tmp_path):
  """`prepare suite` of a suite whose TriviaQA is not on this machine: without --set or
  --allow-missing, one error line and nothing written (no flagfile missing a dataset); with
  --allow-missing, the flagfile lists it as missing."""
  from ragjax.data.prepare import main
  args = ["suite", "--suite", "search_r1", "--limit", "1", "--data_root", SHARED_DATA]
  with pytest.raises(SystemExit) as e:
    main(args + ["--out", str(tmp_path / "a")])
  assert e.value.code == 2 and not (tmp_path / "a").exists()
  assert main(args + ["--out", str(tmp_path / "b"), "--allow-missing"]) == 0
  flags = (tmp_path / "b" / "search_r1" / "flags.txt").read_text()
  assert "# MISSING triviaqa: " in flags and ".nq.file=" in flags


def test_a_sampled_set_says_so_in_the_table_and_its_notes():
  """A dataset whose file samples the paper's set (`sample`: PopQA's default file, 1,000 of
  14,267) keeps `paper_n` in the questions row and is named a SAMPLE in the notes; a smaller
  file without `sample` gets the generic note; the Search-R1 suites mark PopQA's default."""
  from ragjax.eval.paper_table import summarize
  suite = _suite(datasets=dict(a=dict(name="A", file="a.jsonl", paper_n=10,
                                      sample="a_sample4: 4 of A's test split"),
                               b=dict(name="B", file="b.jsonl", paper_n=5),
                               c=dict(name="C", file="c.jsonl"),
                               d=dict(name="D", file="d.jsonl")))
  preds = {k: _preds(k, [1, 0, 0, 1]) for k in "abcd"}
  md = summarize(suite, preds, {k: 4 for k in "abcd"}, {})["markdown"]
  assert "| questions | 4 (a sample; paper 10) | 4 (paper 5) | 4 | 4 |" in md
  assert "A: a SAMPLE, 4 of the paper's 10 questions (a_sample4: 4 of A's test split)" in md
  assert "eval.suites.s.datasets.a.file" in md
  assert "B: 4 questions, the paper's set has 5 (a smaller file or --limit" in md
  from ragjax.eval.suites import get_suite
  from ragjax.wiring.config_files import load_config
  c = load_config("configs/search_r1.py:qwen2.5-3b")
  popqa = get_suite(c.eval, "search_r1").dataset("popqa")
  assert popqa.paper_n == 14267 and "1,000 questions" in popqa.sample


def test_step_table_one_row_per_step_dash_for_a_missing_metric():
  from ragjax.report.table import step_table
  records = [{"step": 1, "reward": 0.25, "filter/kept_groups": 3.0},
             {"loss": 1.0},                                  # no step: not a row
             {"step": 2, "reward": 0.5, "note": "x"}]
  assert step_table(records, [("reward", "reward"), ("kept", "filter/kept_groups"),
                              ("note", "note")]).splitlines() == [
      "| step | reward | kept | note |", "|---|---|---|---|",
      "| 1 | 0.250 | 3.000 | - |", "| 2 | 0.500 | - | x |"]
