"""The Search-R1 suite end to end through `python -m ragjax.evaluate --suite search_r1`.

Real parts only: `python -m ragjax.data.prepare suite` slices every shared file the suite names
into FlashRAG jsonl (TriviaQA is not on this machine and must be reported missing), a BM25
index of 300 shared passages is built with `python -m ragjax.retrieval.build`, and the policy
is a small HF checkpoint (`save_decoder`) over a BPE tokenizer trained here, with weights that
make greedy decoding search once and then answer "December 1972" (tests/_eval_helpers.py),
run through the Search-R1 protocol, engine and JAX sampler.  Checked: the table's numbers
against the per-question predictions re-scored here with an independent SQuAD normaliser and
answer regex; a run killed with SIGKILL and started again gives the same table; `--compare`
of two identical runs; the published row and its differences.
"""

import collections
import json
import os
import re
import signal
import string
import subprocess
import sys
import time

import pytest

from conftest import SHARED_DATA
from _xla_helpers import xla_flags
import _preloaded as preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
ANSWER = "December 1972"
pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared data absent")


def _env():
  return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=TESTS + os.pathsep + ROOT,
              XLA_FLAGS=xla_flags(1))


def _run(args, timeout=600):
  proc = preloaded.run([sys.executable, *args], cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return proc


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  from _eval_helpers import chain_policy, corpus_slice, train_tokenizer_here
  tmp = tmp_path_factory.mktemp("suite")
  tok = train_tokenizer_here(ANSWER)
  chain_policy(str(tmp / "policy"), tok, ANSWER)
  prep = _run(["-m", "ragjax.data.prepare", "suite", "--suite", "search_r1", "--limit", "4",
               "--allow-missing",
               "--out", str(tmp / "data"), "--data_root", SHARED_DATA], timeout=300)
  # a shorter Bamboogle slice, so the macro and the sample-weighted averages differ
  bam = tmp / "data" / "search_r1" / "bamboogle.jsonl"
  bam.write_text("".join(bam.read_text().splitlines(True)[:2]))
  corpus_slice(SHARED_DATA, str(tmp / "corpus.jsonl"))
  _run(["-m", "ragjax.retrieval.build", "--corpus", str(tmp / "corpus.jsonl"), "--out",
        str(tmp / "index"), "--backend", "bm25", "--no-progress"], timeout=300)
  return tmp, prep


def _evaluate_args(tmp, out, *extra):
  return ["-m", "ragjax.evaluate", "--config=configs/search_r1.py:tiny",
          f"--config.workdir={tmp / 'work'}", f"--checkpoint={tmp / 'policy'}",
          "--suite=search_r1", f"--index={tmp / 'index'}", f"--out={out}",
          f"--flagfile={tmp / 'data' / 'search_r1' / 'flags.txt'}",
          "--config.eval.batch_size=2", "--config.eval.method=Search-R1-base",
          "--config.eval.model=qwen2.5-3b",
          # CPU-sized turns; the rest of the protocol (top-3, 4 turns) is the suite's
          "--config.eval.suites.search_r1.sampler.max_new_tokens=24",
          "--config.eval.suites.search_r1.protocol.obs_max_tokens=48", *extra]


@pytest.fixture(scope="module")
def full_run(setup):
  tmp, _ = setup
  out = tmp / "full"
  proc = _run(_evaluate_args(tmp, out))
  return out, proc


# --- an independent re-scoring of the predictions ---------------------------------------------
def _norm(s):
  s = "".join(c for c in s.lower() if c not in set(string.punctuation))
  return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def _f1(pred, gold):
  p, g = _norm(pred).split(), _norm(gold).split()
  same = sum((collections.Counter(p) & collections.Counter(g)).values())
  if _norm(pred) in ("yes", "no", "noanswer") or _norm(gold) in ("yes", "no", "noanswer"):
    return float(_norm(pred) == _norm(gold))
  return 0.0 if same == 0 else 2 * same / (len(p) + len(g))


def _rescore(rec):
  policy = "".join(s["text"] for s in rec["trajectory"]["spans"] if s["label"] == "POLICY")
  m = re.search(r"<answer>(.*?)</answer>", policy, re.S)
  ans = m.group(1).strip() if m else None
  golds = rec["golden_answers"]
  if ans is None:
    return None, {"em": 0.0, "f1": 0.0, "cover_em": 0.0}, policy.count("<search>")
  return ans, {"em": float(any(_norm(ans) == _norm(g) for g in golds)),
               "f1": max(_f1(ans, g) for g in golds),
               "cover_em": float(any(_norm(g) in _norm(ans) for g in golds))}, \
      policy.count("</search>")


def test_table_matches_predictions_rescored_independently(setup, full_run):
  tmp, prep = setup
  out, proc = full_run
  assert "MISSING triviaqa" in prep.stderr
  table = json.loads((out / "table.json").read_text())
  cols = table["columns"]
  assert cols["triviaqa"]["status"] == "missing"
  assert "TriviaQA: MISSING" in (out / "table.md").read_text()
  sizes = {"nq": 4, "popqa": 4, "hotpotqa": 4, "twowiki": 4, "musique": 4, "bamboogle": 2}
  per_ds, pooled = {}, collections.defaultdict(list)
  for key, n in sizes.items():
    recs = [json.loads(l) for l in (out / "predictions" / f"{key}.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in recs) == list(range(n))
    golds = [json.loads(l)["golden_answers"] for l in
             (tmp / "data" / "search_r1" / f"{key}.jsonl").read_text().splitlines()]
    means = collections.defaultdict(float)
    for r in recs:
      assert r["golden_answers"] == golds[r["index"]]
      ans, sc, searches = _rescore(r)
      assert ans == ANSWER and r["answer"] == ans and searches == r["searches"] == 1
      assert r["queries"] == ["capital city"] and len(r["doc_ids"][0]) == 3   # top-3 hits
      for m, v in sc.items():
        assert r["scores"][m] == pytest.approx(v), (key, r["index"], m)
        means[m] += v / n
        pooled[m].append(v)
    per_ds[key] = means
    assert cols[key]["n"] == n and cols[key]["status"] == "ok"
    for m in ("em", "f1", "cover_em"):
      assert cols[key]["values"][m] == pytest.approx(100 * means[m]), (key, m)
    assert cols[key]["searches"] == pytest.approx(1.0)
  # NQ's first question has the alias "December 1972": exactly one hit in the whole slice.
  assert per_ds["nq"]["em"] == pytest.approx(0.25) and sum(pooled["em"]) == 1
  macro = sum(per_ds[k]["em"] for k in sizes) / len(sizes) * 100
  general = (per_ds["nq"]["em"] + per_ds["popqa"]["em"]) / 2 * 100
  avgs = table["averages"]
  assert avgs["Avg (macro)"]["em"]["macro"] == pytest.approx(macro)
  assert avgs["Avg (macro)"]["complete"] is False and avgs["Avg (macro)"]["em"]["over"] == 6
  assert avgs["General"]["em"]["macro"] == pytest.approx(general)
  assert table["weighted"]["em"] == pytest.approx(100 / 22)
  assert macro != pytest.approx(100 / 22)
  # the published Search-R1-base 3B row and our difference, per dataset (not for an
  # average missing TriviaQA)
  assert table["published"]["values"]["nq"]["em"] == 42.1
  assert table["delta"]["nq"] == pytest.approx(25.0 - 42.1)
  assert set(table["delta"]) == set(sizes)      # the row has no group averages
  md = (out / "table.md").read_text()
  assert "| EM | 25.0 | – | 0.0 |" in md and "Avg (weighted by n)" in md
  csv_head = (out / "table.csv").read_text().splitlines()[0]
  assert csv_head.startswith(",NQ,TriviaQA,PopQA,HotpotQA,2Wiki,MuSiQue,Bamboogle")
  assert re.search(r"\d+\.\d+ q/s", proc.stdout) and "ETA" in proc.stdout


def _table_core(out):
  t = json.loads((out / "table.json").read_text())
  return {k: t[k] for k in ("columns", "averages", "weighted", "delta", "published")}


def test_killed_run_resumes_to_the_same_table(setup, full_run):
  tmp, _ = setup
  out = tmp / "killed"
  proc = subprocess.Popen([sys.executable, *_evaluate_args(tmp, out)], cwd=ROOT, env=_env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  preds = out / "predictions"
  t_end = time.time() + 300
  written = 0
  while time.time() < t_end and proc.poll() is None:
    files = list(preds.glob("*.jsonl")) if preds.exists() else []
    written = sum(len(f.read_text().splitlines()) for f in files)
    if written >= 2:
      break
    time.sleep(0.02)
  assert proc.poll() is None, "the run finished before it could be killed"
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  left = sum(len(f.read_text().splitlines()) for f in preds.glob("*.jsonl"))
  assert 2 <= left < 22
  resumed = _run(_evaluate_args(tmp, out))
  assert f"({left} on disk)" in resumed.stdout
  assert _table_core(out) == _table_core(full_run[0])
  # a resume with a changed protocol is refused, naming the field
  bad = preloaded.run([sys.executable, *_evaluate_args(
      tmp, out, "--config.eval.suites.search_r1.protocol.top_k=2")], cwd=ROOT, env=_env(),
      capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and "settings.protocol.top_k: stored=3 now=2" in bad.stderr


def test_compare_two_runs(setup, full_run):
  tmp, _ = setup
  out, _ = full_run
  proc = _run(["-m", "ragjax.evaluate", "--config=configs/search_r1.py:tiny",
               "--suite=search_r1", f"--out={out}", f"--compare={tmp / 'killed'}"])
  rows = json.loads((out / "compare.json").read_text())["rows"]
  by = {r["key"]: r for r in rows}
  assert by["triviaqa"]["status"] == "not in both"
  assert by["nq"]["n"] == 4 and by["nq"]["diff"] == 0 and by["nq"]["mcnemar"]["p"] == 1.0
  assert by["_average"]["n"] == 22 and by["_average"]["ci95"] == [0.0, 0.0]
  assert "McNemar p" in proc.stdout


def test_r3_suite_judges_acc_with_a_local_model(setup, tmp_path):
  """The R3-RAG suite's ACC through a real judge (`LocalChatModel` on the small checkpoint,
  the r3_answer template): one call per answered question; its replies do not follow the
  template, so each is unparsed and scored False, and the table says so."""
  from ragjax.recipes.eval_suite import SuiteOptions, evaluate_suite
  tmp, _ = setup
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import search_r1
  c = search_r1.get_config("tiny")
  c.workdir = str(tmp_path / "work")
  c.eval.batch_size = 2
  c.eval.judge.checkpoint = str(tmp / "policy")
  c.eval.suites.r3_rag.sampler = {"max_new_tokens": 24}
  c.eval.suites.r3_rag.protocol.obs_max_chars = 200
  c.eval.method, c.eval.model = "R3-RAG (E5)", "qwen2.5-7b"
  md = evaluate_suite(c, SuiteOptions(suite="r3_rag", checkpoint=str(tmp / "policy"),
                                      out=str(tmp_path / "r3"), index=str(tmp / "index"),
                                      data_root=SHARED_DATA, limit=2))
  t = json.loads((tmp_path / "r3" / "table.json").read_text())
  assert t["info"]["judge_calls"] == 6 and t["info"]["judge_unparsed"] == 6
  for key in ("hotpotqa", "twowiki", "musique"):
    assert t["columns"][key]["values"]["acc"] == 0.0
    assert t["columns"][key]["metric"] == "acc"
  assert "ACC judged by policy (in process) (6 of 6 replies in this process unparsed" in md
  assert t["published"]["values"]["hotpotqa"] == {"acc": 65.5, "f1": 59.7, "em": 46.4}
  assert t["delta"]["Avg (macro)"] == pytest.approx(-53.8)


def test_ur2_suite_mixes_tasks_and_metrics(setup, tmp_path):
  """The UR² suite through the UR² protocol: each column runs with its own task (multiple
  choice with its options, math) and is scored by its own metric (letter EM, math
  equivalence); the chain policy never writes a UR² answer, so every row has none, and
  the table's paper-metric row names each column's metric."""
  from ragjax.eval.harness import dataset_config
  from ragjax.eval.suites import get_suite
  from ragjax.recipes.eval_suite import SuiteOptions, evaluate_suite
  tmp, _ = setup
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import search_r1
  c = search_r1.get_config("tiny")
  c.workdir = str(tmp_path / "work")
  c.protocol.name = "ur2"
  c.eval.batch_size = 1
  c.sampler.update(dict(max_cache_length=2048, prompt_buckets=(256, 512, 1024, 2048)))
  c.rollout.widths = tuple(range(256, 2049, 256))
  s = c.eval.suites.ur2
  s.sampler = {"max_new_tokens": 16}
  s.protocol.top_k = 2
  for key in ("philosophy", "economics", "law", "mmlupro_med", "minerva", "hotpotqa",
              "twowiki", "bamboogle", "musique"):      # multiple choice and math run here
    s.datasets[key].file = "absent.jsonl"
  suite = get_suite(c.eval, "ur2")
  assert dataset_config(c, suite, suite.dataset("medqa")).protocol.task == "mcq"
  md = evaluate_suite(c, SuiteOptions(suite="ur2", checkpoint=str(tmp / "policy"),
                                      out=str(tmp_path / "ur2"), index=str(tmp / "index"),
                                      data_root=SHARED_DATA, limit=1))
  t = json.loads((tmp_path / "ur2" / "table.json").read_text())
  cols = t["columns"]
  assert [k for k, v in cols.items() if v["status"] == "ok"] == ["history", "medqa", "math500"]
  # a multiple-choice / math column reports its own metric only (not EM / F1 / cover-EM)
  assert cols["history"]["values"] == {"letter_em": 0.0}
  assert cols["math500"]["values"] == {"math_equiv": 0.0}
  rec = json.loads((tmp_path / "ur2" / "predictions" / "history.jsonl").read_text())
  assert rec["scores"] == {"letter_em": 0.0}
  rec = json.loads((tmp_path / "ur2" / "predictions" / "medqa.jsonl").read_text())
  prompt = "".join(s["text"] for s in rec["trajectory"]["spans"] if s["label"] == "PROMPT")
  assert "multiple-choice question" in prompt and "\nA. " in prompt and "\nE. " in prompt
  assert "| paper metric | 0.0 (letter EM) |" in md and "0.0 (math equiv.)" in md
  assert "UR²'s LLM judge (LSJ) is not wired" in md


def test_autorefine_suite_runs_its_own_protocol(setup, tmp_path):
  """configs/suites.py's AutoRefine suite (the 7 Search-R1 sets under AutoRefine's eval script:
  3 turns, 1024-token observations) end to end on the chain policy: its pinned settings reach
  every dataset's config, TriviaQA is reported missing, and each column's EM is the chain
  policy's answer re-scored here."""
  from ragjax.eval.harness import dataset_config
  from ragjax.eval.suites import get_suite
  from ragjax.recipes.eval_suite import SuiteOptions, evaluate_suite
  tmp, _ = setup
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import search_r1
  c = search_r1.get_config("tiny")
  c.workdir = str(tmp_path / "work")
  c.eval.batch_size = 2
  suite = get_suite(c.eval, "autorefine")
  d = dataset_config(c, suite, suite.dataset("nq"))
  assert (d.protocol.max_turns, d.protocol.obs_max_tokens, d.protocol.top_k) == (3, 1024, 3)
  assert (c.protocol.max_turns, c.protocol.obs_max_tokens) == (2, 64)   # the tiny config's own
  c.eval.suites.autorefine.sampler = {"max_new_tokens": 24}
  c.eval.suites.autorefine.protocol.obs_max_tokens = 48
  evaluate_suite(c, SuiteOptions(suite="autorefine", checkpoint=str(tmp / "policy"),
                                 out=str(tmp_path / "ar"), index=str(tmp / "index"),
                                 data_root=SHARED_DATA, limit=1))
  t = json.loads((tmp_path / "ar" / "table.json").read_text())
  cols = t["columns"]
  assert cols["triviaqa"]["status"] != "ok"
  ok = [k for k, v in cols.items() if v["status"] == "ok"]
  assert sorted(ok) == sorted(["nq", "popqa", "hotpotqa", "twowiki", "musique", "bamboogle"])
  for key in ok:
    rec = json.loads((tmp_path / "ar" / "predictions" / f"{key}.jsonl").read_text()
                     .splitlines()[0])
    ans, scores, searches = _rescore(rec)
    assert ans == ANSWER and 1 <= searches <= 3
    for m in ("em", "f1", "cover_em"):
      assert cols[key]["values"][m] == pytest.approx(100 * scores[m]), (key, m)


# --- sampled decoding, batching -----------------------------------------------------------------
def _random_policy(tmp):
  """The setup's tokenizer with a small randomly initialised decoder: near-uniform next-token
  distributions, so sampled text differs with the sampling key."""
  import jax
  from ragjax.models.model_config import DecoderConfig
  from ragjax.models.decoder import init_params
  from ragjax.models.hf_io import load_tokenizer
  tok = load_tokenizer(str(tmp / "policy"))
  cfg = DecoderConfig(arch="qwen2", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                      num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                      rope_theta=10000.0, tie_word_embeddings=False,
                      max_position_embeddings=4096, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
  return cfg, init_params(cfg, jax.random.PRNGKey(1)), tok


def _sampled_suite(tmp):
  from ragjax.eval.suites import get_suite
  data = tmp / "data" / "search_r1"
  return get_suite({"suites": {"sampled": dict(
      columns=("nq",), datasets=dict(nq=dict(file=str(data / "nq.jsonl"), format="flashrag")),
      metrics=("em",), protocol=dict(max_turns=1), sampler=dict(max_new_tokens=6),
      greedy=False, temperature=1.0, top_p=1.0)}}, "sampled")


def test_sampled_predictions_do_not_depend_on_the_batch(setup, tmp_path):
  """Each question samples with a key of its own (not its place in a batch): a sampled suite
  run in batches of 4 and in batches of 2 writes the same trajectories."""
  from ragjax.eval.harness import run_suite
  from ragjax.retrieval import open_index
  tmp, _ = setup
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import search_r1
  c = search_r1.get_config("tiny")
  c.workdir = str(tmp_path / "work")
  suite, policy = _sampled_suite(tmp), _random_policy(tmp)
  retriever = open_index(str(tmp / "index"))
  texts = {}
  for bs in (4, 2):
    out = tmp_path / f"b{bs}"
    run_suite(c, suite, SHARED_DATA, str(out), policy=policy, retriever=retriever,
              batch_size=bs, log=lambda *_: None)
    texts[bs] = [json.loads(l)["response_text"]
                 for l in (out / "predictions" / "nq.jsonl").read_text().splitlines()]
  assert len(set(texts[4])) == 4                  # sampled: the four questions' texts differ
  assert texts[4] == texts[2]


def test_limit_below_the_batch_size_does_not_pad_to_it(setup, tmp_path):
  """`--limit 2` with eval.batch_size 64 rolls out batches of 2 rows, not 64."""
  from ragjax.eval.harness import run_suite
  from ragjax.retrieval import open_index
  tmp, _ = setup
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import search_r1
  c = search_r1.get_config("tiny")
  c.workdir, c.eval.batch_size = str(tmp_path / "work"), 64
  run = run_suite(c, _sampled_suite(tmp), SHARED_DATA, str(tmp_path / "out"),
                  policy=_random_policy(tmp), retriever=open_index(str(tmp / "index")), limit=2,
                  log=lambda *_: None)
  assert run.sizes == {"nq": 2}
  assert run.batch_size == 2 and run.rows_run == 2


# --- run.json: fingerprints and settings ---------------------------------------------------------
def _nq_only(tmp, tmp_path, keep=("nq",)):
  """The tiny Search-R1 config whose search_r1 suite reads the prepared slices of `keep` (the
  other datasets absent), CPU-sized turns."""
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import search_r1
  c = search_r1.get_config("tiny")
  c.workdir, c.eval.batch_size = str(tmp_path / "work"), 2
  c.eval.method, c.eval.model = "Search-R1-base", "qwen2.5-3b"
  s = c.eval.suites.search_r1
  s.sampler.max_new_tokens, s.protocol.obs_max_tokens = 24, 48
  for key in s.datasets:
    s.datasets[key].file = (str(tmp / "data" / "search_r1" / f"{key}.jsonl") if key in keep
                            else "absent.jsonl")
    s.datasets[key].format = "flashrag"
  return c


def _sha256(path):
  import hashlib
  return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_resume_refuses_other_weights_or_another_index_before_loading(setup, tmp_path):
  """Weights replaced at the same path, or an index rebuilt in place over another corpus: the
  resume is refused naming what changed, before the model is loaded (here the new config.json
  could not even be loaded).  The same index rebuilt from the same corpus resumes, and a
  smaller --limit than before tabulates the first questions."""
  import shutil
  from safetensors.numpy import load_file, save_file
  from _eval_helpers import corpus_slice
  from ragjax.recipes.eval_suite import SuiteOptions, evaluate_suite
  from ragjax.retrieval.index import build_index
  tmp, _ = setup
  ckpt, index, out = tmp_path / "ckpt", tmp_path / "index", tmp_path / "out"
  shutil.copytree(tmp / "policy", ckpt)
  shutil.copytree(tmp / "index", index)
  c = _nq_only(tmp, tmp_path)
  opts = lambda limit: SuiteOptions(suite="search_r1", checkpoint=str(ckpt), out=str(out),
                                    index=str(index), data_root=SHARED_DATA, limit=limit)
  evaluate_suite(c, opts(1))
  run = json.loads((out / "run.json").read_text())
  assert run["checkpoint"]["files"]["model.safetensors"]["sha256"] == _sha256(
      ckpt / "model.safetensors")
  assert run["retrieval"]["index"] == str(index) and run["retrieval"]["files"]
  weights = load_file(str(ckpt / "model.safetensors"))
  name = sorted(weights)[0]
  weights[name] = weights[name] + 1.0
  save_file(weights, str(ckpt / "model.safetensors"))
  hf = json.loads((ckpt / "config.json").read_text())
  hf["num_hidden_layers"] = 2                      # loading these weights would fail now
  (ckpt / "config.json").write_text(json.dumps(hf))
  with pytest.raises(ValueError, match=r"holds predictions of a different run \(checkpoint"
                                       r"\.files\.config\.json\.bytes: stored="):
    evaluate_suite(c, opts(2))
  preds = out / "predictions" / "nq.jsonl"
  assert len(preds.read_text().splitlines()) == 1
  shutil.rmtree(ckpt)
  shutil.copytree(tmp / "policy", ckpt)
  shutil.rmtree(index)
  build_index(corpus_slice(SHARED_DATA, str(tmp_path / "other.jsonl"), n=200), str(index),
              backend="bm25", progress=False)
  with pytest.raises(ValueError, match=r"different run \(retrieval\.files\."):
    evaluate_suite(c, opts(2))
  shutil.rmtree(index)
  shutil.copytree(tmp / "index", index)
  evaluate_suite(c, opts(2))
  assert len(preds.read_text().splitlines()) == 2
  evaluate_suite(c, opts(1))                        # a smaller --limit than before
  assert json.loads((out / "table.json").read_text())["columns"]["nq"]["n"] == 1


def test_the_table_and_run_json_hold_the_settings_used(setup, tmp_path):
  """`eval.top_k` (the evaluation's retrieval depth) wins over the suite's pinned top-3: the
  documents per search, the table's protocol line and run.json all say 2, and a resume
  without it is refused."""
  from ragjax.recipes.eval_suite import SuiteOptions, evaluate_suite
  tmp, _ = setup
  c = _nq_only(tmp, tmp_path)
  c.eval.top_k = 2
  opts = SuiteOptions(suite="search_r1", checkpoint=str(tmp / "policy"),
                      out=str(tmp_path / "out"), index=str(tmp / "index"),
                      data_root=SHARED_DATA, limit=1)
  md = evaluate_suite(c, opts)
  rec = json.loads((tmp_path / "out" / "predictions" / "nq.jsonl").read_text())
  assert len(rec["doc_ids"][0]) == 2
  protocol = next(l for l in md.splitlines() if l.startswith("- protocol: "))
  assert '"top_k": 2' in protocol and '"max_turns": 4' in protocol
  assert '"obs_max_tokens": 48' in protocol
  decoding = next(l for l in md.splitlines() if l.startswith("- decoding: "))
  assert '"greedy": true' in decoding and '"max_new_tokens": 24' in decoding
  run = json.loads((tmp_path / "out" / "run.json").read_text())
  assert run["datasets"]["nq"]["protocol"]["top_k"] == 2 and run["config"]["eval"]["top_k"] == 2
  c.eval.top_k = 0
  with pytest.raises(ValueError, match=r"config\.eval\.top_k: stored=2 now=0"):
    evaluate_suite(c, opts)


def _cli(*args, timeout=300):
  return preloaded.run([sys.executable, "-m", "ragjax.evaluate", *args], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=timeout)


def test_cli_suite_mistakes_are_one_line(setup):
  """Before any model: --suite without --config; an override of a setting the suite pins;
  a dataset override naming a dataset the suite lacks (--datasets' own errors:
  test_eval_tables.py::test_datasets_from_the_command_line)."""
  tmp, _ = setup
  base = [f"--checkpoint={tmp / 'policy'}", "--suite=search_r1", f"--index={tmp / 'index'}"]
  cfg = "--config=configs/search_r1.py:tiny"
  cases = [
      (base, "--suite needs --config=configs/<method>.py:<size>"),
      ([cfg, *base, "--config.protocol.top_k=5"],
       "--config.protocol.top_k: suite search_r1 pins protocol.top_k=3"),
      ([cfg, *base, "--config.eval.suites.search_r1.datasets.trivaqa.file=/x.jsonl"],
       "suite search_r1 has no dataset trivaqa (did you mean triviaqa?); its datasets: nq, "
       "triviaqa, popqa, hotpotqa, twowiki, musique, bamboogle")]
  for args, want in cases:
    p = _cli(*args)
    assert p.returncode == 2, (args, p.stderr[-2000:])
    # the entry point's backend line (ragjax.parallel.backend) may come first
    lines = [l for l in p.stderr.strip().splitlines() if ": backend=" not in l]
    assert len(lines) == 1 and lines[0].startswith("ragjax.evaluate: error: "), p.stderr
    assert want in lines[0] and "\\" not in lines[0], lines[0]


def test_cli_runs_a_subset_and_an_added_dataset_with_file_provenance(setup, tmp_path):
  """`--datasets nq --add_dataset extra=FILE,...`: only those two run; the others are "not
  run"; the table and run.json name each column's file, its size and SHA-256."""
  tmp, _ = setup
  extra = tmp_path / "extra.jsonl"
  extra.write_text("".join((tmp / "data" / "search_r1" / "popqa.jsonl").read_text()
                           .splitlines(True)[:2]))
  out = tmp_path / "out"
  p = _cli(*_evaluate_args(tmp, out, "--datasets=nq", "--limit=1",
                           f"--add_dataset=extra={extra},format=flashrag,metric=f1,name=Extra"
                           )[2:])
  assert p.returncode == 0, p.stderr[-3000:]
  t = json.loads((out / "table.json").read_text())
  cols = t["columns"]
  assert [k for k, v in cols.items() if v["status"] == "ok"] == ["nq", "extra"]
  assert {cols[k]["status"] for k in cols if k not in ("nq", "extra")} == {"not run"}
  assert cols["extra"]["name"] == "Extra" and cols["extra"]["metric"] == "f1"
  assert cols["extra"]["n"] == 1 and "f1" in cols["extra"]["values"]
  run = json.loads((out / "run.json").read_text())
  assert sorted(run["datasets"]) == ["extra", "nq"]
  nq = tmp / "data" / "search_r1" / "nq.jsonl"
  for key, path in (("nq", nq), ("extra", extra)):
    src = cols[key]["source"]
    assert src == run["datasets"][key]["file"]
    assert (src["path"], src["bytes"], src["sha256"]) == (str(path), path.stat().st_size,
                                                          _sha256(path))
  md = (out / "table.md").read_text()
  assert f"- NQ: {nq} ({nq.stat().st_size:,} bytes, sha256 {_sha256(nq)[:16]})" in md
  assert f"- Extra: {extra} (" in md and "TriviaQA: not run (not in --datasets)" in md


# --- `--checkpoint --data FILE --out`: per-question predictions, F1, resume, --compare ----------
def _checkpoint_args(tmp, policy, out, *extra):
  return ["-m", "ragjax.evaluate", "--config=configs/search_r1.py:tiny",
          f"--config.workdir={tmp / 'work'}", f"--checkpoint={policy}",
          f"--data={tmp / 'data' / 'search_r1' / 'nq.jsonl'}", f"--index={tmp / 'index'}",
          f"--out={out}", "--config.eval.batch_size=2", "--config.sampler.max_new_tokens=24",
          *extra]


def _preds(out, key):
  return [json.loads(l) for l in (out / "predictions" / f"{key}.jsonl").read_text().splitlines()]


def test_checkpoint_on_a_question_file_writes_predictions_resumes_and_compares(setup, tmp_path):
  """`python -m ragjax.evaluate --checkpoint D --data FILE --out DIR`: each question's
  prediction on disk (scores re-scored here), EM and F1 in the table; a run whose files were
  cut short runs only the rest, to the same predictions; another checkpoint into the same
  directory is refused; `--compare` pairs a second policy (answering "1972": EM 0, F1 2/3 on
  NQ's first question) with the first, per system, EM and F1."""
  from _eval_helpers import chain_policy
  from ragjax.models.hf_io import load_tokenizer
  from ragjax.wiring.components import EvalOptions, evaluate_checkpoint
  tmp, _ = setup
  chain_policy(str(tmp_path / "policy2"), load_tokenizer(str(tmp / "policy")), "1972")
  a, b = tmp_path / "a", tmp_path / "b"
  proc = _run(_checkpoint_args(tmp, tmp / "policy", a))
  rows = [l for l in proc.stdout.splitlines() if l.startswith("| nq.jsonl |")]
  assert [r.split(" | ")[1] for r in rows] == ["policy + retrieval", "policy, no retrieval"]
  assert "| F1 all |" in proc.stdout and (a / "table.md").read_text().strip() in proc.stdout
  first = {k: _preds(a, k) for k in ("retrieval", "no_retrieval")}
  assert [r["index"] for r in first["retrieval"]] == [0, 1, 2, 3]
  for r in first["retrieval"]:
    ans, sc, searches = _rescore(r)
    assert ans == ANSWER and r["searches"] == searches == 1
    assert r["scores"] == pytest.approx(sc)
  assert [r["scores"]["em"] for r in first["retrieval"]] == [1.0, 0.0, 0.0, 0.0]
  assert all(not any(r["doc_ids"]) for r in first["no_retrieval"])    # searched, no passages

  # cut short (one retrieval prediction and a torn line left): the rest is run, the same
  pred_dir = a / "predictions"
  kept = (pred_dir / "retrieval.jsonl").read_text().splitlines(True)[0]
  (pred_dir / "retrieval.jsonl").write_text(kept + '{"index": 1, "torn')
  (pred_dir / "no_retrieval.jsonl").unlink()
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import search_r1
  c = search_r1.get_config("tiny")
  c.workdir, c.eval.batch_size, c.sampler.max_new_tokens = str(tmp / "work"), 2, 24
  opts = dict(data=str(tmp / "data" / "search_r1" / "nq.jsonl"), index=str(tmp / "index"),
              out=str(a))
  logs = []
  import ragjax.wiring.components as parts
  real_log, parts.log = parts.log, logs.append
  try:
    evaluate_checkpoint(c, EvalOptions(checkpoint=str(tmp / "policy"), **opts))
  finally:
    parts.log = real_log
  assert "retrieval: 1 of 4 questions on disk" in logs
  for key, recs in first.items():
    assert [(r["index"], r["answer"], r["scores"]) for r in _preds(a, key)] == \
        [(r["index"], r["answer"], r["scores"]) for r in recs]
  with pytest.raises(ValueError, match="checkpoint.path: stored="):
    evaluate_checkpoint(c, EvalOptions(checkpoint=str(tmp_path / "policy2"), **opts))

  proc = _run(_checkpoint_args(tmp, tmp_path / "policy2", b, f"--compare={a}"))
  other = _preds(b, "retrieval")
  assert [r["answer"] for r in other] == ["1972"] * 4
  rows = {(r["system"], r["metric"]): r for r in json.loads((b / "compare.json").read_text())["rows"]}
  em = rows[("retrieval", "em")]
  assert em["n"] == 4 and em["diff"] == pytest.approx(-25.0)
  assert (em["mcnemar"]["b"], em["mcnemar"]["c"]) == (0, 1) and em["mcnemar"]["p"] == 1.0
  f1 = rows[("retrieval", "f1")]
  want = 100 * sum(x["scores"]["f1"] - y["scores"]["f1"] for x, y in
                   zip(other, first["retrieval"])) / 4
  assert other[0]["scores"]["f1"] == pytest.approx(2 / 3)
  assert f1["diff"] == pytest.approx(want) and f1["ci95"][0] <= want <= f1["ci95"][1]
  assert "policy + retrieval, F1" in proc.stdout and "McNemar p" in proc.stdout
